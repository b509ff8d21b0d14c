package schemas

import (
	"testing"

	"github.com/ckf-stream/ckf-stream/ckf"
)

func benchEncode(b *testing.B, c *Codec, rec LaneRecord) {
	buf, err := c.AppendLaneRecord(nil, rec)
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(buf)))
	b.ReportAllocs()
	for b.Loop() {
		buf, err = c.AppendLaneRecord(buf[:0], rec)
		if err != nil {
			b.Fatal(err)
		}
	}
}

func benchDecode(b *testing.B, c *Codec, rec LaneRecord) {
	buf, err := c.EncodeLaneRecord(rec)
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(buf)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := c.DecodeLaneRecord(buf); err != nil {
			b.Fatal(err)
		}
	}
}

// benchDecodeUnpack decodes and unpacks the bulk into a reused slice, the
// work the lane goroutine does before handing a record to the ingestor.
func benchDecodeUnpack(b *testing.B, c *Codec, rec LaneRecord) {
	buf, err := c.EncodeLaneRecord(rec)
	if err != nil {
		b.Fatal(err)
	}
	words := make([]uint64, 0, rec.Snapshot.Words.Len())
	imgs := make([]BucketImage, 0, rec.Delta.Images.Len())
	b.SetBytes(int64(len(buf)))
	b.ReportAllocs()
	for b.Loop() {
		r, err := c.DecodeLaneRecord(buf)
		if err != nil {
			b.Fatal(err)
		}
		words = r.Snapshot.Words.AppendTo(words[:0])
		imgs = r.Delta.Images.AppendTo(imgs[:0])
	}
}

// benchDecoder decodes with one LaneRecordDecoder, as a lane's decode stage does: every record
// after the first finds its identity remembered.
func benchDecoder(b *testing.B, c *Codec, rec LaneRecord) {
	buf, err := c.EncodeLaneRecord(rec)
	if err != nil {
		b.Fatal(err)
	}
	d := c.NewLaneRecordDecoder()
	b.SetBytes(int64(len(buf)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := d.Decode(buf); err != nil {
			b.Fatal(err)
		}
	}
}

const mib = 1 << 20

// BenchmarkLaneDelta16 is the delta of the T9 target's smallest size (16 images), decoded by the
// codec alone and by a LaneRecordDecoder.
func BenchmarkLaneDelta16(b *testing.B) {
	rec := testDelta(16)
	c := newTestCodec(b)
	b.Run("decode", func(b *testing.B) { benchDecode(b, c, rec) })
	b.Run("decoder", func(b *testing.B) { benchDecoder(b, c, rec) })
}

func BenchmarkLaneDelta64(b *testing.B) {
	rec := testDelta(64)
	fast, slow := newTestCodec(b), newTestCodec(b, disableFastPath())
	b.Run("encode", func(b *testing.B) { benchEncode(b, fast, rec) })
	b.Run("decode", func(b *testing.B) { benchDecode(b, fast, rec) })
	b.Run("decode+unpack", func(b *testing.B) { benchDecodeUnpack(b, fast, rec) })
	b.Run("decoder", func(b *testing.B) { benchDecoder(b, fast, rec) })
	b.Run("goavro/encode", func(b *testing.B) { benchEncode(b, slow, rec) })
	b.Run("goavro/decode", func(b *testing.B) { benchDecode(b, slow, rec) })
}

func BenchmarkLaneSnapshot1MiB(b *testing.B) {
	rec := testSnapshot(mib / WordSize)
	fast, slow := newTestCodec(b), newTestCodec(b, disableFastPath())
	b.Run("encode", func(b *testing.B) { benchEncode(b, fast, rec) })
	b.Run("decode", func(b *testing.B) { benchDecode(b, fast, rec) })
	b.Run("decode+unpack", func(b *testing.B) { benchDecodeUnpack(b, fast, rec) })
	b.Run("goavro/encode", func(b *testing.B) { benchEncode(b, slow, rec) })
	b.Run("goavro/decode", func(b *testing.B) { benchDecode(b, slow, rec) })
}

func benchEncodeDecode[T any](b *testing.B, v T, enc func(*Codec, []byte, T) ([]byte, error), dec func(*Codec, []byte) (T, error)) {
	for _, path := range []struct {
		name string
		c    *Codec
	}{{"", newTestCodec(b)}, {"goavro/", newTestCodec(b, disableFastPath())}} {
		buf, err := enc(path.c, nil, v)
		if err != nil {
			b.Fatal(err)
		}
		b.Run(path.name+"encode", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				buf, _ = enc(path.c, buf[:0], v)
			}
		})
		b.Run(path.name+"decode", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := dec(path.c, buf); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkQueryRequest: a 32-block query by local block hashes.
func BenchmarkQueryRequest(b *testing.B) {
	q := QueryRequest{CorrelationID: "router-7/123456", Input: InputLocalBlockHashes, Hashes: testWords(32)}
	benchEncodeDecode(b, q, (*Codec).AppendQueryRequest, (*Codec).DecodeQueryRequest)
}

// BenchmarkQueryReply: an answer from all 16 lanes.
func BenchmarkQueryReply(b *testing.B) {
	r := QueryReply{CorrelationID: "router-7/123456", Status: QueryOK, ReadyLanes: AllLanes, QueryBlocks: 32, ReplyTime: testTime(1)}
	for lane := range ckf.LaneCount {
		r.Lanes = append(r.Lanes, LaneMatch{Lane: uint8(lane), DcID: uint64(lane) << 56, Pool: testIdentity().Pool.String(), Depth: uint32(lane * 2)})
	}
	benchEncodeDecode(b, r, (*Codec).AppendQueryReply, (*Codec).DecodeQueryReply)
}

// BenchmarkKvEventStored: a store of 16 blocks.
func BenchmarkKvEventStored(b *testing.B) {
	e := KvEvent{WorkerID: 7, DpRank: 1, EventID: 99, StorageTier: TierDevice, ResidencyDomain: Some(ResidencyWorker), Kind: KvStoredEvent}
	e.Stored.ParentHash = Some[uint64](1 << 63)
	for i := range 16 {
		e.Stored.Blocks = append(e.Stored.Blocks, KvBlock{BlockHash: uint64(i) * 0x9E3779B97F4A7C15, TokensHash: uint64(i) << 40})
	}
	benchEncodeDecode(b, e, (*Codec).AppendKvEvent, (*Codec).DecodeKvEvent)
}
