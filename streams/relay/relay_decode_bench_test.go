package relay

import (
	"testing"

	"github.com/ckf-stream/ckf-stream/schemas"
)

// BenchmarkRelayDecodeConvert: the relay's per-record work before DcState, on a store of 8
// blocks (BenchmarkE2ERelay's mean is 8.4 blocks per event): "fresh" is the decode and
// conversion into new values per record (DecodeKvEvent, RouterEventOf), "reused" the relay's
// path into one reused KvEvent and RouterEvent (DecodeKvEventInto, RouterEventInto).
func BenchmarkRelayDecodeConvert(b *testing.B) {
	codec, err := schemas.NewCodec(b.Context())
	if err != nil {
		b.Fatal(err)
	}
	e := schemas.KvEvent{WorkerID: 7, EventID: 99, StorageTier: schemas.TierDevice, Kind: schemas.KvStoredEvent}
	e.Stored.ParentHash = schemas.Some[uint64](1 << 63)
	for i := range 8 {
		e.Stored.Blocks = append(e.Stored.Blocks, schemas.KvBlock{BlockHash: uint64(i+1) * 0x9E3779B97F4A7C15, TokensHash: uint64(i) << 40})
	}
	rec, err := codec.EncodeKvEvent(e)
	if err != nil {
		b.Fatal(err)
	}
	b.Run("fresh", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			ev, err := codec.DecodeKvEvent(rec)
			if err != nil {
				b.Fatal(err)
			}
			if re := RouterEventOf(&ev); len(re.Event.Stored.Blocks) != 8 {
				b.Fatal("lost blocks")
			}
		}
	})
	b.Run("reused", func(b *testing.B) {
		b.ReportAllocs()
		var rl relayLoop
		for b.Loop() {
			if err := codec.DecodeKvEventInto(rec, &rl.kvEvent); err != nil {
				b.Fatal(err)
			}
			if RouterEventInto(&rl.kvEvent, &rl.routerEvent); len(rl.routerEvent.Event.Stored.Blocks) != 8 {
				b.Fatal("lost blocks")
			}
		}
	})
}
