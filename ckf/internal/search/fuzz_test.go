package search

import (
	"testing"
)

// FuzzFindPrefixDepths checks the pure search on arbitrary memberships:
// no panic, depth <= n, lanes outside the mask are 0, and a monotone
// membership gives exactly the linear answer.
func FuzzFindPrefixDepths(f *testing.F) {
	f.Add([]byte{1, 1, 1, 0, 1, 1, 1, 1}, uint16(1), uint8(1))
	f.Add([]byte{0xFF, 0xFF, 0x0F, 0x03, 0x01}, uint16(0xFFFF), uint8(2))
	f.Fuzz(func(t *testing.T, data []byte, ready uint16, window uint8) {
		n := len(data) / 2
		m := make(membership, n)
		for i := range m {
			m[i] = uint16(data[2*i]) | uint16(data[2*i+1])<<8
		}
		w := int(window%8) + 1
		got := Find(n, ready, w, m.probe)
		for l, d := range got {
			if d > uint32(n) || (ready&(1<<uint(l)) == 0 && d != 0) {
				t.Fatalf("lane %d depth %d n %d ready %016b", l, d, n, ready)
			}
		}
		// Make it monotone (prefix-AND) and compare with linear.
		mono := make(membership, n)
		acc := uint16(0xFFFF)
		for i := range m {
			acc &= m[i]
			mono[i] = acc
		}
		if a, b := Find(n, ready, w, mono.probe), Linear(n, ready, mono.probe); a != b {
			t.Fatalf("monotone: %v vs linear %v", a, b)
		}
	})
}

// FuzzFindPrefixDepthsWide is FuzzFindPrefixDepths for the 64-lane search (consumer §16).
func FuzzFindPrefixDepthsWide(f *testing.F) {
	f.Add([]byte{1, 0, 0, 0, 0, 0, 0, 0x80, 1, 0, 0, 0, 0, 0, 0, 0x80}, uint64(1<<63|1), uint8(1))
	f.Add([]byte{0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0x0F}, ^uint64(0), uint8(2))
	f.Fuzz(func(t *testing.T, data []byte, ready uint64, window uint8) {
		n := len(data) / 8
		m := make(wideMembership, n)
		for i := range m {
			for k := 0; k < 8; k++ {
				m[i] |= uint64(data[8*i+k]) << (8 * k)
			}
		}
		w := int(window%8) + 1
		got := findWide(n, ready, w, m.probe)
		for l, d := range got {
			if d > uint32(n) || (ready&(1<<uint(l)) == 0 && d != 0) {
				t.Fatalf("lane %d depth %d n %d ready %064b", l, d, n, ready)
			}
		}
		mono := make(wideMembership, n)
		acc := ^uint64(0)
		for i := range m {
			acc &= m[i]
			mono[i] = acc
		}
		if a, b := findWide(n, ready, w, mono.probe), LinearWide(n, ready, mono.probe); a != b {
			t.Fatalf("monotone: %v vs linear %v", a, b)
		}
	})
}
