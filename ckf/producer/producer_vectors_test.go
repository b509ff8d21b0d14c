package producer

import (
	"testing"

	"github.com/ckf-stream/ckf-stream/ckf"
)

func TestRngVector(t *testing.T) {
	if got := LaneRngSeed(ckf.DefaultSeed, 0); got != 0xC050D0A84124DB84 {
		t.Fatalf("lane rng seed %#x", got)
	}
}

func TestLookupPathsDoNotAllocate(t *testing.T) {
	s := mustDcState(t, cfgN(1024, 1))
	s.ApplyEvent(storeEv(pSrc(1, 0), pBlk(1, 42)))
	a := s.Addressing()
	h := uint64(0)
	for name, fn := range map[string]func(){
		"Addressing.Probe":      func() { _ = a.Probe(h); h++ },
		"PackedFilter.Contains": func() { _ = s.filter.Contains(h); h++ },
		"DcState.Contains":      func() { _ = s.Contains(ckf.CanonicalHash(h)); h++ },
		"NextSequenceHash":      func() { h = ckf.NextSequenceHash(h, 7) },
		"Bucket.Contains":       func() { _ = ckf.Bucket(h).Contains(uint16(h)); h++ },
	} {
		if n := testing.AllocsPerRun(1000, fn); n != 0 {
			t.Errorf("%s allocates %v per call", name, n)
		}
	}
}
