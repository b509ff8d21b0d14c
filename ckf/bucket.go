package ckf

import "math/bits"

// Packed bucket layout (producer §4): one uint64 holds four 16-bit slots; slot i
// occupies bits [16i, 16i+16) (slot 0 is the low 16 bits). Slot value 0 is
// the empty marker; fingerprints are never 0.

const (
	// SlotLowBits has 1 in the low bit of every 16-bit lane.
	SlotLowBits uint64 = 0x0001_0001_0001_0001
	// SlotHighBits has the high bit of every 16-bit lane set.
	SlotHighBits uint64 = 0x8000_8000_8000_8000
	// swarLow15 has the low 15 bits of every 16-bit lane set.
	swarLow15 uint64 = 0x7FFF_7FFF_7FFF_7FFF
)

// Bucket is one packed bucket word: four 16-bit slots, slot i at bits
// 16i..16i+15, 0 = empty.
type Bucket uint64

// BroadcastFingerprint returns fp replicated into every 16-bit lane.
func BroadcastFingerprint(fp uint16) uint64 { return uint64(fp) * SlotLowBits }

// HasZeroLane16 reports whether any 16-bit lane of x is zero (the SWAR
// has-zero-lane test of producer §4; exact as a boolean).
func HasZeroLane16(x uint64) bool { return (x-SlotLowBits)&^x&SlotHighBits != 0 }

// ZeroLanes16 returns a mask with the high bit (bit 16i+15) set for exactly
// the 16-bit lanes i of x that are zero. Unlike the borrow-based test it is
// exact per lane: no carry crosses a lane boundary because each lane's low
// 15 bits plus 0x7FFF fit in 16 bits.
func ZeroLanes16(x uint64) uint64 {
	t := ((x & swarLow15) + swarLow15) | x
	return ^t & SlotHighBits
}

// Contains reports whether some slot equals fp (SWAR, exact). For fp == 0
// it reports whether some slot is empty.
func (b Bucket) Contains(fp uint16) bool {
	return HasZeroLane16(uint64(b) ^ BroadcastFingerprint(fp))
}

// Slot returns slot i (0..3). i is reduced mod 4.
func (b Bucket) Slot(i int) uint16 { return uint16(uint64(b) >> (16 * uint(i&3))) }

// WithSlot returns b with slot i (0..3, reduced mod 4) replaced by fp.
func (b Bucket) WithSlot(i int, fp uint16) Bucket {
	shift := 16 * uint(i&3)
	return Bucket(uint64(b)&^(0xFFFF<<shift) | uint64(fp)<<shift)
}

// First returns the lowest slot index holding fp (checked 0,1,2,3).
func (b Bucket) First(fp uint16) (int, bool) {
	m := ZeroLanes16(uint64(b) ^ BroadcastFingerprint(fp))
	if m == 0 {
		return 0, false
	}
	// The lowest set bit is the high bit 16i+15 of the lowest matching lane.
	return bits.TrailingZeros64(m) >> 4, true
}

// FreeSlot returns the lowest empty slot (first_empty = First(0)).
func (b Bucket) FreeSlot() (int, bool) { return b.First(0) }

// IsEmpty reports whether all four slots are empty.
func (b Bucket) IsEmpty() bool { return b == 0 }

// IsFull reports whether no slot is empty.
func (b Bucket) IsFull() bool { return !HasZeroLane16(uint64(b)) }

// Occupied returns the number of non-empty slots.
func (b Bucket) Occupied() int {
	n := 0
	for i := 0; i < 4; i++ {
		if b.Slot(i) != 0 {
			n++
		}
	}
	return n
}
