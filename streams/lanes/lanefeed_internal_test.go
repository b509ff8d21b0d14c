package lanes

import (
	"fmt"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"
)

// TestLaneFeedResumeBytes: a paused lane's partition resumes once its queue drains to
// ResumeBytes; with ResumeBytes 0, only once the queue is empty. The queue is filled and drained
// by hand (four 100-byte batches against PauseBytes 400), and the client's own paused set must
// agree with the queue after every step.
func TestLaneFeedResumeBytes(t *testing.T) {
	const topic, lane, batchBytes, batches = "lanes", 3, 100, 4
	for _, tc := range []struct {
		resume int
		// pausedAfter[i] is whether the partition is paused after the i-th batch is taken
		// (300, 200, 100 and 0 bytes left).
		pausedAfter [batches]bool
	}{
		{resume: 0, pausedAfter: [batches]bool{true, true, true, false}},
		{resume: 100, pausedAfter: [batches]bool{true, true, false, false}},
		{resume: 250, pausedAfter: [batches]bool{true, false, false, false}},
	} {
		t.Run(fmt.Sprintf("resume=%d", tc.resume), func(t *testing.T) {
			cl, err := kgo.NewClient() // never connects: pausing and resuming a partition are local
			if err != nil {
				t.Fatal(err)
			}
			defer cl.Close()
			f, err := NewLaneFeed(cl, topic, []int32{lane}, FeedConfig{PauseBytes: batches * batchBytes, ResumeBytes: tc.resume})
			if err != nil {
				t.Fatal(err)
			}
			clientPaused := func() bool { return len(cl.PauseFetchPartitions(nil)[topic]) > 0 }
			q := f.queues[lane]
			for i := range batches {
				// As Run pushes a fetched batch.
				q.push([]*kgo.Record{{Value: make([]byte, batchBytes)}}, int64(i+1), f.cfg.PauseBytes, func() {
					f.cl.PauseFetchPartitions(map[string][]int32{topic: {lane}})
				})
			}
			if st := f.Queue(lane); !st.Paused || st.Pauses != 1 || !clientPaused() {
				t.Fatalf("after %d bytes queued: %+v, client paused %v; want paused once", batches*batchBytes, st, clientPaused())
			}
			for i, want := range tc.pausedAfter {
				if _, ok := f.TryNext(lane); !ok {
					t.Fatalf("batch %d not returned", i)
				}
				if st := f.Queue(lane); st.Paused != want || clientPaused() != want {
					t.Fatalf("after taking batch %d (%d bytes left): queue paused %v, client paused %v; want %v",
						i, st.Bytes, st.Paused, clientPaused(), want)
				}
			}
		})
	}
}
