package producer

import (
	"bytes"
	"errors"
	"testing"

	"github.com/ckf-stream/ckf-stream/ckf"
)

// Fuzz targets (go test -fuzz=FuzzX -fuzztime=10s ./ckf/producer/):
//   FuzzProducerEventStream   event application: no panic, invariants hold,
//                             reconstruction and remove-all drain hold;
//   FuzzResidencyParse        residency wire parsing.

// byteChooser draws choices from fuzz input (zero once exhausted).
func byteChooser(data []byte) prodChooser {
	i := 0
	return func(n int) int {
		if n <= 1 {
			return 0
		}
		var v int
		if i < len(data) {
			v = int(data[i])
			i++
		}
		if n > 256 && i < len(data) {
			v = v<<8 | int(data[i])
			i++
		}
		return v % n
	}
}

func FuzzProducerEventStream(f *testing.F) {
	f.Add([]byte{0, 1, 2, 3, 4, 5, 6, 7, 8, 9})
	f.Add(bytes.Repeat([]byte{7, 3, 1, 200, 17}, 40))
	f.Add(bytes.Repeat([]byte{33, 0, 0, 1, 2}, 60))
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) < 3 {
			return
		}
		expected := []uint64{1, 8, 24, 64}[data[0]%4]
		cfg := cfgN(expected, uint64(1+data[1]%3))
		cfg.MaxKicks = []uint64{1, 4, 500}[data[2]%3]
		d := newStreamDriver(t, cfg)
		c := byteChooser(data[3:])
		for i := 0; i < 200 && i*4 < len(data); i++ {
			if err := d.step(c); err != nil {
				t.Fatalf("step %d: %v", i, err)
			}
		}
		if err := d.finish(); err != nil {
			t.Fatal(err)
		}
	})
}

func FuzzResidencyParse(f *testing.F) {
	f.Add("worker")
	f.Add("cache_owner")
	f.Add("")
	f.Fuzz(func(t *testing.T, s string) {
		r, err := ParseResidencyDomain(s)
		if err != nil {
			if !errors.Is(err, ckf.ErrUnsupportedResidencyDomain) {
				t.Fatal(err)
			}
			return
		}
		if !r.Known() || r.String() != s {
			t.Fatalf("%q -> %v", s, r)
		}
	})
}
