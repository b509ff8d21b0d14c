package producer

import (
	"math/rand/v2"
	"testing"

	"github.com/ckf-stream/ckf-stream/ckf"
)

// Checkpoint benchmarks at the relay's recovery size: 1 M resident blocks
// in 2^18 buckets (95.4 % of the slots) over 300 sources, with about 5 %
// of the mappings aliasing another source's chain.
//
//	go test -run '^$' -bench 'Checkpoint' -benchtime 3x -count 1 ./ckf/producer/
//
// "bytes" is the checkpoint size, "resident" the resident blocks. Decode
// is the restarted relay's cost before it replays the tail; encode is how
// long a checkpoint holds up the pool actor. Benchmarks report; no test
// asserts a time.

const ckptBenchResident = 1_000_000

var ckptBench struct {
	cfg   ckf.CkfConfig
	state *DcState
	bytes []byte
}

func ckptBenchSetup(b *testing.B) (ckf.CkfConfig, *DcState, []byte) {
	b.Helper()
	if ckptBench.state != nil {
		return ckptBench.cfg, ckptBench.state, ckptBench.bytes
	}
	cfg := ckf.NewCkfConfig(800_000) // 2^18 buckets
	cfg.MaxKicks = ckf.MaxKicks
	s := mustDcState(b, cfg)
	if s.BucketCount() != 1<<18 {
		b.Fatalf("bucket count %d", s.BucketCount())
	}
	r := rand.New(rand.NewPCG(2026, 12))
	var chains [][]StoredBlock
	ext := uint64(1)
	for i := 0; s.residentCount < ckptBenchResident; i++ {
		k := pSrc(ckf.WorkerID(1+i%150), ckf.DpRank(i/150%2))
		blocks := make([]StoredBlock, 16)
		if i%20 == 19 { // an alias: another source stores an earlier chain
			for j, blk := range chains[r.IntN(len(chains))] {
				blocks[j] = pBlk(ext, uint64(blk.TokensHash))
				ext++
			}
		} else {
			for j := range blocks {
				blocks[j] = pBlk(ext, r.Uint64())
				ext++
			}
			chains = append(chains, blocks)
		}
		s.ApplyEvent(storeEv(k, blocks...))
		if s.tel.CapacityFailures > ckptBenchResident/100 {
			b.Fatalf("filling stalled at %d resident", s.residentCount)
		}
	}
	out, err := s.AppendCheckpoint(nil)
	if err != nil {
		b.Fatal(err)
	}
	ckptBench.cfg, ckptBench.state, ckptBench.bytes = cfg, s, out
	return cfg, s, out
}

func BenchmarkCheckpointEncode(b *testing.B) {
	_, s, ref := ckptBenchSetup(b)
	b.SetBytes(int64(len(ref)))
	b.ReportAllocs()
	for b.Loop() {
		out, err := s.AppendCheckpoint(nil)
		if err != nil || len(out) != len(ref) {
			b.Fatalf("encode: %v", err)
		}
	}
	b.ReportMetric(float64(len(ref)), "bytes")
	b.ReportMetric(float64(s.residentCount), "resident")
}

func BenchmarkCheckpointDecode(b *testing.B) {
	cfg, s, ref := ckptBenchSetup(b)
	b.SetBytes(int64(len(ref)))
	b.ReportAllocs()
	for b.Loop() {
		r, err := RestoreDcState(cfg, ref)
		if err != nil || r.residentCount != s.residentCount {
			b.Fatalf("decode: %v", err)
		}
	}
	b.ReportMetric(float64(len(ref)), "bytes")
	b.ReportMetric(float64(s.residentCount), "resident")
}
