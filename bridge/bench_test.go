package bridge

import (
	"context"
	"testing"

	"github.com/ckf-stream/ckf-stream/bridge/kvevents"
	"github.com/ckf-stream/ckf-stream/schemas"
	"github.com/vmihailenco/msgpack/v5"
)

// benchBatch is a vLLM batch in the recent map form: 4 stores of 8 blocks of 16 tokens with
// 32-byte hashes, chained, and one removal of 8 blocks.
func benchBatch(b *testing.B, n int) []byte {
	b.Helper()
	hash := func(i int) []byte {
		h := make([]byte, 32)
		h[0], h[1], h[2] = byte(n), byte(i), byte(i>>8)
		return h
	}
	var events []any
	for s := 0; s < 4; s++ {
		var hs []any
		var toks []any
		for k := 0; k < 8; k++ {
			hs = append(hs, hash(s*8+k))
			for j := 0; j < 16; j++ {
				toks = append(toks, (n*1000+s*128+k*16+j)%50000)
			}
		}
		events = append(events, map[string]any{"type": "BlockStored", "block_hashes": hs, "parent_block_hash": nil,
			"token_ids": toks, "block_size": 16, "lora_id": nil, "medium": "GPU", "lora_name": nil})
	}
	var rm []any
	for k := 0; k < 8; k++ {
		rm = append(rm, hash(k))
	}
	events = append(events, map[string]any{"type": "BlockRemoved", "block_hashes": rm, "medium": "GPU"})
	p, err := msgpack.Marshal(map[string]any{"ts": 1.0, "events": events, "data_parallel_rank": 0})
	if err != nil {
		b.Fatal(err)
	}
	return p
}

// BenchmarkDecodeConvertEncode measures the bridge's CPU work per batch without sockets or
// Kafka: msgpack decoding, conversion (token hashing, copy counting) and Avro encoding of the
// records. events/s counts engine events.
func BenchmarkDecodeConvertEncode(b *testing.B) {
	codec, err := schemas.NewCodec(context.Background())
	if err != nil {
		b.Fatal(err)
	}
	payloads := make([][]byte, 64)
	for i := range payloads {
		payloads[i] = benchBatch(b, i)
	}
	conv := NewConverter(1, 16, nil)
	var out []schemas.KvEvent
	var buf []byte
	events := 0
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		batch, err := kvevents.Decode(payloads[i%len(payloads)])
		if err != nil {
			b.Fatal(err)
		}
		events += len(batch.Events)
		out, _, err = conv.Convert(out[:0], &batch, 0, 0)
		if err != nil {
			b.Fatal(err)
		}
		for j := range out {
			if buf, err = codec.AppendKvEvent(buf[:0], out[j]); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.ReportMetric(float64(events)/b.Elapsed().Seconds(), "events/s")
}
