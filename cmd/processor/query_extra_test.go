package main

import (
	"context"
	"reflect"
	"strings"
	"testing"

	"github.com/ckf-stream/ckf-stream/ckf"
	"github.com/ckf-stream/ckf-stream/schemas"
)

// TestQueryFlagsExtraKeys: --extra-keys (the HTTP API's block_extra_keys JSON) and --cache-salt
// (appended to the first block's keys, the engines' place for it) build the request's
// BlockExtraKeys, which both the HTTP and the Kafka request carry; keys without token ids, JSON
// that is not a list of blocks' keys, and more entries than blocks are refused.
func TestQueryFlagsExtraKeys(t *testing.T) {
	img := ckf.ExtraTupleValue(ckf.ExtraStringValue("img"), ckf.ExtraIntValue(1))
	for name, tc := range map[string]struct {
		f    queryFlags
		want []ckf.ExtraKeys
	}{
		"keys":          {queryFlags{tokens: "1,2,3,4", blockSize: 2, extraKeys: `[[["img",1]],null]`}, []ckf.ExtraKeys{{img}, nil}},
		"salt":          {queryFlags{tokens: "1,2,3,4", blockSize: 2, cacheSalt: "s"}, []ckf.ExtraKeys{{ckf.ExtraStringValue("s")}}},
		"keys and salt": {queryFlags{tokens: "1,2,3,4", blockSize: 2, extraKeys: `[[["img",1]]]`, cacheSalt: "s"}, []ckf.ExtraKeys{{img, ckf.ExtraStringValue("s")}}},
		"none":          {queryFlags{tokens: "1,2,3,4", blockSize: 2}, nil},
	} {
		req, err := tc.f.request()
		if err != nil || !reflect.DeepEqual(req.BlockExtraKeys, tc.want) {
			t.Errorf("%s: %v, %v; want %v", name, req.BlockExtraKeys, err, tc.want)
			continue
		}
		codec, err := schemas.NewCodec(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		req.CorrelationID = "cli"
		b, err := codec.EncodeQueryRequest(req)
		if err != nil {
			t.Fatalf("%s: encode: %v", name, err)
		}
		back, err := codec.DecodeQueryRequest(b)
		if err != nil || !reflect.DeepEqual(back.BlockExtraKeys, tc.want) {
			t.Errorf("%s: over Kafka %v, %v; want %v", name, back.BlockExtraKeys, err, tc.want)
		}
	}
	for name, tc := range map[string]struct {
		f    queryFlags
		want string
	}{
		"with hashes":  {queryFlags{hashes: "1", extraKeys: `[null]`}, "go with --tokens"},
		"salt, hashes": {queryFlags{hashes: "1", cacheSalt: "s"}, "go with --tokens"},
		"not a list":   {queryFlags{tokens: "1,2", blockSize: 2, extraKeys: `{"a":1}`}, "--extra-keys: not a JSON list"},
		"two values":   {queryFlags{tokens: "1,2", blockSize: 2, extraKeys: `[] []`}, "more than one JSON value"},
		"too many":     {queryFlags{tokens: "1,2", blockSize: 2, extraKeys: `[null,null]`}, "at most one per block"},
	} {
		if _, err := tc.f.request(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error saying %q", name, err, tc.want)
		}
	}
}
