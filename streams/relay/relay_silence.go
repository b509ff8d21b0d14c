package relay

import (
	"slices"
	"time"

	"go.uber.org/zap"
)

// Engines that do not publish (relay.md, "Silent engines"). The relay sees every KV event of its
// DC with its source (worker id, dp rank) and its Kafka timestamp, so it can tell two silences
// apart that both look like "no events" elsewhere:
//
//   - the DC is silent: no KV event at all for a while although the relay is up
//     (ckf_relay_kv_idle_seconds, alert CkfDCSilent): the engines stopped publishing, their
//     bridges are down, or the relay reads the wrong topic;
//   - a source is silent: one (worker, rank) has published nothing for SilentSourceAfter while
//     another source of the DC published within it (ckf_relay_silent_sources, alert
//     CkfWorkerSilent): that engine's publisher or bridge stopped while the others go on, and
//     the index keeps its blocks as they were.
//
// silenceWatch is the decision, pure bookkeeping on the times it is given (no clock), owned by
// the loop's goroutine: the loop feeds it every decoded KV event and asks it, about once a
// second, what is silent now.

// maxWatchedSources bounds the sources a relay keeps a time for: a DC has hundreds of (worker,
// rank) sources at most, while a producer that invents worker ids would otherwise grow the map
// with every event. Past it, the sources heard from longest ago are forgotten first.
const maxWatchedSources = 1 << 16

// silenceCheckEvery is how often the loop evaluates the watch (at its next wake-up: a heartbeat
// or an event, so at least every HeartbeatInterval).
const silenceCheckEvery = time.Second

// silenceWatch holds, per source, the time of its newest KV event, and which sources it reported
// silent.
type silenceWatch struct {
	after, forget time.Duration // SilentSourceAfter, ForgetSourceAfter
	start         time.Time     // when the relay started: the DC's idle time counts from it before any event
	newest        time.Time     // the newest event's time (zero: none yet)
	last          map[sourceKey]time.Time
	silent        map[sourceKey]time.Time // the sources reported silent, with their last event's time
}

func newSilenceWatch(after, forget time.Duration, start time.Time) *silenceWatch {
	return &silenceWatch{after: after, forget: forget, start: start,
		last: map[sourceKey]time.Time{}, silent: map[sourceKey]time.Time{}}
}

// silenceChange is a source's change of state that the relay logs.
type silenceChange struct {
	key   sourceKey
	last  time.Time // the source's newest event
	state string    // silenceWent, silenceBack, silenceDCQuiet, silenceForgotten, silenceCleared
}

// Changes of a source's state (silenceChange.state).
const (
	silenceWent      = "silent"    // published nothing for the bound while another source did
	silenceBack      = "back"      // a silent source published again
	silenceDCQuiet   = "dc-quiet"  // no longer counted: no source at all published within the bound
	silenceForgotten = "forgotten" // no event for ForgetSourceAfter: the source is dropped
	silenceCleared   = "cleared"   // its cache was cleared (KvCleared): dropped until it publishes
)

// event records a KV event of key at at (its Kafka timestamp, capped at now by the caller). A
// source reported silent that publishes is back.
func (w *silenceWatch) event(key sourceKey, at time.Time) (back *silenceChange) {
	if at.After(w.newest) {
		w.newest = at
	}
	if prev, ok := w.last[key]; !ok || at.After(prev) {
		w.last[key] = at
	}
	if len(w.last) >= 2*maxWatchedSources { // a long replay runs no check: bound the map here too
		w.dropOldest()
	}
	if last, ok := w.silent[key]; ok {
		delete(w.silent, key)
		return &silenceChange{key: key, last: last, state: silenceBack}
	}
	return nil
}

// cleared forgets key: a KvCleared leaves the source holding nothing (its engine restarted, or
// the worker was taken away, which engines and bridges announce by a clear). Its next event adds
// it again. The event still counts for the DC's idle time (event is called for it first).
func (w *silenceWatch) cleared(key sourceKey) (change *silenceChange) {
	last, wasSilent := w.silent[key]
	delete(w.last, key)
	delete(w.silent, key)
	if wasSilent {
		return &silenceChange{key: key, last: last, state: silenceCleared}
	}
	return nil
}

// idle is how long the DC has published nothing at now: since its newest event, or since the
// relay started when it has seen none.
func (w *silenceWatch) idle(now time.Time) time.Duration {
	from := w.newest
	if from.IsZero() {
		from = w.start
	}
	return max(now.Sub(from), 0)
}

// check evaluates the watch at now and returns the changes since the previous check, in source
// order. A source is silent when its newest event is more than after old while some source's is
// not (the DC publishes); a source whose newest event is more than forget old is dropped, and
// so are the oldest ones beyond maxWatchedSources.
func (w *silenceWatch) check(now time.Time) []silenceChange {
	var out []silenceChange
	for k, at := range w.last {
		if now.Sub(at) > w.forget {
			delete(w.last, k)
			if _, ok := w.silent[k]; ok {
				delete(w.silent, k)
				out = append(out, silenceChange{key: k, last: at, state: silenceForgotten})
			}
		}
	}
	out = append(out, w.dropOldest()...)
	publishing := !w.newest.IsZero() && now.Sub(w.newest) <= w.after
	for k, at := range w.last {
		_, reported := w.silent[k]
		switch silent := publishing && now.Sub(at) > w.after; {
		case silent && !reported:
			w.silent[k] = at
			out = append(out, silenceChange{key: k, last: at, state: silenceWent})
		case !silent && reported:
			delete(w.silent, k)
			out = append(out, silenceChange{key: k, last: at, state: silenceDCQuiet})
		}
	}
	slices.SortFunc(out, func(a, b silenceChange) int {
		if a.key.worker != b.key.worker {
			return compareUint(a.key.worker, b.key.worker)
		}
		return compareUint(uint64(a.key.rank), uint64(b.key.rank))
	})
	return out
}

// dropOldest drops the sources heard from longest ago beyond maxWatchedSources, and returns the
// silent ones among them as forgotten.
func (w *silenceWatch) dropOldest() []silenceChange {
	over := len(w.last) - maxWatchedSources
	if over <= 0 {
		return nil
	}
	type aged struct {
		k  sourceKey
		at time.Time
	}
	all := make([]aged, 0, len(w.last))
	for k, at := range w.last {
		all = append(all, aged{k, at})
	}
	slices.SortFunc(all, func(a, b aged) int { return a.at.Compare(b.at) })
	var out []silenceChange
	for _, a := range all[:over] {
		delete(w.last, a.k)
		if _, ok := w.silent[a.k]; ok {
			delete(w.silent, a.k)
			out = append(out, silenceChange{key: a.k, last: a.at, state: silenceForgotten})
		}
	}
	return out
}

func compareUint(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// noteSource feeds the watch with the decoded KV event in rl.kvEvent, read from rec's partition
// with Kafka timestamp ts: its source published at ts (a timestamp later than the relay's clock
// counts as now), and a KvCleared drops the source.
func (rl *relayLoop) noteSource(ts time.Time, cleared bool) {
	now := rl.now()
	if ts.IsZero() || ts.After(now) {
		ts = now
	}
	key := sourceKey{rl.kvEvent.WorkerID, rl.kvEvent.DpRank}
	if c := rl.silence.event(key, ts); c != nil {
		rl.logSilence(*c, now)
	}
	if cleared {
		if c := rl.silence.cleared(key); c != nil {
			rl.logSilence(*c, now)
		}
	}
}

// checkSilence evaluates the watch (at most once per silenceCheckEvery), logs the changes and
// sets ckf_relay_kv_idle_seconds, ckf_relay_silent_sources and ckf_relay_sources.
func (rl *relayLoop) checkSilence(now time.Time) {
	if now.Before(rl.silenceCheckAt) {
		return
	}
	rl.silenceCheckAt = now.Add(silenceCheckEvery)
	for _, c := range rl.silence.check(now) {
		rl.logSilence(c, now)
	}
	rl.r.metrics.kvIdle.Update(rl.silence.idle(now).Seconds())
	rl.r.c.silentSources.set(uint64(len(rl.silence.silent)))
	rl.r.c.sources.set(uint64(len(rl.silence.last)))
}

// logSilence logs a source's change: a warning when it goes silent, information otherwise.
func (rl *relayLoop) logSilence(c silenceChange, now time.Time) {
	fields := []zap.Field{zap.Uint64("worker_id", c.key.worker), zap.Uint32("dp_rank", c.key.rank),
		zap.Time("last_event", c.last), zap.Duration("silent_for", now.Sub(c.last).Round(time.Millisecond))}
	log := rl.r.log
	switch c.state {
	case silenceWent:
		log.Warn("a source stopped publishing KV events while others go on (its blocks stay in the index as they were)",
			append(fields, zap.Duration("bound", rl.cfg.SilentSourceAfter))...)
	case silenceBack:
		log.Info("a silent source publishes KV events again", fields...)
	case silenceDCQuiet:
		log.Info("a silent source is no longer counted: no source of the DC published within the bound (ckf_relay_kv_idle_seconds)", fields...)
	case silenceForgotten:
		log.Info("a silent source is forgotten", append(fields, zap.Duration("forget_after", rl.cfg.ForgetSourceAfter))...)
	case silenceCleared:
		log.Info("a silent source was cleared (its engine restarted or the worker was removed)", fields...)
	}
}
