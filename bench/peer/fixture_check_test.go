package peer

import (
	"testing"

	"github.com/ckf-stream/ckf-stream/ckf"
	"github.com/ckf-stream/ckf-stream/ckf/producer"
)

// Fixture checksums as bench/peer-dynamo printed them. Equal checksums mean
// the two programs built the same words, chains and keys, and for
// seqhash-chain that both chains hash alike; tools/peerreport checks the
// same at every make bench-peer run.
const (
	rustQuerySum    = 74489314667390
	rustSnapshotSum = 77993630074910
	rustDeltaSum    = 136217969556046
	rustChainSum    = 141108188997261
	rustStore16Sum  = 70661976043304
	rustStore20Sum  = 60368510325455
	rustFillSum     = 167279307193173
	rustLookup16Sum = 122072880857864
	rustLookup20Sum = 119830126193262
)

// TestPeerFixtures checks that the Go fixtures are what the row names say:
// full-depth shared prefixes, distinct per-lane depths on divergent chains,
// about 50 % background load, 89.6–90 % producer load in the steady rows,
// exactly 50 % at the end of a fill pass, and checksums equal to the Rust
// side's.
func TestPeerFixtures(t *testing.T) {
	t.Run("query128", func(t *testing.T) {
		fx := getQueryFixture(t)
		if fx.sum != rustQuerySum {
			t.Errorf("query fixture checksum %d, the Rust side builds %d", fx.sum, uint64(rustQuerySum))
		}
		if fx.load < 0.50 || fx.load > 0.53 {
			t.Errorf("query table load %.4f, want about 0.51 (50 %% background plus the chains)", fx.load)
		}
		mismatches := 0
		for c, chain := range append(append([][]uint64{}, fx.shared...), fx.divergent...) {
			res, err := fx.c.g.FindPrefixMatches(chain)
			if err != nil {
				t.Fatal(err)
			}
			if res.ReadyLanes != 0xFFFF {
				t.Fatalf("ready lanes %016b", res.ReadyLanes)
			}
			seen := map[int]bool{}
			for l := 0; l < ckf.LaneCount; l++ {
				want := fx.depths[c][l]
				if c < queryChainsPerShape && want != queryChainLen {
					t.Fatalf("shared chain %d lane %d placed at depth %d", c, l, want)
				}
				if c >= queryChainsPerShape {
					if seen[want] {
						t.Fatalf("divergent chain %d: depth %d placed in two lanes", c-queryChainsPerShape, want)
					}
					seen[want] = true
				}
				if got := int(res.Lanes[l].Depth); got != want {
					mismatches++
					t.Errorf("chain %d lane %d: query finds depth %d, fixture placed %d", c, l, got, want)
				}
			}
		}
		if mismatches > 0 {
			t.Fatalf("%d lane depths differ from the placed prefixes", mismatches)
		}
	})

	t.Run("snapshot-install", func(t *testing.T) {
		words, sum := snapshotWords()
		if len(words) != snapshotBuckets || sum != rustSnapshotSum {
			t.Errorf("snapshot: %d words, checksum %d (Rust %d)", len(words), sum, uint64(rustSnapshotSum))
		}
	})

	t.Run("delta-apply", func(t *testing.T) {
		ring, sum := deltaImageRing()
		if sum != rustDeltaSum {
			t.Errorf("delta ring checksum %d, Rust %d", sum, uint64(rustDeltaSum))
		}
		for i, imgs := range ring {
			seen := map[uint64]bool{}
			for _, im := range imgs {
				if im.Bucket >= deltaBuckets || seen[im.Bucket] {
					t.Fatalf("delta %d: bucket %d out of range or repeated", i, im.Bucket)
				}
				seen[im.Bucket] = true
			}
			if len(imgs) != deltaImages {
				t.Fatalf("delta %d has %d images", i, len(imgs))
			}
		}
	})

	t.Run("seqhash-chain", func(t *testing.T) {
		sum := newChecksum()
		for _, h := range ckf.SequenceHashes(chainLocals()) {
			sum.add(h)
		}
		if sum.fold48() != rustChainSum {
			t.Errorf("chain hashes checksum %d, Rust %d", sum.fold48(), uint64(rustChainSum))
		}
	})

	steady := func(t *testing.T, buckets uint64, want uint64) {
		p := getSteadyProducer(t, buckets)
		if p.sum != want {
			t.Errorf("fill keys checksum %d, Rust %d", p.sum, want)
		}
		src := ckf.SourceKey{Worker: peerWorker}
		check := func(when string, live uint64) {
			t.Helper()
			if p.live() != live || uint64(p.s.MemberBlockCount(src)) != live {
				t.Fatalf("%s: %d live blocks (lineage %d), want %d", when, p.live(), p.s.MemberBlockCount(src), live)
			}
			if l := p.loadPct(); l < 89.5 || l > 90.0 {
				t.Fatalf("%s: load %.3f %%, want 89.5–90 %%", when, l)
			}
		}
		base := steadyBase(buckets)
		check("after the fill", base+uint64(p.inWindow))
		for w := 0; w < 3; w++ {
			for full := false; !full; {
				var err error
				if full, err = p.storeNext(); err != nil {
					t.Fatal(err)
				}
			}
			check("at a window's end", base+storeWindow)
			if err := p.endWindow(); err != nil {
				t.Fatal(err)
			}
			check("after the removals", base)
		}
	}
	t.Run("producer-store/2^16@90", func(t *testing.T) { steady(t, 1<<16, rustStore16Sum) })
	t.Run("producer-store/2^20@90", func(t *testing.T) {
		// The same code as 2^16@90 at 16 times the size; make bench-peer
		// runs this test without -race before its rounds.
		if testing.Short() || raceEnabled {
			t.Skip("fills 3.8 M blocks: skipped with -short and -race")
		}
		steady(t, 1<<20, rustStore20Sum)
	})

	lookup := func(t *testing.T, buckets uint64, want uint64) {
		fx := getLookupFixture(t, buckets)
		if fx.sum != want {
			t.Errorf("lookup fixture checksum %d, Rust %d", fx.sum, want)
		}
		if fx.omitted != 0 || fx.loadPct < 89.99 || fx.loadPct > 90.0 {
			t.Errorf("fill: %d omitted, load %.3f %%; want none omitted and 90 %%", fx.omitted, fx.loadPct)
		}
		if fx.hits[0] != lookupRing {
			t.Errorf("%d of the %d stored ring entries found: a false negative", fx.hits[0], lookupRing)
		}
		// A miss is a false positive with probability about 8/2^16 at 90 % load.
		if fx.hits[1] > lookupRing/1000 {
			t.Errorf("%d of the %d never-stored ring entries found", fx.hits[1], lookupRing)
		}
	}
	t.Run("lookup/2^16", func(t *testing.T) { lookup(t, 1<<16, rustLookup16Sum) })
	t.Run("lookup/2^20", func(t *testing.T) {
		if testing.Short() || raceEnabled {
			t.Skip("fills 3.8 M blocks: skipped with -short and -race")
		}
		lookup(t, 1<<20, rustLookup20Sum)
	})

	t.Run("producer-store/2^16/0-50", func(t *testing.T) {
		toks, sum := fillTokens()
		if sum != rustFillSum {
			t.Errorf("fill keys checksum %d, Rust %d", sum, uint64(rustFillSum))
		}
		s := newState(t, fillBuckets)
		ev := storeEvent(make([]producer.StoredBlock, 1))
		if err := fillPass(s, &ev, toks); err != nil {
			t.Fatal(err)
		}
		if got := s.ResidentCount(); got != 2*fillBuckets {
			t.Fatalf("after a fill pass %d fingerprints are resident, want %d (50 %%)", got, 2*fillBuckets)
		}
	})
}
