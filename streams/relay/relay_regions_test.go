package relay_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/ckf-stream/ckf-stream/schemas"
	"github.com/ckf-stream/ckf-stream/streams"
	"github.com/ckf-stream/ckf-stream/streams/internal/streamtest"
	"github.com/ckf-stream/ckf-stream/testenv"
)

// TestRelayServesMirroredRequests: an indexer of another region asks for the lane's snapshot on
// its own control topic, which MirrorMaker copies into the relay's region as
// "<alias>.<control>" (design §8); the relay reads that copy beside its own control topic
// (RelayTopics.MirroredControl) and writes a snapshot. In process (kfake): the mirror is the
// test writing to the copy.
func TestRelayServesMirroredRequests(t *testing.T) {
	t.Parallel()
	e := newRelayEnv(t, 4096, 1)
	const lane = 4
	mirrored := e.Cluster.NewTopic(t, 1, testenv.TopicName(streams.MirroredTopic(streams.MirrorPolicyDefault, "eu", e.Topics.Control)))
	cfg := e.relayConfig(lane, testenv.UniqueName(t, "relay"))
	cfg.Topics.MirroredControl = []string{mirrored}
	rr := e.startRelay(cfg, true)
	before := rr.r.Stats().Snapshots
	out := streams.NewOutputs(e.Cluster.Client(t), e.Codec, 77, streams.OutputTopics{Control: mirrored}, nil)
	out.RequestSnapshot(lane, streamtest.Pool(100+lane), schemas.ReasonFaultRecovery, "a remote indexer's recovery", -1)
	if err := out.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	testenv.WaitUntil(t, streamtest.Converge, "a snapshot after the mirrored request", func() bool {
		return rr.r.Stats().SnapshotRequests >= 1 && rr.r.Stats().Snapshots > before
	}, func() string { return fmt.Sprintf("stats %+v", rr.r.Stats()) })

	// The copy's name is checked against the relay's own topics.
	bad := cfg
	bad.Topics.MirroredControl = []string{cfg.Topics.Control}
	if err := bad.Validate(); err == nil {
		t.Fatal("a mirrored control topic named like the relay's own control topic was accepted")
	}
}
