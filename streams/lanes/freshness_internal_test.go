package lanes

import (
	"strings"
	"testing"
	"time"

	"github.com/ckf-stream/ckf-stream/schemas"
	"github.com/ckf-stream/ckf-stream/streams"
)

// heartbeat appends the producer's heartbeat at the rig's clock.
func (p *rigProducer) heartbeat() {
	p.r.append(p.r.encode(schemas.LaneRecord{Identity: streams.WireIdentity(p.ID), Kind: schemas.LaneHeartbeat,
		Heartbeat: schemas.Heartbeat{LastSequence: p.Publisher.LastSequence(), ProducerTime: p.r.now}}))
}

// closed reports whether ch is closed, without waiting.
func closed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// TestIndexerFreshnessExcludesSilentLane: a lane whose producer falls silent is excluded from
// answers after the freshness policy's time bound and readmitted when records flow again. The
// rig's clock moves past the bound; nothing waits for it.
func TestIndexerFreshnessExcludesSilentLane(t *testing.T) {
	t.Parallel()
	cfg := testConfig()
	cfg.Freshness.MaxTimeLag = 1500 * time.Millisecond
	r := newLaneRig(t, 6, 4096, cfg)
	p := r.producer(1)
	p.snapshot()
	p.storeChain(5, nil, 0)
	chain := p.Chains[0]
	r.mustConverge(p)
	if r.out.count(kindIs(schemas.EventExcludedForLag)) != 0 || r.ix.EligibleLanes() != 1<<6 {
		t.Fatalf("a lane within the bound was excluded: events %s", r.out.kinds())
	}
	r.now = r.now.Add(cfg.Freshness.MaxTimeLag + time.Millisecond)
	r.drain()
	r.out.find(t, "EXCLUDED_FOR_LAG", kindIs(schemas.EventExcludedForLag))
	if r.ix.EligibleLanes() != 0 {
		t.Fatalf("eligible lanes %016b: the silent lane must be excluded", r.ix.EligibleLanes())
	}
	if r.ix.g.ReadyLanes() == 0 {
		t.Fatal("exclusion must not retire the lane")
	}
	p.heartbeat()
	r.drain()
	r.out.find(t, "READMITTED", kindIs(schemas.EventReadmitted))
	if r.ix.EligibleLanes() != 1<<6 {
		t.Fatalf("eligible lanes %016b after a heartbeat, want lane 6", r.ix.EligibleLanes())
	}
	if m, err := r.ix.g.FindPrefixMatches(chain); err != nil || m.Lanes[6].Depth != uint32(len(chain)) {
		t.Fatalf("query after readmission: %+v %v", m, err)
	}
}

// TestIndexerFreshnessZeroBoundsNotChecked: the zero policy checks neither bound: a ready lane
// whose last record ages is reported with its time lag and stays in answers (a zero bound once
// meant "the default bound").
func TestIndexerFreshnessZeroBoundsNotChecked(t *testing.T) {
	t.Parallel()
	cfg := testConfig()
	cfg.Freshness = FreshnessPolicy{}
	r := newLaneRig(t, 7, 4096, cfg)
	p := r.producer(1)
	p.snapshot()
	p.storeChain(5, nil, 0)
	r.mustConverge(p)
	r.now = r.now.Add(time.Hour)
	r.drain()
	// Lag, readiness and exclusion are reported together, by the check that decides exclusion.
	st := r.status()
	if !st.Ready || st.LagTime != time.Hour || st.Excluded {
		t.Fatalf("status %+v: want the lane ready, an hour of time lag, not excluded", st)
	}
	if r.ix.EligibleLanes() != 1<<7 {
		t.Fatalf("eligible lanes %016b, want lane 7", r.ix.EligibleLanes())
	}
}

// TestEligibilityChangedSignalsEachChange: Indexer.EligibilityChanged's channel is closed by the
// change itself — a snapshot installed, an exclusion for lag, a readmission, a fault, the lanes
// released — and by nothing else, so a waiter needs no polling.
func TestEligibilityChangedSignalsEachChange(t *testing.T) {
	t.Parallel()
	cfg := testConfig()
	cfg.Freshness.MaxTimeLag = time.Second
	r := newLaneRig(t, 5, 4096, cfg)
	p := r.producer(1)
	step := func(what string, change func(), want uint64) {
		t.Helper()
		ch := r.ix.EligibilityChanged()
		change()
		if !closed(ch) {
			t.Fatalf("%s: the eligibility channel was not closed", what)
		}
		if got := r.ix.EligibleLanes(); got != want {
			t.Fatalf("%s: eligible lanes %016b, want %016b", what, got, want)
		}
	}
	step("snapshot installed", func() { p.snapshot(); r.drain() }, 1<<5)

	// Deltas that keep the lane eligible change nothing: the channel stays open.
	ch := r.ix.EligibilityChanged()
	p.storeChain(4, nil, 0)
	r.mustConverge(p)
	if closed(ch) {
		t.Fatal("the channel was closed though eligibility did not change")
	}
	step("excluded for lag", func() { r.now = r.now.Add(2 * time.Second); r.drain() }, 0)
	step("readmitted", func() { p.heartbeat(); r.drain() }, 1<<5)
	last := p.Publisher.LastSequence()
	step("fault", func() { r.delta(p.ID, last+1, last+2, [2]uint64{1, 1}); r.drain() }, 0)
	step("snapshot after the fault", func() { p.snapshot(); r.drain() }, 1<<5)
	step("lanes released", r.ix.closeLanes, 0)
}

// TestIndexerSizeMismatchSaysWhatToChange: a relay whose filter is sized differently from the
// indexer's (65,536 blocks, 32,768 buckets, against the indexer's 2,048) has its snapshot refused,
// and both the lane event and the lane's status row (its last fault, as GET /v1/lanes shows it)
// give both bucket counts and the setting to change. The refusal once said only "snapshot format
// differs from the indexer's" in the event, and left the status row's last fault empty.
func TestIndexerSizeMismatchSaysWhatToChange(t *testing.T) {
	t.Parallel()
	r := newLaneRigSized(t, 0, 65536, 4096, testConfig())
	p := r.producer(1)
	p.snapshot()
	r.drain()
	ev := r.out.find(t, "the refused snapshot", faultIs(schemas.EventRecordRejected, schemas.FaultWrongFormat))
	for _, w := range []string{"32768", "2048", "indexer.expected_blocks_per_dc", "relay.expected_blocks"} {
		if !strings.Contains(ev.Fault.Detail, w) {
			t.Errorf("lane event %q lacks %q", ev.Fault.Detail, w)
		}
	}
	st := r.status()
	if st.LastFault != ev.Fault.Detail || st.LastFaultTime.IsZero() || st.Faults[schemas.FaultWrongFormat.String()] == 0 {
		t.Errorf("lane status: last fault %q at %v, faults %v; want the event's %q", st.LastFault, st.LastFaultTime, st.Faults, ev.Fault.Detail)
	}
}

// TestRefusingLaneLags: a lane whose every snapshot is refused reads on (heartbeats, deltas it
// cannot apply, more refused snapshots) but its answers do not move: its lag counts every record
// since it started, where it once read 0 (it had read everything), and its age is never set.
func TestRefusingLaneLags(t *testing.T) {
	t.Parallel()
	r := newLaneRigSized(t, 0, 65536, 4096, testConfig())
	p := r.producer(1)
	p.snapshot()
	p.heartbeat()
	p.snapshot()
	r.drain()
	r.l.checkFreshness(r.now, false)
	st := r.status()
	if st.Ready || st.LagRecords != int64(len(r.log)) || st.LagRecords == 0 {
		t.Fatalf("refusing lane: ready %v, lag %d records, want not ready and %d (every record read)", st.Ready, st.LagRecords, len(r.log))
	}
	if at := r.ix.LaneAsOf(r.lane); at != 0 {
		t.Errorf("refusing lane's as_of %d, want none", at)
	}
}
