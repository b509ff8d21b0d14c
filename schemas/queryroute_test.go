package schemas

import (
	"errors"
	"strings"
	"testing"

	"github.com/linkedin/goavro/v2"
	"github.com/twmb/franz-go/pkg/sr"
)

// TestQueryRoute: the reply address is read from every request whose body is
// valid Avro of the embedded layout, whatever contract rule it breaks, and from
// nothing else; unusable addresses are left out or refuse the route.
func TestQueryRoute(t *testing.T) {
	c := newTestCodec(t)
	id := c.SchemaID(TypeQueryRequest)
	frame := func(q QueryRequest) []byte { return appendQueryRequestBody(AppendHeader(nil, id), &q) }
	with := func(fn func(q *QueryRequest)) []byte {
		q := testQueryRequests()["tokens-full"]
		fn(&q)
		return frame(q)
	}
	full := testQueryRequests()["tokens-full"]
	fullRoute := QueryRoute{CorrelationID: full.CorrelationID, ReplyTopic: full.ReplyTopic, ReplyPartition: full.ReplyPartition}
	// A request by hashes with lane_mask 2^16, which no QueryRequest value can carry.
	wideMask := appendString(AppendHeader(nil, id), "wide")
	wideMask = appendBytes(appendLong(wideMask, 0), nil)
	wideMask = appendLong(appendLong(wideMask, 1), 1<<16)
	wideMask = appendString(appendLong(wideMask, 1), "replies")
	wideMask = append(wideMask, 0, 0)
	lane := testDelta(1)
	laneFrame, err := c.EncodeLaneRecord(lane)
	if err != nil {
		t.Fatal(err)
	}

	for _, tc := range []struct {
		name    string
		frame   []byte
		decode  error // the kind DecodeQueryRequest reports, nil for a valid request
		want    QueryRoute
		routeOK bool
	}{
		{"valid", frame(full), nil, fullRoute, true},
		{"block size 0", with(func(q *QueryRequest) { q.BlockSize = 0 }), ErrInvalidField, fullRoute, true},
		{"ragged hashes", frame(QueryRequest{CorrelationID: "h", Input: InputLocalBlockHashes, Hashes: PackedU64{1, 2, 3}, ReplyTopic: "t"}),
			ErrInvalidField, QueryRoute{CorrelationID: "h", ReplyTopic: "t"}, true},
		{"negative reply partition", with(func(q *QueryRequest) { q.ReplyPartition = Some[int32](-5) }),
			ErrInvalidField, QueryRoute{CorrelationID: full.CorrelationID, ReplyTopic: full.ReplyTopic}, true},
		{"lane mask beyond 16 bits", wideMask, ErrInvalidField, QueryRoute{CorrelationID: "wide", ReplyTopic: "replies"}, true},
		{"longest topic name", with(func(q *QueryRequest) { q.ReplyTopic = strings.Repeat("t", 249) }),
			nil, QueryRoute{CorrelationID: full.CorrelationID, ReplyTopic: strings.Repeat("t", 249), ReplyPartition: full.ReplyPartition}, true},
		{"topic name too long", with(func(q *QueryRequest) { q.ReplyTopic = strings.Repeat("t", 250) }),
			nil, QueryRoute{CorrelationID: full.CorrelationID, ReplyPartition: full.ReplyPartition}, true},
		{"topic name not UTF-8", with(func(q *QueryRequest) { q.ReplyTopic = "\xff" }),
			nil, QueryRoute{CorrelationID: full.CorrelationID, ReplyPartition: full.ReplyPartition}, true},
		{"empty correlation id", with(func(q *QueryRequest) { q.CorrelationID = "" }), ErrInvalidField, QueryRoute{}, false},
		{"correlation id too long", with(func(q *QueryRequest) { q.CorrelationID = strings.Repeat("c", MaxCorrelationIDBytes+1) }),
			ErrInvalidField, QueryRoute{CorrelationID: strings.Repeat("c", MaxCorrelationIDBytes), IDTruncated: true,
				ReplyTopic: full.ReplyTopic, ReplyPartition: full.ReplyPartition}, true},
		// 255 ASCII bytes then a 3-byte character across the limit: the cut falls before it.
		{"correlation id too long, cut at a character", with(func(q *QueryRequest) { q.CorrelationID = strings.Repeat("c", 255) + "€€" }),
			ErrInvalidField, QueryRoute{CorrelationID: strings.Repeat("c", 255), IDTruncated: true,
				ReplyTopic: full.ReplyTopic, ReplyPartition: full.ReplyPartition}, true},
		{"correlation id too long and not UTF-8", with(func(q *QueryRequest) { q.CorrelationID = strings.Repeat("c", 300) + "\xc3" }),
			ErrInvalidField, QueryRoute{}, false},
		{"correlation id not UTF-8", with(func(q *QueryRequest) { q.CorrelationID = "\xc3" }), ErrInvalidField, QueryRoute{}, false},
		// Cut inside block_extra_keys (its array's end; the last byte is lane_mask64's null, and a
		// body that ends before it is the earlier revision's, valid).
		{"truncated", frame(full)[:len(frame(full))-2], ErrTruncated, QueryRoute{}, false},
		{"trailing byte", append(frame(full), 0), ErrMalformed, QueryRoute{}, false},
		{"bad input branch", append(appendString(AppendHeader(nil, id), "x"), 4), ErrMalformed, QueryRoute{}, false},
		{"not framed", []byte("routing"), ErrUnknownMagic, QueryRoute{}, false},
		{"unknown id", appendQueryRequestBody(AppendHeader(nil, id+100), &full), ErrUnknownSchemaID, QueryRoute{}, false},
		{"lane record", laneFrame, ErrSchemaMismatch, QueryRoute{}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := c.DecodeQueryRequest(tc.frame)
			if tc.decode == nil && err != nil || tc.decode != nil && !errors.Is(err, tc.decode) {
				t.Fatalf("decode: %v, want kind %v", err, tc.decode)
			}
			got, ok := c.QueryRoute(tc.frame)
			if ok != tc.routeOK || got != tc.want {
				t.Fatalf("route %+v, %v; want %+v, %v", got, ok, tc.want, tc.routeOK)
			}
		})
	}
}

// TestQueryRouteSchemaIDs: every id of the embedded layout is routed (the
// built-in id through a registry codec, and a codec that decodes with goavro);
// another version of the schema is not, as its field layout is not known.
func TestQueryRouteSchemaIDs(t *testing.T) {
	reg := newRegistry(t)
	c := newTestCodec(t, RegistryURLs(reg.URL()))
	q := testQueryRequests()["tokens-full"]
	q.BlockSize = 0
	want := QueryRoute{CorrelationID: q.CorrelationID, ReplyTopic: q.ReplyTopic, ReplyPartition: q.ReplyPartition}
	for _, id := range []int{c.SchemaID(TypeQueryRequest), BuiltinID(TypeQueryRequest)} {
		b := appendQueryRequestBody(AppendHeader(nil, id), &q)
		if _, err := c.DecodeQueryRequest(b); !errors.Is(err, ErrInvalidField) {
			t.Fatalf("id %d: decode %v", id, err)
		}
		if got, ok := c.QueryRoute(b); !ok || got != want {
			t.Fatalf("id %d: route %+v, %v", id, got, ok)
		}
	}
	slow := newTestCodec(t, disableFastPath())
	b := appendQueryRequestBody(AppendHeader(nil, BuiltinID(TypeQueryRequest)), &q)
	if got, ok := slow.QueryRoute(b); !ok || got != want {
		t.Fatalf("goavro-path codec: route %+v, %v", got, ok)
	}

	older := mutate(t, TypeQueryRequest, func(top map[string]any) {
		fields := top["fields"].([]any)
		top["fields"] = fields[:len(fields)-1] // without request_time
	})
	id, _, err := reg.RegisterSchema(c.Subject(TypeQueryRequest), sr.Schema{Schema: older, Type: sr.TypeAvro})
	if err != nil {
		t.Fatal(err)
	}
	wc, err := goavro.NewCodec(older)
	if err != nil {
		t.Fatal(err)
	}
	native := queryRequestNative(&q)
	delete(native, "request_time")
	ob, err := wc.BinaryFromNative(AppendHeader(nil, id), native)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.DecodeQueryRequest(ob); !errors.Is(err, ErrInvalidField) {
		t.Fatalf("older schema: decode %v", err)
	}
	if got, ok := c.QueryRoute(ob); ok {
		t.Fatalf("older schema routed: %+v", got)
	}
}
