package indexer

import (
	"context"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/ckf-stream/ckf-stream/ckf"
	"github.com/ckf-stream/ckf-stream/streams/query"
	"github.com/uber-go/tally/v4"
	"go.uber.org/zap"
)

// neverMatchInterval is how often the indexer samples the first-block counts: the alarm follows
// a planted mismatch within a window plus this.
const neverMatchInterval = 5 * time.Second

// neverMatchCauses is what the log line and the runbook (docs/troubleshooting.md,
// CkfQueriesNeverMatch) name: why routers' hashes may never meet the engines'.
const neverMatchCauses = "the routers' blocks never meet the engines': check the block size, the hash seed, the LoRA and namespace salts, " +
	"that routers send local block hashes (not sequence hashes), and that they tokenize with the engines' model"

// neverMatchChained is the log line's cause when most recent misses were chained stops
// (query.FirstBlockStats.Chained): every answer stopped after the first block while the query's
// second hash, as sent, was already the stored block's sequence hash.
const neverMatchChained = "the routers send sequence hashes where local block hashes belong (answers stop after the first block, " +
	"and the second hash as sent is already chained): send the hashes of each block's tokens alone"

// neverMatchWatch samples the Answerer's first-block counts every neverMatchInterval, evaluates
// them (query.NeverMatch), and publishes the result: per lane the counters
// ckf_query_first_block_searches_total, ckf_query_first_block_misses_total and
// ckf_query_first_block_chained_total (the misses that were chained stops), the gauges
// ckf_query_first_block_miss_ratio (over the window) and ckf_query_never_match (1 while the
// alarm is raised), a warning when a lane's alarm rises and a line when it clears, and the
// lane view's never_match (API.View).
type neverMatchWatch struct {
	stats *query.FirstBlockStats
	eval  *query.NeverMatch
	lanes uint64 // configured
	log   *zap.Logger
	now   func() time.Time

	searches, misses, chained [ckf.MaxLanes]tally.Counter
	ratio, alarm              [ckf.MaxLanes]tally.Gauge
	reported                  [3][ckf.MaxLanes]uint64 // searched, missed and chained totals already counted
	raised                    uint64
	last                      atomic.Pointer[[ckf.MaxLanes]query.NeverMatchLane]
}

func newNeverMatchWatch(stats *query.FirstBlockStats, configured uint64, scope tally.Scope, log *zap.Logger) *neverMatchWatch {
	w := &neverMatchWatch{stats: stats, eval: query.NewNeverMatch(query.NeverMatchConfig{}), lanes: configured, log: log, now: time.Now}
	s := scope.SubScope("query")
	for l := uint8(0); l < ckf.MaxLanes; l++ {
		if configured&(1<<l) == 0 {
			continue
		}
		t := s.Tagged(map[string]string{"lane": strconv.Itoa(int(l))})
		w.searches[l], w.misses[l] = t.Counter("first_block_searches_total"), t.Counter("first_block_misses_total")
		w.chained[l] = t.Counter("first_block_chained_total")
		w.ratio[l], w.alarm[l] = t.Gauge("first_block_miss_ratio"), t.Gauge("never_match")
		w.alarm[l].Update(0)
	}
	return w
}

// run samples until ctx ends.
func (w *neverMatchWatch) run(ctx context.Context) error {
	t := time.NewTicker(neverMatchInterval)
	defer t.Stop()
	for {
		w.sample()
		select {
		case <-ctx.Done():
			return nil
		case <-t.C: // the sampling period, not a wait for an outcome
		}
	}
}

// sample takes one sample and publishes it.
func (w *neverMatchWatch) sample() [ckf.MaxLanes]query.NeverMatchLane {
	searched, missed := w.stats.Totals()
	chained := w.stats.Chained()
	out := w.eval.Observe(w.now(), searched, missed)
	for l := uint8(0); l < ckf.MaxLanes; l++ {
		bit := uint64(1) << l
		if w.lanes&bit == 0 {
			continue
		}
		newMisses, newChained := missed[l]-w.reported[1][l], chained[l]-w.reported[2][l]
		w.searches[l].Inc(int64(searched[l] - w.reported[0][l]))
		w.misses[l].Inc(int64(newMisses))
		w.chained[l].Inc(int64(newChained))
		w.reported[0][l], w.reported[1][l], w.reported[2][l] = searched[l], missed[l], chained[l]
		w.ratio[l].Update(out[l].MissShare())
		switch on := out[l].Alarm; {
		case on && w.raised&bit == 0:
			w.raised |= bit
			w.alarm[l].Update(1)
			causes := neverMatchCauses
			if 2*newChained > newMisses {
				causes = neverMatchChained
			}
			w.log.Warn("queries never match a lane that holds blocks: "+causes,
				zap.Uint8("lane", l), zap.Uint64("searches", out[l].Searched), zap.Uint64("misses", out[l].Missed),
				zap.Uint64("chained_stops_since_last_sample", newChained), zap.Duration("window", w.eval.Config().Window))
		case !on && w.raised&bit != 0:
			w.raised &^= bit
			w.alarm[l].Update(0)
			w.log.Info("queries match the lane again", zap.Uint8("lane", l), zap.Uint64("searches", out[l].Searched),
				zap.Uint64("misses", out[l].Missed))
		}
	}
	w.last.Store(&out)
	return out
}

// view returns lane l's latest evaluation, if any.
func (w *neverMatchWatch) view(l uint8) (query.NeverMatchLane, bool) {
	if w == nil || l >= ckf.MaxLanes {
		return query.NeverMatchLane{}, false
	}
	p := w.last.Load()
	if p == nil {
		return query.NeverMatchLane{}, false
	}
	return p[l], true
}
