package schemas

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/linkedin/goavro/v2"
	"github.com/twmb/franz-go/pkg/sr"
	"github.com/twmb/franz-go/pkg/sr/srfake"
)

func newRegistry(t *testing.T) *srfake.Registry {
	t.Helper()
	reg := srfake.New()
	t.Cleanup(reg.Close)
	return reg
}

func TestRegistryRegistersEverySubject(t *testing.T) {
	reg := newRegistry(t)
	c := newTestCodec(t, RegistryURLs(reg.URL()), TopicPrefix("prod."), Topic(TypeKvEvent, "engine-events"))
	seen := map[int]bool{}
	for _, rt := range RecordTypes() {
		subject := "prod." + rt.DefaultTopic() + "-value"
		if rt == TypeKvEvent {
			subject = "prod.engine-events-value"
		}
		if c.Subject(rt) != subject {
			t.Fatalf("%s: subject %q, want %q", rt, c.Subject(rt), subject)
		}
		ss, ok := reg.GetSchema(subject, 1)
		if !ok {
			t.Fatalf("%s: subject %s not registered", rt, subject)
		}
		if ss.ID != c.SchemaID(rt) || ss.Schema.Schema != rt.Schema() || ss.Schema.Type != sr.TypeAvro {
			t.Fatalf("%s: registered id %d schema type %v, codec writes id %d", rt, ss.ID, ss.Schema.Type, c.SchemaID(rt))
		}
		if seen[ss.ID] || ss.ID == BuiltinID(rt) {
			t.Fatalf("%s: id %d reused", rt, ss.ID)
		}
		seen[ss.ID] = true
	}
	// Registering again (a second instance, a restart) keeps the ids.
	c2 := newTestCodec(t, RegistryURLs(reg.URL()), TopicPrefix("prod."), Topic(TypeKvEvent, "engine-events"))
	for _, rt := range RecordTypes() {
		if c2.SchemaID(rt) != c.SchemaID(rt) {
			t.Fatalf("%s: id changed from %d to %d on re-registration", rt, c.SchemaID(rt), c2.SchemaID(rt))
		}
	}
}

func TestRegistryRoundTripAndMigration(t *testing.T) {
	reg := newRegistry(t)
	writer := newTestCodec(t, RegistryURLs(reg.URL()))
	reader := newTestCodec(t, RegistryURLs(reg.URL()))
	builtin := newTestCodec(t)

	rec := testDelta(8)
	b, err := writer.EncodeLaneRecord(rec)
	if err != nil {
		t.Fatal(err)
	}
	id, _, _ := ParseHeader(b)
	if id != writer.SchemaID(TypeLaneRecord) {
		t.Fatalf("wrote id %d, want the registry's %d", id, writer.SchemaID(TypeLaneRecord))
	}
	got, err := reader.DecodeLaneRecord(b)
	if err != nil || !reflect.DeepEqual(got, rec) {
		t.Fatalf("registry round trip: %v", err)
	}
	if _, err := builtin.DecodeLaneRecord(b); !errors.Is(err, ErrUnknownSchemaID) {
		t.Fatalf("a codec without registry read a registry id: %v", err)
	}
	// Records written before the registry was introduced stay readable.
	old, _ := builtin.EncodeLaneRecord(rec)
	if got, err := reader.DecodeLaneRecord(old); err != nil || !reflect.DeepEqual(got, rec) {
		t.Fatalf("built-in id through a registry codec: %v", err)
	}
}

// mutate returns rt's embedded schema after fn changed its parsed JSON.
func mutate(t *testing.T, rt RecordType, fn func(top map[string]any)) string {
	t.Helper()
	var top map[string]any
	if err := json.Unmarshal([]byte(rt.Schema()), &top); err != nil {
		t.Fatal(err)
	}
	fn(top)
	out, err := json.Marshal(top)
	if err != nil {
		t.Fatal(err)
	}
	return string(out)
}

// named finds the definition of a named type inside a parsed schema.
func named(v any, name string) map[string]any {
	var found map[string]any
	collectNamedRaw(v, func(n string, def map[string]any) {
		if n == name && found == nil {
			found = def
		}
	})
	return found
}

func collectNamedRaw(v any, fn func(string, map[string]any)) {
	switch s := v.(type) {
	case []any:
		for _, b := range s {
			collectNamedRaw(b, fn)
		}
	case map[string]any:
		if name, ok := s["name"].(string); ok && (s["type"] == "record" || s["type"] == "enum" || s["type"] == "fixed") {
			fn(name, s)
		}
		for _, k := range []string{"type", "items", "values", "fields"} {
			if x, ok := s[k]; ok {
				collectNamedRaw(x, fn)
			}
		}
	}
}

func addField(top map[string]any, field string) {
	var f map[string]any
	if err := json.Unmarshal([]byte(field), &f); err != nil {
		panic(err)
	}
	top["fields"] = append(top["fields"].([]any), f)
}

// A newer writer adds a field with a default and an enum symbol; an older
// reader decodes by field name, ignores the field and maps the symbol to
// UNKNOWN.
func TestRegistryNewerWriterSchema(t *testing.T) {
	reg := newRegistry(t)
	reader := newTestCodec(t, RegistryURLs(reg.URL()))

	newer := mutate(t, TypeLaneEvent, func(top map[string]any) {
		kind := named(top, "LaneEventKind")
		kind["symbols"] = append(kind["symbols"].([]any), "LANE_RETIRED")
		addField(top, `{"name": "replica_zone", "type": "string", "default": "", "doc": "Added later."}`)
	})
	id, _, err := reg.RegisterSchema(reader.Subject(TypeLaneEvent), sr.Schema{Schema: newer, Type: sr.TypeAvro})
	if err != nil {
		t.Fatal(err)
	}
	wc, err := goavro.NewCodec(newer)
	if err != nil {
		t.Fatal(err)
	}
	ev := testLaneEvents()["deactivated"]
	native := laneEventNative(&ev)
	native["replica_zone"] = "eu-west-1a"
	native["kind"] = "LANE_RETIRED"
	b, err := wc.BinaryFromNative(AppendHeader(nil, id), native)
	if err != nil {
		t.Fatal(err)
	}
	got, err := reader.DecodeLaneEvent(b)
	if err != nil {
		t.Fatal(err)
	}
	ev.Kind = EventUnknown
	if !reflect.DeepEqual(got, ev) {
		t.Fatalf("got %+v\nwant %+v", got, ev)
	}

	// The lane record too: an evolved writer schema takes the goavro path.
	newerLane := mutate(t, TypeLaneRecord, func(top map[string]any) {
		addField(top, `{"name": "trace_id", "type": ["null", "string"], "default": null, "doc": "Added later."}`)
	})
	lid, _, err := reg.RegisterSchema(reader.Subject(TypeLaneRecord), sr.Schema{Schema: newerLane, Type: sr.TypeAvro})
	if err != nil {
		t.Fatal(err)
	}
	lc, err := goavro.NewCodec(newerLane)
	if err != nil {
		t.Fatal(err)
	}
	rec := testSnapshot(16)
	ln := laneRecordNative(&rec)
	ln["trace_id"] = goavro.Union("string", "abc")
	lb, err := lc.BinaryFromNative(AppendHeader(nil, lid), ln)
	if err != nil {
		t.Fatal(err)
	}
	gotLane, err := reader.DecodeLaneRecord(lb)
	if err != nil || !reflect.DeepEqual(gotLane, rec) {
		t.Fatalf("evolved lane record: %v", err)
	}
}

// An older writer that lacked an optional field: the reader sees it absent.
func TestRegistryOlderWriterSchema(t *testing.T) {
	reg := newRegistry(t)
	reader := newTestCodec(t, RegistryURLs(reg.URL()))
	older := mutate(t, TypeQueryRequest, func(top map[string]any) {
		fields := top["fields"].([]any)
		last := fields[len(fields)-1].(map[string]any)
		if last["name"] != "lane_mask64" || fields[len(fields)-2].(map[string]any)["name"] != "block_extra_keys" ||
			fields[len(fields)-3].(map[string]any)["name"] != "max_age_ms" || fields[len(fields)-4].(map[string]any)["name"] != "request_time" {
			t.Fatalf("last fields are %v", fields[len(fields)-4:])
		}
		top["fields"] = fields[:len(fields)-4]
	})
	id, _, err := reg.RegisterSchema(reader.Subject(TypeQueryRequest), sr.Schema{Schema: older, Type: sr.TypeAvro})
	if err != nil {
		t.Fatal(err)
	}
	wc, err := goavro.NewCodec(older)
	if err != nil {
		t.Fatal(err)
	}
	q := testQueryRequests()["tokens-full"]
	native := queryRequestNative(&q)
	delete(native, "request_time")
	delete(native, "max_age_ms")
	delete(native, "block_extra_keys")
	delete(native, "lane_mask64")
	b, err := wc.BinaryFromNative(AppendHeader(nil, id), native)
	if err != nil {
		t.Fatal(err)
	}
	got, err := reader.DecodeQueryRequest(b)
	if err != nil {
		t.Fatal(err)
	}
	q.RequestTime, q.MaxAgeMillis, q.BlockExtraKeys = time.Time{}, Optional[int64]{}, nil
	if !reflect.DeepEqual(got, q) {
		t.Fatalf("got %+v\nwant %+v", got, q)
	}

	// A KV-event producer of the revision before KvStored.block_size (a field appended to a
	// record branch, not to the top level): its stored events read without a block size. A
	// newer producer that appends one more field to KvStored is read by this reader, which
	// ignores the field it does not know, as a reader of the older revision ignores block_size.
	olderKv := mutate(t, TypeKvEvent, func(top map[string]any) {
		stored := named(top, "KvStored")
		fields := stored["fields"].([]any)
		if last := fields[len(fields)-1].(map[string]any); last["name"] != "block_size" {
			t.Fatalf("last KvStored field is %v", last["name"])
		}
		stored["fields"] = fields[:len(fields)-1]
	})
	kid, _, err := reg.RegisterSchema(reader.Subject(TypeKvEvent), sr.Schema{Schema: olderKv, Type: sr.TypeAvro})
	if err != nil {
		t.Fatal(err)
	}
	kc, err := goavro.NewCodec(olderKv)
	if err != nil {
		t.Fatal(err)
	}
	ev := testKvEvents()["stored"]
	kn := kvEventNative(&ev)
	delete(kn["data"].(map[string]any)[nsName("KvStored")].(map[string]any), "block_size")
	kb, err := kc.BinaryFromNative(AppendHeader(nil, kid), kn)
	if err != nil {
		t.Fatal(err)
	}
	gotEv, err := reader.DecodeKvEvent(kb)
	if err != nil {
		t.Fatal(err)
	}
	want := ev
	want.Stored.BlockSize = 0
	if !reflect.DeepEqual(gotEv, want) {
		t.Fatalf("older kv event: got %+v\nwant %+v", gotEv, want)
	}
	cur, err := reader.EncodeKvEvent(ev)
	if err != nil {
		t.Fatal(err)
	}
	if id, _, _ := ParseHeader(cur); id == kid {
		t.Fatalf("the current writer reused the older schema's id %d", id)
	}
	newerKv := mutate(t, TypeKvEvent, func(top map[string]any) {
		stored := named(top, "KvStored")
		stored["fields"] = append(stored["fields"].([]any), map[string]any{"name": "block_tier_hint", "type": []any{"null", "string"}, "default": nil, "doc": "Test-only."})
	})
	nid, _, err := reg.RegisterSchema(reader.Subject(TypeKvEvent), sr.Schema{Schema: newerKv, Type: sr.TypeAvro})
	if err != nil {
		t.Fatal(err)
	}
	nc, err := goavro.NewCodec(newerKv)
	if err != nil {
		t.Fatal(err)
	}
	nn := kvEventNative(&ev)
	nn["data"].(map[string]any)[nsName("KvStored")].(map[string]any)["block_tier_hint"] = goavro.Union("string", "hbm")
	nb, err := nc.BinaryFromNative(AppendHeader(nil, nid), nn)
	if err != nil {
		t.Fatal(err)
	}
	if gotEv, err := reader.DecodeKvEvent(nb); err != nil || !reflect.DeepEqual(gotEv, ev) {
		t.Fatalf("newer kv event: %v\ngot  %+v\nwant %+v", err, gotEv, ev)
	}
}

func TestRegistryUnknownAndForeignIDs(t *testing.T) {
	reg := newRegistry(t)
	var fetches atomic.Int32
	reg.Intercept(func(_ http.ResponseWriter, r *http.Request) bool {
		if strings.HasPrefix(r.URL.Path, "/schemas/ids/") {
			fetches.Add(1)
		}
		return false
	})
	c := newTestCodec(t, RegistryURLs(reg.URL()))
	body := appendLaneRecordBody(nil, ptr(testDelta(1)))

	_, err := c.DecodeLaneRecord(frame(999, body))
	if !errors.Is(err, ErrUnknownSchemaID) {
		t.Fatalf("id unknown to the registry: %v", err)
	}

	foreign, _, err := reg.RegisterSchema("other-value", sr.Schema{Schema: `{"type":"record","name":"Other","fields":[{"name":"x","type":"long"}]}`})
	if err != nil {
		t.Fatal(err)
	}
	before := fetches.Load()
	for range 3 {
		_, err = c.DecodeLaneRecord(frame(foreign, body))
		if !errors.Is(err, ErrSchemaMismatch) {
			t.Fatalf("foreign schema: %v", err)
		}
	}
	if n := fetches.Load() - before; n != 1 {
		t.Fatalf("foreign id fetched %d times, want once (ids are immutable)", n)
	}

	_, err = c.DecodeLaneRecord(frame(c.SchemaID(TypeQueryReply), body))
	if !errors.Is(err, ErrSchemaMismatch) {
		t.Fatalf("another type's id: %v", err)
	}
}

func ptr[T any](v T) *T { return &v }

func TestRegistryLookupOnly(t *testing.T) {
	reg := newRegistry(t)
	_, err := NewCodec(context.Background(), RegistryURLs(reg.URL()), LookupOnly())
	var ee *EncodeError
	if !errors.Is(err, ErrRegistry) || !errors.As(err, &ee) || ee.Type != TypeLaneRecord {
		t.Fatalf("lookup of unregistered schemas: %v", err)
	}
	registrar := newTestCodec(t, RegistryURLs(reg.URL()))
	c := newTestCodec(t, RegistryURLs(reg.URL()), LookupOnly())
	for _, rt := range RecordTypes() {
		if c.SchemaID(rt) != registrar.SchemaID(rt) {
			t.Fatalf("%s: lookup id %d, registered id %d", rt, c.SchemaID(rt), registrar.SchemaID(rt))
		}
	}
}

func TestRegistryUnreachable(t *testing.T) {
	reg := srfake.New()
	url := reg.URL()
	c := newTestCodec(t, RegistryURLs(url), RegistryTimeout(2*time.Second))
	reg.Close()

	body := appendLaneRecordBody(nil, ptr(testDelta(1)))
	_, err := c.DecodeLaneRecord(frame(4242, body))
	if !errors.Is(err, ErrRegistry) {
		t.Fatalf("registry down: %v", err)
	}
	// Known ids keep working without the registry.
	if _, err := c.DecodeLaneRecord(frame(c.SchemaID(TypeLaneRecord), body)); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_, err = NewCodec(ctx, RegistryURLs(url))
	var re *RegistryError
	if !errors.Is(err, ErrRegistry) || !errors.As(err, &re) || re.StatusCode != 0 || !strings.Contains(err.Error(), url+": no answer") {
		t.Fatalf("NewCodec with the registry down: %v", err)
	}
}

// Many goroutines decoding new ids at once: one table, no races, every
// decode right.
func TestRegistryConcurrentDecode(t *testing.T) {
	reg := newRegistry(t)
	c := newTestCodec(t, RegistryURLs(reg.URL()))
	var ids []int
	for i := range 4 {
		s := mutate(t, TypeLaneRecord, func(top map[string]any) {
			addField(top, `{"name": "extra`+string(rune('a'+i))+`", "type": "int", "default": 0, "doc": "x"}`)
		})
		id, _, err := reg.RegisterSchema(c.Subject(TypeLaneRecord), sr.Schema{Schema: s, Type: sr.TypeAvro})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	rec := testDelta(3)
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 20 {
				id := ids[(g+i)%len(ids)]
				// The extra int 0 is one zero byte after the body.
				b := appendLaneRecordBody(AppendHeader(nil, id), &rec)
				b = append(b, 0)
				got, err := c.DecodeLaneRecord(b)
				if err != nil || !reflect.DeepEqual(got, rec) {
					t.Errorf("id %d: %v", id, err)
					return
				}
			}
		}()
	}
	wg.Wait()
}

// A registered schema that differs from the embedded one only in docs (same
// parsing canonical form) is read by the hand-written codec.
func TestRegistrySameLayoutUsesFastPath(t *testing.T) {
	reg := newRegistry(t)
	c := newTestCodec(t, RegistryURLs(reg.URL()))
	redoc := mutate(t, TypeLaneRecord, func(top map[string]any) { top["doc"] = "Reworded." })
	id, _, err := reg.RegisterSchema("elsewhere-value", sr.Schema{Schema: redoc, Type: sr.TypeAvro})
	if err != nil {
		t.Fatal(err)
	}
	if id == c.SchemaID(TypeLaneRecord) {
		t.Fatal("the registry reused the id; the test needs a distinct one")
	}
	rec := testDelta(4)
	b := appendLaneRecordBody(AppendHeader(nil, id), &rec)
	got, err := c.DecodeLaneRecord(b)
	if err != nil || !reflect.DeepEqual(got, rec) {
		t.Fatalf("redocumented schema: %v", err)
	}
	if allocs := testing.AllocsPerRun(20, func() { _, _ = c.DecodeLaneRecord(b) }); allocs != 0 {
		t.Fatalf("decoding took the goavro path (%v allocs)", allocs)
	}
}

// A registry that refuses a schema as incompatible: NewCodec fails with an
// error that names the subject, the registry, the compatibility level in force
// and the registry's reason, and matches both ErrRegistry and
// ErrIncompatibleSchema.
func TestRegistryIncompatibleRefusalNamesSubjectRegistryAndReason(t *testing.T) {
	reg := newRegistry(t)
	const reason = "Incompatible artifact: p.ckf-lanes-value [AVRO], list of diff types: [x at /fields/9]"
	reg.Intercept(func(w http.ResponseWriter, r *http.Request) bool {
		switch {
		case r.Method == http.MethodPost && r.URL.Path == "/subjects/p.ckf-lanes-value/versions":
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusConflict)
			_ = json.NewEncoder(w).Encode(map[string]any{"error_code": 409, "message": reason})
			return true
		case r.Method == http.MethodGet && r.URL.Path == "/config/p.ckf-lanes-value":
			if r.URL.Query().Get("defaultToGlobal") != "true" {
				t.Errorf("compatibility asked without defaultToGlobal: %s", r.URL)
			}
			_ = json.NewEncoder(w).Encode(map[string]any{"compatibilityLevel": "BACKWARD"})
			return true
		}
		return false
	})
	_, err := NewCodec(context.Background(), RegistryURLs(reg.URL()), TopicPrefix("p."))
	var re *RegistryError
	if !errors.Is(err, ErrRegistry) || !errors.Is(err, ErrIncompatibleSchema) || !errors.As(err, &re) {
		t.Fatalf("NewCodec: %v", err)
	}
	if re.Subject != "p.ckf-lanes-value" || re.Registry != reg.URL() || re.Op != "registering" ||
		re.StatusCode != http.StatusConflict || re.ErrorCode != 409 || re.Compatibility != "BACKWARD" || re.Reason != reason {
		t.Fatalf("registry error %+v", re)
	}
	for _, want := range []string{`"p.ckf-lanes-value"`, reg.URL(), "under BACKWARD compatibility", reason} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("message %q does not say %q", err, want)
		}
	}
}

// Another refusal (a lookup of a subject the registry does not have) names the
// status and error code, and is not taken for an incompatibility.
func TestRegistryLookupRefusalNamesStatus(t *testing.T) {
	reg := newRegistry(t)
	_, err := NewCodec(context.Background(), RegistryURLs(reg.URL()), LookupOnly())
	var re *RegistryError
	if !errors.As(err, &re) || errors.Is(err, ErrIncompatibleSchema) {
		t.Fatalf("NewCodec: %v", err)
	}
	if re.Op != "looking up" || re.StatusCode != http.StatusNotFound || re.ErrorCode == 0 || re.Subject != "ckf-lanes-value" {
		t.Fatalf("registry error %+v", re)
	}
	if !strings.Contains(err.Error(), "refused (HTTP 404, error code ") {
		t.Fatalf("message %q", err)
	}
}
