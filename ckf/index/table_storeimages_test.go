package index

import (
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/ckf-stream/ckf-stream/ckf"
)

// storeImages (assembly plain stores on amd64 without -race, sync/atomic
// otherwise) equals the per-word reference, later images win, and only its
// lane's column changes.
func TestStoreImagesMatchesReference(t *testing.T) {
	const buckets = 1 << 10
	r := rand.New(rand.NewPCG(31, 32))
	for _, lanes := range testWidths {
		tb, err := newTransposedTable(buckets, lanes)
		if err != nil {
			t.Fatal(err)
		}
		stride := uint64(tb.stride)
		want := make([]uint64, buckets*stride)
		for round := 0; round < 60; round++ {
			lane := r.IntN(lanes)
			images := make([]ckf.BucketImage, r.IntN(100))
			for i := range images {
				images[i] = ckf.BucketImage{Bucket: r.Uint64N(buckets), Value: r.Uint64()}
				if i%7 == 6 { // a repeat: the later image must win
					images[i].Bucket = images[i-3].Bucket
				}
			}
			if round == 0 {
				images = append(images, ckf.BucketImage{Bucket: 0, Value: 1}, ckf.BucketImage{Bucket: buckets - 1, Value: 2})
			}
			tb.storeImages(lane, images)
			for _, im := range images {
				want[im.Bucket*stride+uint64(lane)] = im.Value
			}
			for b := uint64(0); b < buckets; b++ {
				for l := 0; l < tb.stride; l++ {
					if got := tb.load(b, l); got != want[b*stride+uint64(l)] {
						t.Fatalf("lanes %d round %d (lane %d): word (%d, %d) = %#x, want %#x", lanes, round, lane, b, l, got, want[b*stride+uint64(l)])
					}
				}
			}
		}
	}
}

// A broken precondition (bucket or lane out of range) panics instead of
// writing outside the lane's column.
func TestStoreImagesPanicsOutOfRange(t *testing.T) {
	const buckets = 64
	for _, lanes := range []int{4, 16, 24, 64} {
		tb, err := newTransposedTable(buckets, lanes)
		if err != nil {
			t.Fatal(err)
		}
		mustPanic := func(name string, fn func()) {
			t.Helper()
			defer func() {
				if recover() == nil {
					t.Errorf("lanes %d, %s: no panic", lanes, name)
				}
			}()
			fn()
		}
		mustPanic("bucket == buckets", func() {
			tb.storeImages(3, []ckf.BucketImage{{Bucket: 1, Value: 5}, {Bucket: buckets, Value: 6}})
		})
		mustPanic("huge bucket", func() { tb.storeImages(0, []ckf.BucketImage{{Bucket: 1 << 60, Value: 7}}) })
		mustPanic("lane = row width", func() { tb.storeImages(tb.stride, []ckf.BucketImage{{Bucket: 0, Value: 8}}) })
		mustPanic("lane -1", func() { tb.storeImages(-1, []ckf.BucketImage{{Bucket: 0, Value: 8}}) })
		// Nothing but lane 3's bucket 1 may have been written (the assembly
		// path stores the images before the offending one).
		for b := uint64(0); b < buckets; b++ {
			for l := 0; l < tb.stride; l++ {
				if v := tb.load(b, l); v != 0 && (b != 1 || l != 3 || v != 5) {
					t.Fatalf("lanes %d: word (%d, %d) = %#x", lanes, b, l, v)
				}
			}
		}
	}
}

// concurrentWord is the value delta gen writes into bucket b: the
// generation in the high half and a mix of (b, gen) in the low half, so a
// word assembled from two different stores fails concurrentWordValid.
func concurrentWord(b, gen uint64) uint64 {
	return gen<<32 | uint64(uint32((b^gen<<20)*0x9E3779B97F4A7C15>>32))
}

func concurrentWordValid(b, w uint64) bool {
	return w == 0 || w == concurrentWord(b, w>>32)
}

// whileReading runs readers goroutines, each calling its check (newCheck(reader), so a check may
// keep state of its own) until the check reports a failure or write has returned, and then fails
// t with every failure. The readers are stopped even when write ends the test (t.Fatal).
func whileReading(t *testing.T, readers int, newCheck func(reader int) func() (failure string), write func()) {
	t.Helper()
	done := make(chan struct{})
	var wg sync.WaitGroup
	errs := make(chan string, readers)
	for r := range readers {
		check := newCheck(r)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-done:
					return
				default:
				}
				if failure := check(); failure != "" {
					errs <- failure
					return
				}
			}
		}()
	}
	func() {
		defer func() { close(done); wg.Wait() }()
		write()
	}()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
}

// TestStoreImagesConcurrentReaders applies deltas through
// LaneIngestor.ApplyDelta while readers load the same words, and checks
// what consumer §5.5 promises readers (and probeSettled relies on):
//
//   - every loaded word is whole: one some delta wrote, never a mix of two;
//   - images become visible in list order: every delta writes the same
//     buckets in the same order, each with its generation, so a reader that
//     loads them in reverse list order sees generations that never decrease
//     from one load to the next (a delta's store to an earlier bucket is
//     visible before its store to a later one).
//
// Under -race the portable sync/atomic path runs and the race detector
// checks that readers and the writer are properly synchronised; without it,
// on amd64, the assembly plain-store path runs on real hardware.
func TestStoreImagesConcurrentReaders(t *testing.T) {
	const (
		images  = 40 // <= smallDeltaImages
		deltas  = 20_000
		readers = 2
	)
	if testing.Short() {
		t.Skip("concurrency soak")
	}
	for _, lanes := range []int{2, 64} {
		t.Run(fmt.Sprintf("lanes=%d", lanes), func(t *testing.T) { storeImagesConcurrentReaders(t, lanes, images, deltas/2, readers) })
	}
}

func storeImagesConcurrentReaders(t *testing.T, lanes, images, deltas, readers int) {
	const buckets = 1 << 12
	f := newFixtureN(t, lanes, lanes, buckets, ckf.DefaultVerificationWindow)
	in := f.readyLane(1, 1, 0, nil)
	r := rand.New(rand.NewPCG(33, 34))
	order := r.Perm(buckets)[:images] // distinct buckets, fixed list order
	passOverTheList := func(int) func() string {
		return func() string {
			last := uint64(0)
			for i := images - 1; i >= 0; i-- {
				b := uint64(order[i])
				w := f.g.table.load(b, 1)
				if !concurrentWordValid(b, w) {
					return "torn word"
				}
				if gen := w >> 32; gen < last {
					return "images visible out of list order"
				} else {
					last = gen
				}
			}
			return ""
		}
	}
	whileReading(t, readers, passOverTheList, func() {
		imgs := make([]ckf.BucketImage, images)
		for gen := uint64(1); gen <= uint64(deltas); gen++ {
			for i, b := range order {
				imgs[i] = ckf.BucketImage{Bucket: uint64(b), Value: concurrentWord(uint64(b), gen)}
			}
			if out := in.ApplyDelta(f.delta(1, 1, gen-1, gen, imgs...)); out.Kind != OutcomeDeltaApplied {
				t.Fatalf("delta %d: %v", gen, out)
			}
		}
	})
	for _, b := range order {
		if w := f.word(uint64(b), 1); w != concurrentWord(uint64(b), uint64(deltas)) {
			t.Fatalf("bucket %d = %#x after the last delta", b, w)
		}
		if w := f.word(uint64(b), 0); w != 0 {
			t.Fatalf("lane 0 bucket %d = %#x", b, w)
		}
	}
}

// findDuplicateSmall and findDuplicateBitmap agree on the first repeat (or
// none) for random deltas with and without repeats, for buckets chosen to
// collide in the small set, and across the epoch wrap; findDuplicate picks
// the small set up to smallDeltaImages images.
func TestFindDuplicateSmallMatchesBitmap(t *testing.T) {
	const buckets = 1 << 16
	f := newFixture(t, 1, buckets, ckf.DefaultVerificationWindow)
	in := f.claim(0)
	r := rand.New(rand.NewPCG(35, 36))
	// colliding: buckets whose small-set home slot is 0.
	var colliding []uint64
	for b := uint64(0); len(colliding) < smallDeltaImages; b++ {
		if (b*0x9E3779B97F4A7C15)>>(64-smallSetBits) == 0 {
			colliding = append(colliding, b)
		}
	}
	check := func(images []ckf.BucketImage) {
		t.Helper()
		sb, sok := in.findDuplicateSmall(images)
		bb, bok := in.findDuplicateBitmap(images)
		if sok != bok || sb != bb {
			t.Fatalf("%d images: small (%d, %v), bitmap (%d, %v)", len(images), sb, sok, bb, bok)
		}
		if len(images) <= smallDeltaImages {
			if fb, fok := in.findDuplicate(images); fok != bok || fb != bb {
				t.Fatalf("findDuplicate (%d, %v), bitmap (%d, %v)", fb, fok, bb, bok)
			}
		}
	}
	for round := 0; round < 20_000; round++ {
		n := 1 + r.IntN(smallDeltaImages)
		images := make([]ckf.BucketImage, n)
		for i := range images {
			switch round % 3 {
			case 0:
				images[i].Bucket = r.Uint64N(buckets)
			case 1:
				images[i].Bucket = r.Uint64N(uint64(2 * n)) // repeats likely
			default:
				images[i].Bucket = colliding[r.IntN(len(colliding))]
			}
		}
		if round%5 == 0 && n > 1 { // make sure some deltas have no repeat
			for i, b := range r.Perm(buckets)[:n] {
				images[i].Bucket = uint64(b)
			}
		}
		check(images)
		if round == 10_000 {
			in.smallEpoch = ^uint32(0) - 2 // wrap during the next calls
		}
	}
	if in.smallEpoch >= ^uint32(0)-2 {
		t.Fatalf("epoch %d did not wrap", in.smallEpoch)
	}
	// The wrap must forget every slot: epoch 1 comes round again.
	in.smallEpoch = 0
	one := []ckf.BucketImage{{Bucket: 77}}
	if _, dup := in.findDuplicateSmall(one); dup || in.smallEpoch != 1 {
		t.Fatalf("first call: dup %v epoch %d", dup, in.smallEpoch)
	}
	in.smallEpoch = ^uint32(0)
	if b, dup := in.findDuplicateSmall(one); dup || in.smallEpoch != 1 {
		t.Fatalf("after the wrap: dup %v (%d) epoch %d", dup, b, in.smallEpoch)
	}
}

// TestStoreColumnConcurrentReaders stores generation after generation of a
// whole column (the snapshot install's storeColumn) while readers load its
// words and the words of the neighbouring lanes, which share the column's
// cache lines: every word a reader loads must be whole (one generation's
// word, never a mix of two), and the neighbours must stay untouched. Under
// -race the sync/atomic path runs and the race detector checks the
// synchronisation; without it, on amd64, the plain-store assembly runs on
// real hardware.
func TestStoreColumnConcurrentReaders(t *testing.T) {
	const (
		generations = 400
		readers     = 2
	)
	if testing.Short() {
		t.Skip("concurrency soak")
	}
	for _, lanes := range []int{16, 64} {
		t.Run(fmt.Sprintf("lanes=%d", lanes), func(t *testing.T) { storeColumnConcurrentReaders(t, lanes, generations/2, readers) })
	}
}

func storeColumnConcurrentReaders(t *testing.T, lanes, generations, readers int) {
	const (
		buckets = 1 << 12
		lane    = 7
	)
	tb, err := newTransposedTable(buckets, lanes)
	if err != nil {
		t.Fatal(err)
	}
	bucketAfterBucket := func(reader int) func() string {
		next := uint64(reader)
		return func() string {
			b := next
			next = (next + 97) % buckets
			if w := tb.load(b, lane); !concurrentWordValid(b, w) {
				return fmt.Sprintf("bucket %d: torn word %#x", b, w)
			}
			if tb.load(b, lane-1) != 0 || tb.load(b, lane+1) != 0 {
				return fmt.Sprintf("bucket %d: a neighbouring lane was written", b)
			}
			return ""
		}
	}
	whileReading(t, readers, bucketAfterBucket, func() {
		words := make([]uint64, buckets)
		for gen := uint64(1); gen <= uint64(generations); gen++ {
			for b := range words {
				words[b] = concurrentWord(uint64(b), gen)
			}
			tb.storeColumn(lane, words)
		}
	})
	for b := uint64(0); b < buckets; b++ {
		if w := tb.load(b, lane); w != concurrentWord(b, uint64(generations)) {
			t.Fatalf("bucket %d = %#x after the last generation", b, w)
		}
	}
}

// BenchmarkFindDuplicate is the duplicate-bucket check of one delta (consumer §4.3) at the
// delta sizes of the T9 target, on distinct random buckets (the check's every-delta case).
func BenchmarkFindDuplicate(b *testing.B) {
	const buckets = 1 << 20
	f := newFixture(b, 1, buckets, ckf.DefaultVerificationWindow)
	in := f.claim(0)
	r := rand.New(rand.NewPCG(37, 38))
	for _, n := range []int{16, 23, 64} {
		const ring = 1 << 10
		deltas := make([][]ckf.BucketImage, ring)
		for i := range deltas {
			seen := map[uint64]bool{}
			for len(deltas[i]) < n {
				if bk := r.Uint64N(buckets); !seen[bk] {
					seen[bk] = true
					deltas[i] = append(deltas[i], ckf.BucketImage{Bucket: bk})
				}
			}
		}
		b.Run(fmt.Sprintf("images=%d", n), func(b *testing.B) {
			i := 0
			for b.Loop() {
				if _, dup := in.findDuplicate(deltas[i%ring]); dup {
					b.Fatal("duplicate among distinct buckets")
				}
				i++
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(n), "ns/image")
		})
	}
}
