package relay

import (
	"context"
	"fmt"
	"time"

	"github.com/ckf-stream/ckf-stream/app/config"
	"github.com/ckf-stream/ckf-stream/app/kafka"
	"github.com/ckf-stream/ckf-stream/app/lifecycle"
	"github.com/ckf-stream/ckf-stream/ckf"
	"github.com/ckf-stream/ckf-stream/schemas"
	streamrelay "github.com/ckf-stream/ckf-stream/streams/relay"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/uber-go/tally/v4"
	"go.uber.org/fx"
	"go.uber.org/zap"
)

// LaneRelay is one lane's relay in a process that runs a relay for every configured lane
// (processor demo, processor replay).
type LaneRelay struct {
	Lane  uint8
	Dc    uint64
	Relay *streamrelay.Relay
}

// PerLane builds one relay for each lane of cfg.Indexer's lane map: processor relay's
// configuration (StreamsConfig) for the lane's DC, reading the KV-events topic kvTopic names
// for that DC. Each relay's clients are the connection's, named lane<N>-<role> (one option set,
// and so one set of client metrics, per client); its metrics carry the tag dc. owner prefixes
// the errors.
func PerLane(owner string, cfg config.Config, conn *kafka.Connection, codec *schemas.Codec, scope tally.Scope,
	log *zap.Logger, kvTopic func(dc uint64) string) ([]*LaneRelay, error) {
	owners, err := cfg.Indexer.LaneOwners()
	if err != nil {
		return nil, err
	}
	var out []*LaneRelay
	for l := uint8(0); l < ckf.MaxLanes; l++ { // lanes up to 63 (consumer §16)
		if owners[l] == nil {
			continue
		}
		pool := *owners[l]
		rc := cfg.Relay
		rc.DcID, rc.Lane = uint64(pool.Dc), int(l)
		sc, err := StreamsConfig(rc, cfg.Indexer, conn.Topics)
		if err != nil {
			return nil, fmt.Errorf("%s: relay of lane %d: %w", owner, l, err)
		}
		sc.Topics.KVEvents = kvTopic(uint64(pool.Dc))
		r, err := streamrelay.NewRelay(streamrelay.RelayParams{
			Config:        sc,
			Codec:         codec,
			ClientOptsFor: func(role string) []kgo.Opt { return conn.Opts(fmt.Sprintf("lane%d-%s", l, role)) },
			Metrics:       scope.Tagged(map[string]string{"dc": pool.Dc.String()}),
			Log:           log.With(zap.Uint8("lane", l)),
		})
		if err != nil {
			return nil, fmt.Errorf("%s: relay of lane %d: %w", owner, l, err)
		}
		out = append(out, &LaneRelay{Lane: l, Dc: uint64(pool.Dc), Relay: r})
	}
	return out, nil
}

// RunPerLane appends to lc a hook that runs every relay from the application's start until its
// stop. A relay that stops on its own is logged and shuts the application down through sd with
// exit status 1; the stop hook cancels the relays and waits for each within fx's stop context,
// returning what they failed with (owner prefixes the errors). Hooks appended to lc before this
// one stop after the relays.
func RunPerLane(lc fx.Lifecycle, owner string, relays []*LaneRelay, log *zap.Logger, sd fx.Shutdowner) {
	g := &lifecycle.Group{Name: owner, OnExit: func(i int, err error) {
		if err != nil {
			log.Error("relay stopped", zap.Uint8("lane", relays[i].Lane), zap.Error(err))
			_ = sd.Shutdown(fx.ExitCode(1))
		}
	}}
	for _, r := range relays {
		g.Tasks = append(g.Tasks, lifecycle.Task{Name: fmt.Sprintf("relay of lane %d", r.Lane), Waiting: "the relays", Run: r.Relay.Run})
	}
	lc.Append(fx.Hook{OnStart: g.Start, OnStop: g.Stop})
}

// AwaitStarted waits until every relay of relays has published its start-up snapshot, ctx ends,
// or timeout has passed since start (an error naming the first lane whose relay had not started).
func AwaitStarted(ctx context.Context, relays []*LaneRelay, start time.Time, timeout time.Duration) error {
	for _, lr := range relays {
		select {
		case <-lr.Relay.Started():
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(timeout - time.Since(start)):
			return fmt.Errorf("the relay of lane %d did not start within %v", lr.Lane, timeout)
		}
	}
	return nil
}
