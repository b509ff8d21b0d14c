package lanes_test

import (
	"strings"
	"testing"
	"time"

	"github.com/ckf-stream/ckf-stream/ckf"
	"github.com/ckf-stream/ckf-stream/ckf/producer"
	"github.com/ckf-stream/ckf-stream/schemas"
	"github.com/ckf-stream/ckf-stream/streams/internal/streamtest"
)

// TestIndexerSizeMismatchSaysWhatToChange: a relay whose filter is sized for more blocks than the
// indexer's (65,536 blocks, 32,768 buckets, against the indexer's 2,048) has its snapshot refused,
// and both the lane event and the lane's status row (its last fault, as GET /v1/lanes shows it)
// give both bucket counts and the setting to change. The refusal once said only "snapshot format
// differs from the indexer's" in the event, and left the status row's last fault empty.
func TestIndexerSizeMismatchSaysWhatToChange(t *testing.T) {
	e := streamtest.NewEnv(t, 4096)
	events := e.WatchEvents()
	ri := e.StartIndexer(e.Manifest(1, 0), e.IndexerConfig())
	defer ri.Stop()
	state, err := producer.NewDcState(ckf.NewCkfConfig(65536))
	if err != nil {
		t.Fatal(err)
	}
	id, _ := e.ProducerState(0, 1)
	id.Format = state.Format()
	p := e.ProducerWithIdentity(0, id, state)
	p.Snapshot()
	ev := events.WaitFor(t, 0, time.Minute, "the refused snapshot", streamtest.FaultIs(schemas.EventRecordRejected, schemas.FaultWrongFormat))
	want := []string{"32768", "2048", "indexer.expected_blocks_per_dc", "relay.expected_blocks"}
	for _, w := range want {
		if !strings.Contains(ev.Fault.Detail, w) {
			t.Errorf("lane event %q lacks %q", ev.Fault.Detail, w)
		}
	}
	st := streamtest.LaneStatus(ri, 0)
	if st.LastFault != ev.Fault.Detail || st.LastFaultTime.IsZero() || st.Faults[schemas.FaultWrongFormat.String()] == 0 {
		t.Errorf("lane status: last fault %q at %v, faults %v; want the event's %q", st.LastFault, st.LastFaultTime, st.Faults, ev.Fault.Detail)
	}
}
