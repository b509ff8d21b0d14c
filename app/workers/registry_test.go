package workers

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"reflect"
	"testing"
	"time"

	"github.com/ckf-stream/ckf-stream/schemas"
	"github.com/ckf-stream/ckf-stream/testenv"
	"github.com/linkedin/goavro/v2"
)

// TestWorkerSchemasCompatibleOnTheRegistry: on the real registry (Apicurio's Confluent API), under
// FULL_TRANSITIVE compatibility (old readers read new data and new readers old data), the worker
// query subjects accept this revision (the request's max_age_ms, the reply's state) after the
// revision before it, which another program registered; a body of that revision, under its own
// id, is read with the fields absent (max_age_ms null, state UNKNOWN).
func TestWorkerSchemasCompatibleOnTheRegistry(t *testing.T) {
	t.Parallel()
	reg := testenv.Registry(t)
	prefix := testenv.UniqueName(t, "wsr") + "."
	call := func(method, path string, body, out any) int {
		t.Helper()
		b, _ := json.Marshal(body)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		req, err := http.NewRequestWithContext(ctx, method, reg+path, bytes.NewReader(b))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/vnd.schemaregistry.v1+json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		raw, _ := io.ReadAll(resp.Body)
		if out != nil && resp.StatusCode == http.StatusOK {
			if err := json.Unmarshal(raw, out); err != nil {
				t.Fatalf("%s %s: %v in %s", method, path, err, raw)
			}
		}
		return resp.StatusCode
	}
	// older registers rt's previous revision (without its last field, which must be last) under
	// FULL_TRANSITIVE and returns its goavro codec and id.
	older := func(rt schemas.RecordType, last string) (*goavro.Codec, int) {
		t.Helper()
		subject := prefix + rt.DefaultTopic() + "-value"
		if st := call(http.MethodPut, "/config/"+url.PathEscape(subject), map[string]string{"compatibility": "FULL_TRANSITIVE"}, nil); st != http.StatusOK {
			t.Fatalf("compatibility of %s: HTTP %d", subject, st)
		}
		var top map[string]any
		if err := json.Unmarshal([]byte(rt.Schema()), &top); err != nil {
			t.Fatal(err)
		}
		fields := top["fields"].([]any)
		if f := fields[len(fields)-1].(map[string]any); f["name"] != last {
			t.Fatalf("%s: last field %v, want %s", rt, f["name"], last)
		}
		top["fields"] = fields[:len(fields)-1]
		text, _ := json.Marshal(top)
		var out struct {
			ID int `json:"id"`
		}
		if st := call(http.MethodPost, "/subjects/"+url.PathEscape(subject)+"/versions", map[string]string{"schema": string(text)}, &out); st != http.StatusOK {
			t.Fatalf("registering the previous revision of %s: HTTP %d", subject, st)
		}
		c, err := goavro.NewCodec(string(text))
		if err != nil {
			t.Fatal(err)
		}
		return c, out.ID
	}
	qc, qid := older(schemas.TypeWorkerQueryRequest, "max_age_ms")
	rc, rid := older(schemas.TypeWorkerQueryReply, "state")

	codec, err := schemas.NewCodec(context.Background(), schemas.RegistryURLs(reg), schemas.TopicPrefix(prefix))
	if err != nil {
		t.Fatalf("this revision after the previous one, under FULL_TRANSITIVE: %v", err)
	}
	if codec.SchemaID(schemas.TypeWorkerQueryRequest) == qid || codec.SchemaID(schemas.TypeWorkerQueryReply) == rid {
		t.Fatal("this revision reused the previous revision's id")
	}

	hashes := make([]byte, 16)
	hashes[0], hashes[8] = 11, 12
	b, err := qc.BinaryFromNative(schemas.AppendHeader(nil, qid), map[string]any{"correlation_id": "old-router",
		"input": goavro.Union("io.ckfstream.v1.LocalBlockHashes", map[string]any{"hashes": hashes}), "dc_ids": nil, "top_k": int32(0),
		"reply_topic": nil, "reply_partition": nil, "request_time": nil, "block_extra_keys": nil})
	if err != nil {
		t.Fatal(err)
	}
	q, err := codec.DecodeWorkerQueryRequest(b)
	if err != nil || q.CorrelationID != "old-router" || q.MaxAgeMillis.Valid || q.Hashes.Len() != 2 {
		t.Fatalf("a request of the previous revision: %+v, %v", q, err)
	}
	at := time.UnixMicro(1_780_000_000_000_000).UTC()
	b, err = rc.BinaryFromNative(schemas.AppendHeader(nil, rid), map[string]any{"correlation_id": "c", "status": "OK", "error_message": nil,
		"dc_id": int64(7), "query_blocks": int32(2), "sources": []byte{}, "age_ms": goavro.Union("long", int64(5)), "lag_records": int64(0), "reply_time": at})
	if err != nil {
		t.Fatal(err)
	}
	want := schemas.WorkerQueryReply{CorrelationID: "c", Status: schemas.QueryOK, DcID: 7, QueryBlocks: 2, AgeMillis: schemas.Some[int64](5), ReplyTime: at}
	if r, err := codec.DecodeWorkerQueryReply(b); err != nil || !reflect.DeepEqual(r, want) {
		t.Fatalf("a reply of the previous revision: %+v, %v; want %+v (state UNKNOWN)", r, err, want)
	}
}
