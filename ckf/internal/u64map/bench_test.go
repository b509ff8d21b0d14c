package u64map

import (
	"math/rand/v2"
	"testing"
)

// ownerLike has the ownership record's shape: 5 bytes, no alignment.
type ownerLike [5]byte

// BenchmarkFill inserts 2^22 random keys into an empty map of 13-byte slots (the ownership
// table's), growth included, and reports ns per key.
func BenchmarkFill(b *testing.B) {
	const n = 1 << 22
	keys := make([]uint64, n)
	r := rand.New(rand.NewPCG(1, 2))
	for i := range keys {
		keys[i] = r.Uint64() | 1
	}
	for b.Loop() {
		var m Map[uint64, ownerLike]
		for _, k := range keys {
			m.Upsert(k)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/key")
}
