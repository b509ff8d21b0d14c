package streams

import "github.com/ckf-stream/ckf-stream/ckf"

// Sizes of the chunks a deltaSlab allocates: 256 deltas (one chunk per eight runs of
// maxDeltaRun) and 8,192 images (128 KiB; a run of 32 deltas of 64 images needs 2,048).
const (
	slabDeltas = 256
	slabImages = 8192
)

// deltaSlab hands out the Delta values and image slices of a lane's decoded deltas from chunks,
// and the runs that carry them to the pool, so decoding a delta costs no allocation of its own
// (a chunk serves hundreds of deltas).
//
// Ownership: what it hands out is submitted to the ingestion pool, which reads it on a worker
// goroutine until the delta is applied or discarded. The slab therefore only ever appends: an
// element once handed out is never written again, and a full chunk is replaced by a fresh one
// (the old chunk lives as long as a delta in it is referenced, then the collector frees it).
// Images are handed out with their capacity clipped, so no append can reach a neighbour's.
//
// Used by the lane's runner goroutine only.
type deltaSlab struct {
	deltas []ckf.Delta
	imgs   []ckf.BucketImage
	runs   []*ckf.Delta
}

// run returns an empty slice with room for maxDeltaRun delta pointers, backed by memory no one
// else references: the next run to be collected and submitted.
func (s *deltaSlab) run() []*ckf.Delta {
	if cap(s.runs)-len(s.runs) < maxDeltaRun {
		s.runs = make([]*ckf.Delta, 0, slabDeltas)
	}
	start := len(s.runs)
	s.runs = s.runs[:start+maxDeltaRun]
	return s.runs[start : start : start+maxDeltaRun]
}

// delta returns a zeroed Delta no one else references.
func (s *deltaSlab) delta() *ckf.Delta {
	if len(s.deltas) == cap(s.deltas) {
		s.deltas = make([]ckf.Delta, 0, slabDeltas)
	}
	s.deltas = s.deltas[:len(s.deltas)+1]
	return &s.deltas[len(s.deltas)-1]
}

// images returns a slice of n images no one else references (contents unspecified; the caller
// fills every element). A request larger than a chunk gets its own allocation.
func (s *deltaSlab) images(n int) []ckf.BucketImage {
	if cap(s.imgs)-len(s.imgs) < n {
		if n > slabImages/4 {
			return make([]ckf.BucketImage, n) // big delta: keep the chunk for the small ones
		}
		s.imgs = make([]ckf.BucketImage, 0, slabImages)
	}
	start := len(s.imgs)
	s.imgs = s.imgs[:start+n]
	return s.imgs[start : start+n : start+n]
}
