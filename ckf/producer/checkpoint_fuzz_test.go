package producer

import (
	"bytes"
	"errors"
	"testing"

	"github.com/ckf-stream/ckf-stream/ckf"
)

// FuzzRestoreDcState (go test -run '^$' -fuzz FuzzRestoreDcState
// -fuzztime 60s ./ckf/producer/) feeds RestoreDcState arbitrary input,
// either as it is or, when sealed is set, as a payload wrapped in a valid
// header and checksum so mutations reach the parser and the invariant
// checks instead of stopping at the checksum. Properties: no panic; an
// error is always a *CheckpointError; an accepted input re-encodes to
// exactly the same bytes (the format has one encoding per state), the
// restored state satisfies every invariant, and it keeps working: a short
// random stream on it keeps the invariants and removing everything drains
// it to zero words.
func FuzzRestoreDcState(f *testing.F) {
	cfgs := ckptFuzzConfigs()
	for i, cfg := range cfgs {
		for _, blocks := range []int{0, 3, 40} {
			s := ckptState(f, cfg, ckptEvents(blocks, uint64(10+i)))
			b := mustCheckpoint(f, s)
			f.Add(uint8(i), false, b)
			f.Add(uint8(i), true, payloadOf(b))
		}
	}
	f.Fuzz(func(t *testing.T, sel uint8, sealed bool, data []byte) {
		cfg := cfgs[int(sel)%len(cfgs)]
		in := data
		if sealed {
			in = sealPayload(data)
		}
		s, err := RestoreDcState(cfg, in)
		if err != nil {
			var ce *CheckpointError
			if s != nil || !errors.As(err, &ce) {
				t.Fatalf("restore: state %v, error %v", s != nil, err)
			}
			return
		}
		out, err := s.AppendCheckpoint(nil)
		if err != nil || !bytes.Equal(out, in) {
			t.Fatalf("accepted input does not re-encode to itself (err %v)", err)
		}
		if err := checkInvariants(s); err != nil {
			t.Fatal(err)
		}
		d := &streamDriver{s: s, sources: []ckf.SourceKey{pSrc(1, 0), pSrc(1, 1), pSrc(2, 0), pSrc(3, 7)}}
		if err := d.resync(); err != nil {
			t.Fatal(err)
		}
		c := byteChooser(data)
		for i := 0; i < 20; i++ {
			if err := d.step(c); err != nil {
				t.Fatalf("step %d after restore: %v", i, err)
			}
		}
		if err := d.finish(); err != nil {
			t.Fatal(err)
		}
	})
}

// ckptFuzzConfigs are small tables (so fuzzed words can be dense and
// omissions happen) with several cadences and kick bounds.
func ckptFuzzConfigs() []ckf.CkfConfig {
	a := cfgN(1, 1)
	a.MaxKicks = 4
	b := cfgN(8, 3)
	c := cfgN(24, 2)
	c.MaxKicks = 500
	return []ckf.CkfConfig{a, b, c}
}
