package relay

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.uber.org/zap"
)

// Mirrored control topics that do not exist yet (design §8). In a deployment of several
// regions, MirrorMaker creates its copy of another region's control topic ("<alias>.<control>")
// only once it first mirrors that region, so a relay that starts before (its region came up
// before its peer, or before the mirror's first pass) would find the copy missing. Its own
// region does not depend on the copy: the relay starts without it, says so (a warning naming
// it, RelayStats.MirroredControlMissing, ckf_relay_mirrored_control_missing), and a watch adds
// the copy's partitions to its input once the topic exists, from their start. From the start
// rather than at the end: every request the copy holds was written after the relay started
// (the copy did not exist then) or is one the peer still retains, and the start-up snapshot,
// which serves requests older than the relay, was written before the relay could read them. A
// request read there is served like any other (coalesced, at most one snapshot per
// SnapshotRequestMinInterval). Each partition is added once, at one offset, so each of its
// records is read once.

// mirrorWatchInterval is how often the watch asks whether a missing copy exists now: one
// metadata request, cheap beside MirrorMaker's own topic refresh (every 10 minutes by default,
// refresh.topics.interval.seconds, in Apache Kafka 4.4.0, the release testenv runs); a copy is
// picked up within this much of its creation.
const mirrorWatchInterval = 2 * time.Second

// mirrorWatch is the goroutine that waits for the missing copies.
type mirrorWatch struct {
	cancel context.CancelFunc
	done   chan struct{}
}

// controlTopics returns the control topics the relay reads from the start-up on (its own and
// the mirrored copies that exist) and the mirrored copies that do not exist yet.
func (rl *relayLoop) controlTopics(ctx context.Context, adm *kadm.Client) (present, missing []string, err error) {
	cfg := rl.cfg
	if cfg.Topics.Control != "" {
		present = append(present, cfg.Topics.Control)
	}
	var mirrored []string
	for _, t := range cfg.Topics.MirroredControl {
		if t != "" {
			mirrored = append(mirrored, t)
		}
	}
	if len(mirrored) > 0 {
		// Asked before the listings, which would retry a missing topic for
		// streams.OffsetListRetry and then fail the start.
		td, err := adm.ListTopics(ctx, mirrored...)
		if err != nil {
			return nil, nil, fmt.Errorf("streams: relay: listing the mirrored control topics %v: %w", mirrored, err)
		}
		for _, t := range mirrored {
			if td.Has(t) {
				present = append(present, t)
			} else {
				missing = append(missing, t)
			}
		}
	}
	rl.r.c.mirroredControlMissing.set(uint64(len(missing)))
	if len(missing) > 0 {
		rl.r.log.Warn("mirrored control topics do not exist yet (the region's MirrorMaker has not created them): the relay starts without them and reads each from its start once it appears; until then the other regions' snapshot requests do not reach it",
			zap.Strings("topics", missing))
	}
	return present, missing, nil
}

// watchMirroredControl starts the watch for the missing copies (none: nothing to watch). It
// runs beside the loop and touches only the clients (safe for concurrent use), the log and the
// ledger; stopMirrorWatch ends it.
func (rl *relayLoop) watchMirroredControl(adm *kadm.Client, missing []string) {
	if len(missing) == 0 {
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	w := &mirrorWatch{cancel: cancel, done: make(chan struct{})}
	rl.mirrorWatch = w
	missing = slices.Clone(missing)
	go func() {
		defer close(w.done)
		tick := time.NewTicker(mirrorWatchInterval)
		defer tick.Stop()
		for len(missing) > 0 {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			if gate := rl.r.hooks.mirrorGate(); gate != nil {
				gate()
			}
			missing = rl.addAppearedControl(ctx, adm, missing)
		}
	}()
}

// addAppearedControl adds to the input every partition of the missing copies that exist now,
// from its start, and returns those still missing. A failed listing is tried again at the next
// tick.
func (rl *relayLoop) addAppearedControl(ctx context.Context, adm *kadm.Client, missing []string) []string {
	r := rl.r
	td, err := adm.ListTopics(ctx, missing...)
	if err != nil {
		if ctx.Err() == nil {
			r.log.Warn("listing the missing mirrored control topics failed; trying again", zap.Strings("topics", missing), zap.Error(err))
		}
		return missing
	}
	var still []string
	for _, t := range missing {
		d := td[t]
		if !td.Has(t) || len(d.Partitions) == 0 { // not there, or listed before its partitions
			still = append(still, t)
			continue
		}
		from := make(map[int32]kgo.Offset, len(d.Partitions))
		for p := range d.Partitions {
			from[p] = kgo.NewOffset().AtStart()
		}
		rl.inCl.AddConsumePartitions(map[string]map[int32]kgo.Offset{t: from})
		r.log.Info("mirrored control topic exists now: the relay reads it from its start",
			zap.String("topic", t), zap.Int("partitions", len(from)))
	}
	r.c.mirroredControlMissing.set(uint64(len(still)))
	return still
}

// stopMirrorWatch ends the watch and waits for it (no watch: nothing to do).
func (rl *relayLoop) stopMirrorWatch() {
	if w := rl.mirrorWatch; w != nil {
		w.cancel()
		<-w.done
		rl.mirrorWatch = nil
	}
}
