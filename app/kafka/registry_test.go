package kafka_test

// The codec against a real schema registry (Apicurio Registry's Confluent API, started by
// testenv/registry/registry-up.sh; make test starts it) and the real broker. The registry's side
// is read with plain HTTP, not with the client the codec uses.

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/url"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ckf-stream/ckf-stream/app/config"
	"github.com/ckf-stream/ckf-stream/app/kafka"
	"github.com/ckf-stream/ckf-stream/schemas"
	"github.com/ckf-stream/ckf-stream/testenv"
	"github.com/linkedin/goavro/v2"
	"github.com/twmb/franz-go/pkg/kgo"
)

// ccompat sends one request to the registry's Confluent API and decodes its JSON answer into out
// (when not nil). It returns the HTTP status.
func ccompat(t *testing.T, method, path string, body, out any) int {
	t.Helper()
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			t.Fatal(err)
		}
		rd = bytes.NewReader(b)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, testenv.Registry(t)+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/vnd.schemaregistry.v1+json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if out != nil && resp.StatusCode == http.StatusOK {
		if err := json.Unmarshal(raw, out); err != nil {
			t.Fatalf("%s %s: %v in %s", method, path, err, raw)
		}
	}
	return resp.StatusCode
}

// subjectVersion is GET /subjects/{subject}/versions/{version}'s answer.
type subjectVersion struct {
	ID      int    `json:"id"`
	Version int    `json:"version"`
	Schema  string `json:"schema"`
}

func latest(t *testing.T, subject string) subjectVersion {
	t.Helper()
	var v subjectVersion
	if st := ccompat(t, http.MethodGet, "/subjects/"+url.PathEscape(subject)+"/versions/latest", nil, &v); st != http.StatusOK {
		t.Fatalf("latest version of %s: HTTP %d", subject, st)
	}
	return v
}

// register registers schema under subject as another program would, and returns the status and
// the id (0 unless 200).
func register(t *testing.T, subject, schema string) (int, int) {
	t.Helper()
	var out struct {
		ID int `json:"id"`
	}
	st := ccompat(t, http.MethodPost, "/subjects/"+url.PathEscape(subject)+"/versions", map[string]string{"schema": schema}, &out)
	return st, out.ID
}

// setCompatibility sets the compatibility level of subject (which need not exist yet).
func setCompatibility(t *testing.T, subject, level string) {
	t.Helper()
	if st := ccompat(t, http.MethodPut, "/config/"+url.PathEscape(subject), map[string]string{"compatibility": level}, nil); st != http.StatusOK {
		t.Fatalf("PUT /config/%s %s: HTTP %d", subject, level, st)
	}
}

// registryConfig is the default configuration with the real broker, the real registry and topic
// names under a prefix of the test's own.
func registryConfig(t *testing.T) config.Config {
	t.Helper()
	cfg := config.Default()
	cfg.Kafka.Brokers = testenv.Brokers(t)
	cfg.TopicPrefix = testenv.UniqueName(t, "sr") + "."
	cfg.Topics = config.DefaultTopics(cfg.TopicPrefix)
	cfg.SchemaRegistry = config.SchemaRegistry{URLs: []string{testenv.Registry(t)}, Timeout: 10 * time.Second}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	return cfg
}

// createTopics creates the named topics with one partition each on the real broker, and deletes
// them when the test ends.
func createTopics(t *testing.T, names ...string) {
	t.Helper()
	adm := testenv.Admin(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resps, err := adm.CreateTopics(ctx, 1, 1, nil, names...)
	if err == nil {
		err = resps.Error()
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_, _ = adm.DeleteTopics(ctx, names...)
	})
}

// schemaWith returns rt's embedded schema after edit changed its top-level field list: a
// test-only copy, standing for an older or newer version of the contract.
func schemaWith(t *testing.T, rt schemas.RecordType, edit func(fields []any) []any) string {
	t.Helper()
	var top map[string]any
	if err := json.Unmarshal([]byte(rt.Schema()), &top); err != nil {
		t.Fatal(err)
	}
	top["fields"] = edit(top["fields"].([]any))
	out, err := json.Marshal(top)
	if err != nil {
		t.Fatal(err)
	}
	return string(out)
}

func withoutField(name string) func([]any) []any {
	return func(fields []any) []any {
		return slices.DeleteFunc(slices.Clone(fields), func(f any) bool { return f.(map[string]any)["name"] == name })
	}
}

// rewrite re-encodes a framed record of rt's embedded schema in schema (an evolved copy) under
// schema id id: the record as a producer of that version would have written it, with edit
// applied to its fields.
func rewrite(t *testing.T, rt schemas.RecordType, framed []byte, schema string, id int, edit func(map[string]any)) []byte {
	t.Helper()
	embedded, err := goavro.NewCodec(rt.Schema())
	if err != nil {
		t.Fatal(err)
	}
	native, _, err := embedded.NativeFromBinary(framed[schemas.HeaderSize:])
	if err != nil {
		t.Fatal(err)
	}
	edit(native.(map[string]any))
	evolved, err := goavro.NewCodec(schema)
	if err != nil {
		t.Fatal(err)
	}
	out, err := evolved.BinaryFromNative(schemas.AppendHeader(nil, id), native)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func testLaneEvent(lane uint8) schemas.LaneEvent {
	return schemas.LaneEvent{
		Lane:             lane,
		Pool:             schemas.PoolID{IdentityVersion: 1, DcID: 0xdc01},
		ConsumerInstance: 42,
		LeaseEpoch:       schemas.Some[uint64](7),
		Kind:             schemas.EventProgress,
		AppliedOffset:    schemas.Some[int64](1000),
		HighWatermark:    schemas.Some[int64](1001),
		LagRecords:       schemas.Some[int64](1),
		LagMicros:        schemas.Some[int64](2500),
		EventTime:        time.UnixMicro(1_780_000_000_000_000).UTC(),
	}
}

// produceAndFetch writes values to partition 0 of topic on the real broker and reads them back
// as the broker stores them.
func produceAndFetch(t *testing.T, topic string, values ...[]byte) [][]byte {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cl := testenv.Client(t, kgo.DefaultProduceTopic(topic), kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: {0: kgo.NewOffset().AtStart()}}))
	for _, v := range values {
		if err := cl.ProduceSync(ctx, &kgo.Record{Value: v, Partition: 0}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	var got [][]byte
	for len(got) < len(values) {
		fs := cl.PollFetches(ctx)
		if err := fs.Err0(); err != nil {
			t.Fatalf("fetching %s: %v", topic, err)
		}
		fs.EachRecord(func(r *kgo.Record) { got = append(got, r.Value) })
	}
	return got
}

func wireID(t *testing.T, framed []byte) int {
	t.Helper()
	if len(framed) < schemas.HeaderSize || framed[0] != 0 {
		t.Fatalf("not a Confluent frame: % x", framed[:min(len(framed), 8)])
	}
	return int(binary.BigEndian.Uint32(framed[1:schemas.HeaderSize]))
}

// TestRegistrySubjectsAndWireIDs: a process's codec (Connection.Codec, which every component
// takes) registers every record type under "<topic_prefix><topic>-value", and the records it
// writes carry the registry's ids in the 5-byte header, which a second process (lookup only) and
// no built-in codec can read.
func TestRegistrySubjectsAndWireIDs(t *testing.T) {
	cfg := registryConfig(t)
	createTopics(t, cfg.Topics.LaneEvents, cfg.Topics.Queries) // the two topics the test writes
	conn, err := kafka.New(kafka.Params{Config: cfg.Kafka, Topics: cfg.Topics, Registry: cfg.SchemaRegistry})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	codec, err := conn.Codec()
	if err != nil {
		t.Fatal(err)
	}
	if again, err := conn.Codec(); err != nil || again != codec {
		t.Fatalf("a second Codec call built another codec (%v)", err)
	}

	// Each record type's subject is looked up by name: the registry's list of every subject
	// (GET /subjects) stops at 1,000 entries in Apicurio (a registry that served many test runs
	// holds more), so it cannot say that this run's are there.
	for _, rt := range schemas.RecordTypes() {
		v := latest(t, cfg.Topics.Of(rt)+"-value")
		if v.Version != 1 || v.ID != codec.SchemaID(rt) || v.ID == schemas.BuiltinID(rt) {
			t.Errorf("%s: registry holds version %d id %d; codec writes id %d", rt, v.Version, v.ID, codec.SchemaID(rt))
		}
		var got, embedded any
		if err := json.Unmarshal([]byte(v.Schema), &got); err != nil {
			t.Fatalf("%s: registered schema: %v", rt, err)
		}
		_ = json.Unmarshal([]byte(rt.Schema()), &embedded)
		if !reflect.DeepEqual(got, embedded) {
			t.Errorf("%s: the registered schema is not the embedded one", rt)
		}
	}

	ev := testLaneEvent(3)
	evBytes, err := codec.EncodeLaneEvent(ev)
	if err != nil {
		t.Fatal(err)
	}
	q := schemas.QueryRequest{CorrelationID: "wire-ids", Input: schemas.InputLocalBlockHashes,
		Hashes: schemas.PackedU64(schemas.AppendU64s(nil, []uint64{1, 2, 3}))}
	qBytes, err := codec.EncodeQueryRequest(q)
	if err != nil {
		t.Fatal(err)
	}
	gotEv := produceAndFetch(t, cfg.Topics.LaneEvents, evBytes)[0]
	gotQ := produceAndFetch(t, cfg.Topics.Queries, qBytes)[0]
	if id := wireID(t, gotEv); id != latest(t, cfg.Topics.LaneEvents+"-value").ID {
		t.Errorf("lane event on the wire has schema id %d, the registry's is %d", id, latest(t, cfg.Topics.LaneEvents+"-value").ID)
	}
	if id := wireID(t, gotQ); id != latest(t, cfg.Topics.Queries+"-value").ID {
		t.Errorf("query on the wire has schema id %d, the registry's is %d", id, latest(t, cfg.Topics.Queries+"-value").ID)
	}

	// Another process, allowed only to look up, reads them; a codec with built-in ids cannot.
	lookup := cfg.SchemaRegistry
	lookup.LookupOnly = true
	reader, err := kafka.OpenCodec(context.Background(), cfg.Topics, lookup)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := reader.DecodeLaneEvent(gotEv); err != nil || !reflect.DeepEqual(got, ev) {
		t.Errorf("lane event read back: %+v, %v\nwant %+v", got, err, ev)
	}
	if got, err := reader.DecodeQueryRequest(gotQ); err != nil || got.CorrelationID != q.CorrelationID || !slices.Equal(got.Hashes.AppendTo(nil), []uint64{1, 2, 3}) {
		t.Errorf("query read back: %+v, %v", got, err)
	}
	builtin, err := kafka.NewCodec(cfg.Topics)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := builtin.DecodeLaneEvent(gotEv); !errors.Is(err, schemas.ErrUnknownSchemaID) {
		t.Errorf("a built-in codec read a registry id: %v", err)
	}
	// An id the registry never handed out: Apicurio answers 404 (error code 40403), which the
	// codec reports as an unknown id, not as a registry failure.
	unknown := schemas.AppendHeader(nil, 1<<31-1)
	unknown = append(unknown, gotEv[schemas.HeaderSize:]...)
	if _, err := reader.DecodeLaneEvent(unknown); !errors.Is(err, schemas.ErrUnknownSchemaID) || errors.Is(err, schemas.ErrRegistry) {
		t.Errorf("an id unknown to the registry: %v", err)
	}
}

// TestRegistryCompatibleEvolution: under BACKWARD compatibility the registry accepts the
// contract's schema after an older version that lacked an optional field, and a newer version
// that adds one (test-only copies). Records of all three versions go through the real broker and
// are read by this codec: as the new consumer of the older writer (the missing field is absent)
// and as the old consumer of the newer writer (the added field is ignored).
func TestRegistryCompatibleEvolution(t *testing.T) {
	cfg := registryConfig(t)
	cfg.Topics.LaneEvents = testenv.NewTopic(t, 1) // the one topic the test writes
	subject := cfg.Topics.LaneEvents + "-value"
	setCompatibility(t, subject, "BACKWARD")

	older := schemaWith(t, schemas.TypeLaneEvent, withoutField("lag_micros"))
	st, olderID := register(t, subject, older)
	if st != http.StatusOK {
		t.Fatalf("registering the older version: HTTP %d", st)
	}

	codec, err := kafka.OpenCodec(context.Background(), cfg.Topics, cfg.SchemaRegistry)
	if err != nil {
		t.Fatalf("the contract's schema after an older version without an optional field: %v", err)
	}
	currentID := codec.SchemaID(schemas.TypeLaneEvent)
	if v := latest(t, subject); v.Version != 2 || v.ID != currentID || currentID == olderID {
		t.Fatalf("after the codec registered: latest version %d id %d, codec id %d, older id %d", v.Version, v.ID, currentID, olderID)
	}

	newer := schemaWith(t, schemas.TypeLaneEvent, func(fields []any) []any {
		return append(slices.Clone(fields), map[string]any{"name": "replica_zone", "type": []any{"null", "string"},
			"default": nil, "doc": "Test-only: a field a newer producer adds."})
	})
	var check struct {
		Compatible bool `json:"is_compatible"`
	}
	if st := ccompat(t, http.MethodPost, "/compatibility/subjects/"+url.PathEscape(subject)+"/versions/latest", map[string]string{"schema": newer}, &check); st != http.StatusOK || !check.Compatible {
		t.Fatalf("compatibility check of the newer version: HTTP %d, %+v", st, check)
	}
	st, newerID := register(t, subject, newer)
	if st != http.StatusOK || newerID == currentID || newerID == olderID {
		t.Fatalf("registering the newer version: HTTP %d id %d", st, newerID)
	}

	ev := testLaneEvent(5)
	current, err := codec.EncodeLaneEvent(ev)
	if err != nil {
		t.Fatal(err)
	}
	fromOlder := rewrite(t, schemas.TypeLaneEvent, current, older, olderID, func(m map[string]any) { delete(m, "lag_micros") })
	fromNewer := rewrite(t, schemas.TypeLaneEvent, current, newer, newerID, func(m map[string]any) {
		m["replica_zone"] = goavro.Union("string", "eu-west-1a")
	})
	got := produceAndFetch(t, cfg.Topics.LaneEvents, fromOlder, current, fromNewer)

	// A consumer started after all three versions exist: it registers nothing new (its schema is
	// version 2) and resolves the other two ids from the registry.
	reader, err := kafka.OpenCodec(context.Background(), cfg.Topics, cfg.SchemaRegistry)
	if err != nil {
		t.Fatal(err)
	}
	withoutLag := ev
	withoutLag.LagMicros = schemas.Optional[int64]{}
	for i, want := range []struct {
		id int
		ev schemas.LaneEvent
	}{{olderID, withoutLag}, {currentID, ev}, {newerID, ev}} {
		if id := wireID(t, got[i]); id != want.id {
			t.Errorf("record %d: wire id %d, want %d", i, id, want.id)
		}
		if dec, err := reader.DecodeLaneEvent(got[i]); err != nil || !reflect.DeepEqual(dec, want.ev) {
			t.Errorf("record %d (schema id %d): %+v, %v\nwant %+v", i, want.id, dec, err, want.ev)
		}
	}
	var versions []int
	if ccompat(t, http.MethodGet, "/subjects/"+url.PathEscape(subject)+"/versions", nil, &versions); !slices.Equal(versions, []int{1, 2, 3}) {
		t.Errorf("versions of %s: %v, want [1 2 3]", subject, versions)
	}
}

// TestRegistryIncompatibleSchemaRefusedAtStart: under BACKWARD compatibility, a subject whose
// registered version lacks a field the contract requires (no default) refuses the contract's
// schema; the process's codec fails with an error that names the subject, the registry, the
// compatibility level and the registry's reason, and nothing is registered.
func TestRegistryIncompatibleSchemaRefusedAtStart(t *testing.T) {
	cfg := registryConfig(t)
	subject := cfg.Topics.LaneEvents + "-value"
	setCompatibility(t, subject, "BACKWARD")
	previous := schemaWith(t, schemas.TypeLaneEvent, withoutField("consumer_instance"))
	if st, _ := register(t, subject, previous); st != http.StatusOK {
		t.Fatalf("registering the previous version: HTTP %d", st)
	}

	conn, err := kafka.New(kafka.Params{Config: cfg.Kafka, Topics: cfg.Topics, Registry: cfg.SchemaRegistry})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_, err = conn.Codec()
	var re *schemas.RegistryError
	if !errors.Is(err, schemas.ErrRegistry) || !errors.Is(err, schemas.ErrIncompatibleSchema) || !errors.As(err, &re) {
		t.Fatalf("Codec with an incompatible subject: %v", err)
	}
	if re.Subject != subject || re.Registry != testenv.Registry(t) || re.StatusCode != http.StatusConflict || re.Compatibility != "BACKWARD" {
		t.Errorf("registry error %+v", re)
	}
	// Apicurio's reason names the subject and the field at fault.
	for _, want := range []string{`"` + subject + `"`, testenv.Registry(t), "under BACKWARD compatibility", "consumer_instance"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the error does not say %q: %v", want, err)
		}
	}
	t.Logf("the error a process prints: %v", err)
	var versions []int
	if ccompat(t, http.MethodGet, "/subjects/"+url.PathEscape(subject)+"/versions", nil, &versions); !slices.Equal(versions, []int{1}) {
		t.Errorf("versions of %s after the refusal: %v, want [1]", subject, versions)
	}
}

// TestRegistryLanes64UnderFull (consumer §16): under FULL compatibility (each revision's reader
// reads the other's writer) the real registry accepts the query schemas with the 64-lane fields
// (lane_mask64, ready_lanes64, incomplete_lanes64) after the revisions without them, and this
// codec reads the earlier writers' records: a request as one of a reader of 16 lanes, a reply
// with its 16-bit masks.
func TestRegistryLanes64UnderFull(t *testing.T) {
	cfg := registryConfig(t)
	reqSubject, replySubject := cfg.Topics.Queries+"-value", cfg.Topics.QueryReplies+"-value"
	setCompatibility(t, reqSubject, "FULL")
	setCompatibility(t, replySubject, "FULL")
	olderReq := schemaWith(t, schemas.TypeQueryRequest, withoutField("lane_mask64"))
	olderReply := schemaWith(t, schemas.TypeQueryReply, func(f []any) []any {
		return withoutField("incomplete_lanes64")(withoutField("ready_lanes64")(f))
	})
	st, reqID := register(t, reqSubject, olderReq)
	if st != http.StatusOK {
		t.Fatalf("registering the request without lane_mask64: HTTP %d", st)
	}
	if st, _ := register(t, replySubject, olderReply); st != http.StatusOK {
		t.Fatalf("registering the reply without the 64-bit masks: HTTP %d", st)
	}
	codec, err := kafka.OpenCodec(context.Background(), cfg.Topics, cfg.SchemaRegistry)
	if err != nil {
		t.Fatalf("the 64-lane schemas after the earlier ones under FULL: %v", err)
	}
	if codec.SchemaID(schemas.TypeQueryRequest) == reqID {
		t.Fatalf("the 64-lane request reuses the earlier schema's id %d", reqID)
	}
	for _, subject := range []string{reqSubject, replySubject} {
		if v := latest(t, subject); v.Version != 2 {
			t.Errorf("%s: latest version %d, want 2", subject, v.Version)
		}
	}

	q := schemas.QueryRequest{CorrelationID: "earlier", Input: schemas.InputLocalBlockHashes,
		Hashes: schemas.AppendU64s(nil, []uint64{1, 2}), LaneMask: schemas.Some[uint16](3)}
	cur, err := codec.EncodeQueryRequest(q)
	if err != nil {
		t.Fatal(err)
	}
	got, err := codec.DecodeQueryRequest(rewrite(t, schemas.TypeQueryRequest, cur, olderReq, reqID, func(m map[string]any) { delete(m, "lane_mask64") }))
	if mask, wide := got.Lanes(); err != nil || mask != 3 || wide {
		t.Fatalf("the earlier writer's request: %+v, %v; want lanes 0 and 1 of a reader of 16", got, err)
	}
}
