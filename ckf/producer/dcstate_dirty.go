package producer

import (
	"slices"

	"github.com/ckf-stream/ckf-stream/ckf"
)

// pubWindow is the publication window (producer §7.6): a dirty bitmap of
// ceil(bucket_count/64) words, the insertion-ordered dirty list and, in
// parallel, each dirty bucket's first pre-mutation word in this window.
// Only successful physical mutations mark buckets; rolled-back kicks never
// do. scratch is the publication ordering's reusable working memory
// (dcstate_order.go).
type pubWindow struct {
	bits        []uint64
	dirty       []uint64
	orig        []uint64
	pending     uint64
	materialize bool
	// oneWalk says every dirty bucket came from a single touch log (one insertion's walk,
	// or one removal) that touched each bucket once: the window's moves then form one path,
	// and reverse first-touch order is a publication order (see publicationOrder).
	oneWalk bool
	scratch orderScratch
	// slab is the block that small batches are carved from (see takeImages): its length is
	// the part already handed out.
	slab []ckf.BucketImage
}

// imageSlabLen is the number of images in one slab allocation (4 KiB): at cadence 1 a
// one-block store drains one to a few images, and allocating each such batch on its own
// was one heap allocation per event. Batches of more than imageSlabLen/4 images get an
// allocation of their own.
const imageSlabLen = 256

// takeImages returns an empty batch with room for exactly n images. Small batches are
// carved from a shared slab, so one allocation serves many drains; the capacity is capped
// at n, so a caller that appends to its batch gets a new array instead of writing into a
// neighbour's images, and the window never writes a region again once handed out: every
// batch stays caller-owned and disjoint from every other. The trade-off is retention: a
// caller that keeps a small batch keeps its slab (at most 4 KiB) alive.
func (w *pubWindow) takeImages(n int) []ckf.BucketImage {
	if n > imageSlabLen/4 {
		return make([]ckf.BucketImage, 0, n)
	}
	if cap(w.slab)-len(w.slab) < n {
		w.slab = make([]ckf.BucketImage, 0, imageSlabLen)
	}
	start := len(w.slab)
	w.slab = w.slab[:start+n]
	return w.slab[start : start : start+n]
}

func newPubWindow(bucketCount uint64) pubWindow {
	return pubWindow{bits: make([]uint64, (bucketCount+63)/64), materialize: true}
}

// marked reports whether bucket b is dirty in this window.
func (w *pubWindow) marked(b uint64) bool { return w.bits[b>>6]&(1<<(b&63)) != 0 }

// mark records b with its pre-mutation word; a no-op if already marked.
func (w *pubWindow) mark(b, before uint64) {
	bit := uint64(1) << (b & 63)
	if w.bits[b>>6]&bit != 0 {
		return
	}
	w.bits[b>>6] |= bit
	w.dirty = append(w.dirty, b)
	w.orig = append(w.orig, before)
}

// grow ensures room for n more dirty entries without reallocation.
func (w *pubWindow) grow(n int) {
	w.dirty = slices.Grow(w.dirty, n)
	w.orig = slices.Grow(w.orig, n)
}

// reset clears the window (not the materialization flag).
func (w *pubWindow) reset() {
	for _, b := range w.dirty {
		w.bits[b>>6] = 0
	}
	w.dirty = w.dirty[:0]
	w.orig = w.orig[:0]
	w.pending = 0
	w.oneWalk = false
}

func (w *pubWindow) bytes() uint64 {
	return uint64(8*len(w.bits)+8*cap(w.dirty)+8*cap(w.orig)) + w.scratch.bytes()
}

// markTouches marks every logged write (first touch wins) and counts them
// as physical touches.
func (s *DcState) markTouches(ts []Touch) {
	w := &s.win
	before := len(w.dirty)
	for _, t := range ts {
		w.mark(t.Bucket, t.Before)
	}
	w.oneWalk = before == 0 && len(w.dirty) == len(ts)
	s.tel.PhysicalTouches = satAdd(s.tel.PhysicalTouches, uint64(len(ts)))
}

// drain is drain_publication (producer §7.6). It returns the absolute images of the
// dirty buckets whose word differs from the window's first-touch original,
// in publication order (publicationOrder): a bucket that received a
// fingerprint relocated out of another bucket comes before that bucket, so
// a consumer storing the images one by one never shows a fingerprint that
// is resident before and after the batch as absent in between; otherwise
// first-touch order. To make such an order exist, a relocation cycle of the
// window is undone in the words first (placement changes, membership does
// not; Telemetry.UnrotatedCycles counts them), also while materialization
// is disabled, so the words never depend on the flag. It returns nil when
// there is nothing to publish (nothing pending, every dirty bucket
// net-reverted, or materialization disabled). A returned batch is never
// empty, has unique buckets < bucket_count, and is owned by the caller: no
// other batch shares its elements and the state never writes them again
// (small batches share one allocation; see takeImages). The window is
// cleared either way.
func (s *DcState) drain() []ckf.BucketImage {
	w := &s.win
	if w.pending == 0 && len(w.dirty) == 0 {
		return nil
	}
	order := s.publicationOrder()
	words := s.filter.words
	s.tel.DistinctTouchedBuckets = satAdd(s.tel.DistinctTouchedBuckets, uint64(len(w.dirty)))
	s.tel.NetRevertedBuckets = satAdd(s.tel.NetRevertedBuckets, uint64(len(w.dirty)-len(order)))
	var images []ckf.BucketImage
	if w.materialize && len(order) > 0 {
		images = w.takeImages(len(order))
		for _, i := range order {
			b := w.dirty[i]
			images = append(images, ckf.BucketImage{Bucket: b, Value: words[b]})
		}
		s.tel.EmittedImages = satAdd(s.tel.EmittedImages, uint64(len(images)))
	}
	w.reset()
	return images
}

// Flush is a forced drain: it returns the pending batch (nil if none), in
// publication order (see drain), regardless of the cadence.
func (s *DcState) Flush() []ckf.BucketImage { return s.drain() }

// HasPendingPublication reports pending_events != 0 or a non-empty dirty
// list.
func (s *DcState) HasPendingPublication() bool {
	return s.win.pending != 0 || len(s.win.dirty) != 0
}

// PendingEventCount returns pending_events.
func (s *DcState) PendingEventCount() uint64 { return s.win.pending }

// SetPublicationMaterializationEnabled toggles materialization (G3
// ai-dynamo variant). While disabled, drains still happen on the same
// boundaries and clear the window but yield no batch and count no emitted
// images; a pool without subscribers uses this, and its next subscriber
// starts from a barrier snapshot.
func (s *DcState) SetPublicationMaterializationEnabled(enabled bool) {
	s.win.materialize = enabled
}

// PublicationMaterializationEnabled reports the flag (initially true).
func (s *DcState) PublicationMaterializationEnabled() bool { return s.win.materialize }

// BarrierSnapshot is barrier_snapshot (producer §7.7): it reserves the copy
// of every bucket word first, then drains the window into tail (nil if
// nothing to publish; publication order, see drain) and copies the words.
// The copy follows the drain because the drain may undo a relocation cycle
// in the words: the snapshot must carry the words the tail ends at. If the
// copy cannot be reserved it returns ErrBuildAllocationFailed and the dirty
// tail stays pending, so the next snapshot returns it. The caller
// (Publisher) must ship tail on the old stream before the words.
func (s *DcState) BarrierSnapshot() (tail []ckf.BucketImage, words []uint64, err error) {
	if err := s.reserve(siteSnapshot, s.format.BucketCount); err != nil {
		return nil, nil, &ckf.BuildError{Kind: ckf.BuildAllocationFailed}
	}
	tail = s.drain()
	return tail, slices.Clone(s.filter.words), nil
}
