package pool

import (
	"testing"

	"github.com/ckf-stream/ckf-stream/ckf"
	"github.com/ckf-stream/ckf-stream/ckf/index"
)

// The pool's fixture: an indexer with configured lanes, and the records a producer of each
// lane would send. It mirrors the fixture of package index's tests, through the exported API.

const testConsumer ckf.ConsumerInstanceID = 17

func testDomainOf(src ckf.IdentitySource) ckf.IndexerDomainID {
	var d ckf.IndexerDomainID
	d.CacheSemantics.Digest[0] = 0xC5
	d.CacheSemantics.Source = src
	d.RoutingScope.Digest[0] = 0x5C
	d.RoutingScope.Source = src
	return d
}

type fixture struct {
	t      testing.TB
	domain ckf.IndexerDomainID
	format ckf.FormatIdentity
	pools  [ckf.LaneCount]ckf.PoolID
	m      index.Manifest
	g      *index.GlobalIndexer
}

// newFixture builds an indexer with lanes 0..lanes-1 configured (pool DC =
// 100+lane), the given bucket count and window.
func newFixture(t testing.TB, lanes int, buckets uint64, window int) *fixture {
	t.Helper()
	f := &fixture{t: t, domain: testDomainOf(ckf.IdentityExplicit), format: ckf.NewFormatIdentity(ckf.DefaultSeed, buckets)}
	var ml index.ManifestLanes
	for l := 0; l < lanes; l++ {
		f.pools[l] = ckf.PoolID{Domain: f.domain, Dc: ckf.DcID(100 + l)}
		p := f.pools[l]
		ml[l] = &p
	}
	m, _, err := index.NewManifest(testConsumer, f.domain, f.format, ml)
	if err != nil {
		t.Fatal(err)
	}
	f.m = m
	g, err := index.NewGlobalIndexer(m, ckf.SearchConfig{VerificationWindow: window})
	if err != nil {
		t.Fatal(err)
	}
	f.g = g
	return f
}

func (f *fixture) identity(lane uint8) ckf.ProducerIdentity {
	return ckf.ProducerIdentity{Pool: f.pools[lane], Incarnation: 4, LayoutGeneration: 1, Format: f.format}
}

func (f *fixture) lease(lane uint8, epoch uint64) ckf.LaneLease {
	return ckf.LaneLease{Consumer: testConsumer, Lane: lane, Epoch: epoch}
}

func (f *fixture) snapshot(lane uint8, epoch, seq uint64, words []uint64) *ckf.Snapshot {
	if words == nil {
		words = make([]uint64, f.format.BucketCount)
	}
	return &ckf.Snapshot{Identity: f.identity(lane), Lease: f.lease(lane, epoch), Sequence: seq, Buckets: words}
}

func (f *fixture) delta(lane uint8, epoch, base, seq uint64, images ...ckf.BucketImage) *ckf.Delta {
	return &ckf.Delta{Identity: f.identity(lane), Lease: f.lease(lane, epoch), BaseSequence: base, Sequence: seq, Images: images}
}

func (f *fixture) marker(lane uint8, epoch, expected uint64) ckf.DrainMarker {
	return ckf.DrainMarker{Lease: f.lease(lane, epoch), ExpectedSequence: expected}
}

// claim claims lane and fails the test on error.
func (f *fixture) claim(lane uint8) *index.LaneIngestor {
	f.t.Helper()
	in, err := f.g.ClaimLane(lane)
	if err != nil {
		f.t.Fatal(err)
	}
	return in
}

func insertChain(addr ckf.Addressing, words []uint64, local []uint64) bool {
	for _, h := range ckf.SequenceHashes(local) {
		if !insertHash(addr, words, h) {
			return false
		}
	}
	return true
}

func insertHash(addr ckf.Addressing, words []uint64, h uint64) bool {
	p := addr.Probe(h)
	for _, b := range []uint64{p.BucketA, p.BucketB} {
		if i, ok := ckf.Bucket(words[b]).FreeSlot(); ok {
			words[b] = uint64(ckf.Bucket(words[b]).WithSlot(i, p.Fingerprint))
			return true
		}
	}
	return false
}

// word reads bucket b of lane (a copy of the lane's words; the tables here are small).
func (f *fixture) word(b uint64, lane uint8) uint64 { return f.g.LaneWords(lane)[b] }
