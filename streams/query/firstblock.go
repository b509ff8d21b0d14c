package query

import (
	"math/bits"
	"sync/atomic"
	"time"

	"github.com/ckf-stream/ckf-stream/ckf"
)

// Routing that silently stopped working looks like this from the indexer: a DC holds blocks, yet
// no query ever finds even its first block there, or (sequence hashes sent as local hashes) every
// query stops right after its first block while its second hash, as sent, names a stored block. The routers' hashes do not meet the engines':
// another block size, hash seed or salt (LoRA name, namespace), local hashes sent where sequence
// hashes are expected or the reverse, a tokenizer of another model. Every answer then reads
// depth 0 and routing falls back to load alone, with nothing failing. FirstBlockStats counts, per
// lane, the answers that searched a lane holding blocks and how many of them missed (the query's
// first block absent, or the chained stop above); NeverMatch turns the counts into an alarm over
// a window.

// firstBlockShards spreads FirstBlockStats' counters over this many cache-line-padded copies,
// so that answering goroutines rarely write the same line; a reader sums them.
const firstBlockShards = 8

// FirstBlockStats counts, per lane, the searches of a lane that held blocks (searched) and the
// ones whose hashes did not meet the lane's (missed): not even the query's first block there, or
// a stop right after it with the query's second hash, as sent, a stored block's sequence hash
// (chained, also counted on its own: Chained). Over every answer of an Answerer given it
// (CountFirstBlocks): the Kafka and HTTP paths alike. Safe for concurrent use; the zero value is
// ready. Counters only grow.
type FirstBlockStats struct {
	shards [firstBlockShards]firstBlockShard
	next   atomic.Uint32 // shard of the next scratch that has none
}

type firstBlockShard struct {
	lanes [ckf.MaxLanes]struct{ searched, missed, chained atomic.Uint64 }
	_     [64]byte // keeps the next shard's counters off this one's last cache line
}

// add counts one answer's searched lanes (the ready lanes that hold blocks) and, of them, the
// ones missed and the ones chained (a subset of missed), in shard i.
func (s *FirstBlockStats) add(i uint8, searched, missed, chained uint64) {
	sh := &s.shards[i%firstBlockShards]
	for m := searched; m != 0; m &= m - 1 {
		l := uint8(bits.TrailingZeros64(m))
		sh.lanes[l].searched.Add(1)
		if missed&(1<<l) != 0 {
			sh.lanes[l].missed.Add(1)
		}
		if chained&(1<<l) != 0 {
			sh.lanes[l].chained.Add(1)
		}
	}
}

// shard returns the shard a scratch counts in, assigning one on first use.
func (s *FirstBlockStats) shard(sc *QueryScratch) uint8 {
	if sc.shard == 0 {
		sc.shard = uint8(s.next.Add(1)%firstBlockShards) + 1
	}
	return sc.shard - 1
}

// Totals returns the counts so far, per lane.
func (s *FirstBlockStats) Totals() (searched, missed [ckf.MaxLanes]uint64) {
	for i := range s.shards {
		for l := range s.shards[i].lanes {
			searched[l] += s.shards[i].lanes[l].searched.Load()
			missed[l] += s.shards[i].lanes[l].missed.Load()
		}
	}
	return searched, missed
}

// Chained returns, per lane, how many of the missed searches so far were chained stops: the
// answer stopped after the query's first block while its second hash, as sent, was the sequence
// hash of a block the lane holds (routers sending sequence hashes as local hashes).
func (s *FirstBlockStats) Chained() (chained [ckf.MaxLanes]uint64) {
	for i := range s.shards {
		for l := range s.shards[i].lanes {
			chained[l] += s.shards[i].lanes[l].chained.Load()
		}
	}
	return chained
}

// NeverMatchConfig sets when NeverMatch raises its alarm for a lane.
type NeverMatchConfig struct {
	// Window is how far back the share is taken. Default 60 s.
	Window time.Duration
	// MinSearches is how many searches of the lane (holding blocks) the window must have before
	// the share counts. Default 50.
	MinSearches uint64
	// Share is the share of those searches that missed the first block at or above which the
	// alarm is raised. Default 0.999: a mismatch misses every time (but for a filter false
	// positive, about 1 in 8,000 searches), while a DC whose prompts are merely new matches some.
	Share float64
}

// DefaultNeverMatchConfig returns the defaults above.
func DefaultNeverMatchConfig() NeverMatchConfig {
	return NeverMatchConfig{Window: time.Minute, MinSearches: 50, Share: 0.999}
}

// NeverMatchLane is one lane's view over the window.
type NeverMatchLane struct {
	// Searched and Missed are the counts within the window.
	Searched, Missed uint64
	// Alarm is true while Searched >= MinSearches and Missed/Searched >= Share.
	Alarm bool
}

// MissShare returns Missed/Searched, 0 without searches.
func (l NeverMatchLane) MissShare() float64 {
	if l.Searched == 0 {
		return 0
	}
	return float64(l.Missed) / float64(l.Searched)
}

// NeverMatch keeps samples of FirstBlockStats' totals and evaluates each lane over the window.
// Observe is called by one goroutine (the indexer samples every few seconds); the result is a
// value it hands out.
type NeverMatch struct {
	cfg     NeverMatchConfig
	samples []neverMatchSample // oldest first
}

type neverMatchSample struct {
	at               time.Time
	searched, missed [ckf.MaxLanes]uint64
}

// NewNeverMatch returns an evaluator with cfg; zero fields take the defaults.
func NewNeverMatch(cfg NeverMatchConfig) *NeverMatch {
	d := DefaultNeverMatchConfig()
	if cfg.Window <= 0 {
		cfg.Window = d.Window
	}
	if cfg.MinSearches == 0 {
		cfg.MinSearches = d.MinSearches
	}
	if cfg.Share <= 0 || cfg.Share > 1 {
		cfg.Share = d.Share
	}
	return &NeverMatch{cfg: cfg}
}

// Config returns the evaluator's configuration, defaults applied.
func (n *NeverMatch) Config() NeverMatchConfig { return n.cfg }

// Observe records the totals at now and returns every lane's counts over the window: since the
// newest sample at least Window old, or the oldest one while none is (the alarm can then rise
// before a full window has passed, on MinSearches searches).
func (n *NeverMatch) Observe(now time.Time, searched, missed [ckf.MaxLanes]uint64) [ckf.MaxLanes]NeverMatchLane {
	n.samples = append(n.samples, neverMatchSample{at: now, searched: searched, missed: missed})
	base := 0
	for i := len(n.samples) - 1; i >= 0; i-- {
		if now.Sub(n.samples[i].at) >= n.cfg.Window {
			base = i
			break
		}
	}
	n.samples = n.samples[base:] // what is older than the base is never needed again
	from := n.samples[0]
	var out [ckf.MaxLanes]NeverMatchLane
	for l := range out {
		s, m := searched[l]-from.searched[l], missed[l]-from.missed[l]
		out[l] = NeverMatchLane{Searched: s, Missed: m}
		out[l].Alarm = s >= n.cfg.MinSearches && out[l].MissShare() >= n.cfg.Share
	}
	return out
}
