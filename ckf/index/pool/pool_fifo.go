package pool

import "time"

// outstandingDelta is one admitted, not yet applied or discarded delta.
type outstandingDelta struct {
	id       uint64
	images   int
	admitted time.Time
}

// outstandingFIFO is a lane's admitted-but-unapplied deltas, oldest first, in a growable ring.
//
// Why a ring: a lane that keeps up drains its FIFO to empty between runs, and a slice queue
// (append at the tail, reslice at the head) then loses its capacity and reallocates on every
// run. The ring keeps its buffer, so steady-state admission allocates nothing.
//
// Not safe for concurrent use: laneControl.mu guards it.
type outstandingFIFO struct {
	buf  []outstandingDelta // len(buf) is 0 or a power of two
	head int                // index of the oldest entry
	n    int                // entries held
}

// Len is the number of entries held.
func (f *outstandingFIFO) Len() int { return f.n }

// at returns entry i (0 is the oldest); i must be in [0, Len()).
func (f *outstandingFIFO) at(i int) *outstandingDelta { return &f.buf[(f.head+i)&(len(f.buf)-1)] }

// oldest returns the oldest entry; Len() must be > 0.
func (f *outstandingFIFO) oldest() *outstandingDelta { return &f.buf[f.head] }

// push appends d as the newest entry, doubling the ring when full.
func (f *outstandingFIFO) push(d outstandingDelta) {
	if f.n == len(f.buf) {
		f.grow()
	}
	*f.at(f.n) = d
	f.n++
}

func (f *outstandingFIFO) grow() {
	next := make([]outstandingDelta, max(16, 2*len(f.buf)))
	for i := range f.n {
		next[i] = *f.at(i)
	}
	f.buf, f.head = next, 0
}

// remove takes out the entry with the given id and returns its image count; ok is false when
// no entry has that id. Entries leave in FIFO order (O(1)) except for a saturated submit, which
// removes its own newest entries (O(distance from the head)).
func (f *outstandingFIFO) remove(id uint64) (images int, ok bool) {
	for i := range f.n {
		e := f.at(i)
		if e.id != id {
			continue
		}
		images = e.images
		if i == 0 {
			*e = outstandingDelta{}
			f.head = (f.head + 1) & (len(f.buf) - 1)
		} else {
			for j := i; j < f.n-1; j++ {
				*f.at(j) = *f.at(j + 1)
			}
			*f.at(f.n - 1) = outstandingDelta{}
		}
		f.n--
		if f.n == 0 {
			f.head = 0
		}
		return images, true
	}
	return 0, false
}
