package ckf

import (
	"math/rand/v2"
	"testing"
)

// Hashing benchmarks (design §6.2 target T10), one operation per block or
// per hash so that they pair with a per-call measurement of another
// implementation:
//
//	go test -run '^$' -bench 'SequenceHashChain|Addressing' -count 5 ./ckf/
//
// No benchmark asserts a time.

var hashBenchSink uint64

// hashBenchLocal returns n pseudo-random local block hashes (fixed seed).
func hashBenchLocal(n int) []uint64 {
	r := rand.New(rand.NewPCG(13, 1337))
	local := make([]uint64, n)
	for i := range local {
		local[i] = r.Uint64()
	}
	return local
}

// BenchmarkSequenceHashChain measures the rolling sequence hash per block.
// "next": one dependent NextSequenceHash per op (each block's parent is the
// previous result, as in a request's chain). "append_128": the 128-block
// chain through AppendSequenceHashes into a reused slice; ns/op is per
// block (b.N counts blocks, rounded up to whole chains).
func BenchmarkSequenceHashChain(b *testing.B) {
	local := hashBenchLocal(128)
	b.Run("next", func(b *testing.B) {
		b.ReportAllocs()
		prev := local[0]
		for i := 0; i < b.N; i++ {
			prev = NextSequenceHash(prev, local[i&127])
		}
		hashBenchSink = prev
	})
	b.Run("append_128", func(b *testing.B) {
		b.ReportAllocs()
		dst := make([]uint64, 0, len(local))
		chains := (b.N + len(local) - 1) / len(local)
		b.ResetTimer()
		for range chains {
			dst = AppendSequenceHashes(dst[:0], local)
		}
		b.StopTimer()
		hashBenchSink = dst[len(dst)-1]
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(chains*len(local)), "ns/block")
	})
}

// BenchmarkAddressing measures Addressing.Probe per hash (fingerprint and
// both buckets, 2^20 buckets, the default seed) over a ring of 4,096
// random sequence hashes; the probes are independent, so this is the
// throughput a query or a producer batch sees.
func BenchmarkAddressing(b *testing.B) {
	hashes := hashBenchLocal(4096)
	for _, n := range []uint64{1 << 16, 1 << 20} {
		a, err := NewAddressing(n, DefaultSeed)
		if err != nil {
			b.Fatal(err)
		}
		name := "buckets=2^16"
		if n == 1<<20 {
			name = "buckets=2^20"
		}
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			var acc uint64
			for i := 0; i < b.N; i++ {
				p := a.Probe(hashes[i&4095])
				acc += p.BucketA ^ p.BucketB ^ uint64(p.Fingerprint)
			}
			hashBenchSink = acc
		})
	}
}
