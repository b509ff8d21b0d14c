package relay_test

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/ckf-stream/ckf-stream/schemas"
	"github.com/ckf-stream/ckf-stream/streams"
	"github.com/ckf-stream/ckf-stream/streams/internal/streamtest"
	"github.com/ckf-stream/ckf-stream/streams/relay"
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

// TestRelayStartsBeforeItsMirroredControlTopicExists: MirrorMaker creates its copy of another
// region's control topic only when it first mirrors that region, so a relay may start before
// the copy exists. It starts anyway (it stopped at start-up once the listing's retries ran
// out), says that the copy is missing, and reads the copy from its start once it appears: a
// request written to the copy before the relay saw it is served, one written after is served
// too, and neither is read twice.
func TestRelayStartsBeforeItsMirroredControlTopicExists(t *testing.T) {
	t.Parallel()
	e := newRelayEnv(t, 4096, 1)
	const lane = 4
	mirrored := streams.MirroredTopic(streams.MirrorPolicyDefault, "eu", e.Topics.Control)
	cfg := e.relayConfig(lane, testenv.UniqueName(t, "relay"))
	cfg.Topics.MirroredControl = []string{mirrored}
	rr := e.startRelay(cfg, true)
	if n := rr.r.Stats().MirroredControlMissing; n != 1 {
		t.Fatalf("MirroredControlMissing %d at start, want 1 (%s does not exist)", n, mirrored)
	}

	// The watch for the copy is held while the mirror creates it and a request is written to
	// it, so that the relay finds the copy already holding a request.
	hold := make(chan struct{})
	release := sync.OnceFunc(func() { close(hold) })
	t.Cleanup(release) // before the relay's stop, which waits for the watch
	relay.SetRelayMirrorGate(rr.r, func() { <-hold })
	e.Cluster.NewTopic(t, 1, testenv.TopicName(mirrored))
	out := streams.NewOutputs(e.Cluster.Client(t), e.Codec, 77, streams.OutputTopics{Control: mirrored}, nil)
	request := func(detail string) {
		out.RequestSnapshot(lane, streamtest.Pool(100+lane), schemas.ReasonFaultRecovery, detail, -1)
		if err := out.Flush(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	before := rr.r.Stats().Snapshots
	request("written before the relay saw the copy")
	release()
	testenv.WaitUntil(t, streamtest.Converge, "the copy picked up and its request served", func() bool {
		s := rr.r.Stats()
		return s.MirroredControlMissing == 0 && s.SnapshotRequests >= 1 && s.Snapshots > before
	}, func() string { return fmt.Sprintf("stats %+v", rr.r.Stats()) })

	before = rr.r.Stats().Snapshots
	request("written after the relay picked the copy up")
	testenv.WaitUntil(t, streamtest.Converge, "the second request served", func() bool {
		s := rr.r.Stats()
		return s.SnapshotRequests >= 2 && s.Snapshots > before
	}, func() string { return fmt.Sprintf("stats %+v", rr.r.Stats()) })
	if err := rr.stop(); err != nil {
		t.Fatal(err)
	}
	if n := rr.r.Stats().SnapshotRequests; n != 2 {
		t.Fatalf("%d snapshot requests read, want 2: a request of the copy was read twice", n)
	}
}
