package streams_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/ckf-stream/ckf-stream/streams"
	"github.com/ckf-stream/ckf-stream/streams/internal/streamtest"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// TestLaneWriterWriteTimeoutWhileTheBrokerHoldsTheProduce: a broker that takes a produce
// request and never answers it (a leader that lost its disk or its network mid-request) must
// not hold a write past WriteTimeout. The idempotent client cannot fail records it has sent
// without an answer, so without its own bound the write waits for the client's retries; the
// writer gives up at WriteTimeout with ErrWriteUncertain (delivery unknown: the relay abandons
// the stream). The produce stays held until the test ends, so the write can only return by its
// own bound.
func TestLaneWriterWriteTimeoutWhileTheBrokerHoldsTheProduce(t *testing.T) {
	k := streamtest.NewFakeKafka(t)
	const lane = 2
	lanes := k.NewTopic(t, 4)
	w, _ := streamWriter(t, k, lanes, lane, 300*time.Millisecond)
	held := make(chan struct{}, 1)
	release := make(chan struct{})
	t.Cleanup(func() { close(release) })
	k.Fake.ControlKey(kmsg.Produce.Int16(), func(kmsg.Request) (kmsg.Response, error, bool) {
		k.Fake.KeepControl()
		select {
		case held <- struct{}{}:
		default:
		}
		k.Fake.SleepControl(func() { <-release })
		return nil, nil, false
	})
	err := w.WriteDeltas(context.Background(), streamDeltas(3))
	select {
	case <-held:
	default:
		t.Fatalf("the write returned (%v) before the broker held its produce", err)
	}
	if !errors.Is(err, streams.ErrWriteUncertain) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("write while the broker holds the produce: %v; want ErrWriteUncertain and the deadline", err)
	}
}
