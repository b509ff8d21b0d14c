package indexer

import (
	"context"
	"errors"
	"fmt"
	"math/bits"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/ckf-stream/ckf-stream/app/httpserver"
	"github.com/ckf-stream/ckf-stream/ckf"
	"github.com/ckf-stream/ckf-stream/ckf/index"
	"github.com/ckf-stream/ckf-stream/queryapi"
	"github.com/ckf-stream/ckf-stream/schemas"
	"github.com/ckf-stream/ckf-stream/streams/lanes"
	"github.com/ckf-stream/ckf-stream/streams/query"
	"github.com/uber-go/tally/v4"
)

// Query paths, the values of the "path" tag of the query metrics.
const (
	PathKafka = "kafka"
	PathHTTP  = "http"
)

// APIParams are what NewAPI needs. Answerer and Lanes are required; the rest may be nil.
type APIParams struct {
	// Answerer answers the HTTP queries; it is the one the Kafka query service uses, so both
	// paths give the same reply for the same request and the same table state.
	Answerer *query.Answerer
	// Lanes returns the status of every configured lane (lanes.Indexer.Lanes).
	Lanes func() []lanes.LaneStatus
	// Eligible returns the lanes queries may use now (lanes.Indexer.EligibleLanes); nil means
	// the table's ready lanes.
	Eligible func() uint64
	// Metrics is the root scope; the HTTP path records under the tag path="http".
	Metrics tally.Scope
}

// API is the indexer's HTTP face: the lane status table (JSON and a page for people), the direct
// prefix-match endpoint, and the "lanes" readiness check. It holds no lane state of its own
// beyond the mask of lanes seen eligible since start (see Ready).
type API struct {
	ans      *query.Answerer
	g        *index.GlobalIndexer
	lanes    func() []lanes.LaneStatus
	eligible func() uint64
	m        query.PathMetrics
	ids      atomic.Uint64
	// everEligible has bit l set once lane l has been eligible at any time since start.
	everEligible atomic.Uint64
	// pools names every lane of the lane map in answers (queryapi.ResponseOf).
	pools *[ckf.MaxLanes]queryapi.LanePool
	// neverMatch is the first-block alarm's latest evaluation (nil: none runs), for the views.
	neverMatch *neverMatchWatch
	// configured is the manifest's lane mask.
	configured uint64
}

// NewAPI returns the API over p.Answerer's indexer.
func NewAPI(p APIParams) (*API, error) {
	if p.Answerer == nil || p.Lanes == nil {
		return nil, errors.New("indexer: the API needs an Answerer and a lane status source")
	}
	a := &API{ans: p.Answerer, g: p.Answerer.Indexer(), lanes: p.Lanes, eligible: p.Eligible,
		m: newQueryMetrics(p.Metrics, PathHTTP)}
	a.pools = queryapi.LanePools(a.g.Manifest().PoolOf)
	a.configured = a.g.Manifest().ConfiguredLanes64()
	if a.eligible == nil {
		a.eligible = a.g.ReadyLanes64
	}
	return a, nil
}

// Observe records which lanes are eligible now (see Ready). The indexer calls it a few times a
// second; Ready and the lane views call it too.
func (a *API) Observe() uint64 {
	e := a.eligible()
	a.everEligible.Or(e)
	return e
}

// ErrNotReady is what the "lanes" readiness check returns (wrapped, with the lanes named) while
// the indexer should not take traffic.
var ErrNotReady = errors.New("indexer: not ready")

// Ready is the "lanes" readiness check. The indexer is ready when every configured lane is
// either eligible (ready in the table and within the freshness policy) or explicitly degraded,
// and at least one lane is eligible.
//
// A lane is degraded when it was eligible at some time since this replica started and is not
// now: its relay stopped, it lags beyond the freshness policy, or it is recovering from a fault.
// The indexer reports such a lane (lane events, GET /v1/lanes, metrics) and leaves it out of
// answers, which then say so lane by lane; taking the whole replica out of service would make
// one DC's trouble every DC's, since all replicas read the same lanes and would fail alike.
//
// A lane that has never been eligible since start keeps the replica unready: a starting replica
// serves only once it has every DC's view, so a rolling restart never routes on a partial table.
// A DC that is down for good is taken out of indexer.lanes by configuration.
func (a *API) Ready(context.Context) error {
	elig := a.Observe()
	configured := a.g.Manifest().ConfiguredLanes64()
	if missing := configured &^ a.everEligible.Load(); missing != 0 {
		return fmt.Errorf("%w: lanes %s have not been ready since start", ErrNotReady, laneList(missing))
	}
	if elig&configured == 0 {
		return fmt.Errorf("%w: no lane is eligible (lanes %s are degraded)", ErrNotReady, laneList(configured))
	}
	return nil
}

// laneList renders a lane mask as "0,3,7".
func laneList(mask uint64) string {
	var b strings.Builder
	for m := mask; m != 0; m &= m - 1 {
		if b.Len() > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.Itoa(bits.TrailingZeros64(m)))
	}
	return b.String()
}

// Lane states of LaneView.State.
const (
	// StateServing: the lane is eligible; answers include it.
	StateServing = "serving"
	// StateDegraded: the lane was eligible since start and is not now (see API.Ready).
	StateDegraded = "degraded"
	// StateStarting: the lane has not been eligible since start.
	StateStarting = "starting"
)

// LaneView is one row of the lane table: lanes.LaneStatus plus the DC, the serving state and
// the lag in seconds.
type LaneView struct {
	Lane uint8  `json:"lane"`
	DcID string `json:"dc_id"`
	Pool string `json:"pool"`
	// State is serving, degraded or starting (see the State* constants).
	State string `json:"state"`
	// AnswerState is what an answer says of the lane now: exact, incomplete, stale or
	// unavailable (queryapi.LaneAnswer.State), taken from the Answerer itself, so the view and
	// the answers cannot disagree.
	AnswerState string `json:"answer_state"`
	// AgeMillis is the lane's age now as answers give it (age_ms: from the newest KV event its
	// state reflects); absent while the lane has applied nothing.
	AgeMillis         *int64            `json:"age_ms,omitempty"`
	Phase             string            `json:"phase"`
	Ready             bool              `json:"ready"`
	Excluded          bool              `json:"excluded"`
	Identity          string            `json:"identity"`
	LeaseEpoch        uint64            `json:"lease_epoch"`
	InstalledSequence uint64            `json:"installed_sequence"`
	AppliedOffset     int64             `json:"applied_offset"`
	HighWatermark     int64             `json:"high_watermark"`
	LagRecords        int64             `json:"lag_records"`
	LagSeconds        float64           `json:"lag_seconds"`
	SnapshotOffset    int64             `json:"snapshot_offset"`
	Deltas            uint64            `json:"deltas"`
	Images            uint64            `json:"images"`
	Snapshots         uint64            `json:"snapshots"`
	Heartbeats        uint64            `json:"heartbeats"`
	Rejected          uint64            `json:"rejected"`
	Recoveries        uint64            `json:"recoveries"`
	SnapshotRequests  uint64            `json:"snapshot_requests"`
	Faults            map[string]uint64 `json:"faults,omitempty"`
	LastFault         string            `json:"last_fault,omitempty"`
	LastFaultTime     *time.Time        `json:"last_fault_time,omitempty"`
	// Capacity is the DC filter's capacity state as the lane's records last carried it; absent
	// until one did (a relay that does not report it).
	Capacity *CapacityView `json:"capacity,omitempty"`
	// Sources is the health of the DC's sources as the lane's records last carried it; absent
	// until one did.
	Sources *SourcesView `json:"sources,omitempty"`
	// NeverMatch is the first-block alarm's view of the lane over its window: searches of the
	// lane while it held blocks, those that missed even the first block, and whether the alarm
	// is raised (the routers' hashes do not meet the engines'). Absent until evaluated.
	NeverMatch *NeverMatchView `json:"never_match,omitempty"`
	// BlockSize is the block size of the DC's engines as the lane's latest record carried it
	// (lanes.Indexer.LaneBlockSize): a token-id query of another size that selects the lane is
	// refused (consumer §6.5). Absent while the lane knows none.
	BlockSize uint32 `json:"block_size,omitempty"`
	// Source is where the lane is read: its lane topic, and for a lane of another region the
	// region it is mirrored from (indexer.remote_lanes, design §8).
	Source string `json:"source"`
	// ReplayedRecords counts records the lane skipped inside a snapshot's assembly as a mirror's
	// repeats (lanes.LaneStatus.ReplayedRecords); absent while 0.
	ReplayedRecords uint64 `json:"replayed_records,omitempty"`
}

// NeverMatchView is a lane's first-block alarm (query.NeverMatch) over its window.
type NeverMatchView struct {
	WindowSeconds float64 `json:"window_seconds"`
	Searches      uint64  `json:"searches"`
	Misses        uint64  `json:"misses"`
	MissRatio     float64 `json:"miss_ratio"`
	Alarm         bool    `json:"alarm"`
}

// SourcesView is the health of a lane's DC sources (lanes.LaneSources): sources whose engine
// history a bridge lost and cleared. Answers on a lane with degraded_sources above 0 are marked
// incomplete.
type SourcesView struct {
	DegradedSources   uint64 `json:"degraded_sources"`
	LostHistoryClears uint64 `json:"lost_history_clears"`
}

// CapacityView is a lane's capacity state (lanes.LaneCapacity): how full the DC's filter is and
// how many of the DC's cached blocks it misses. Answers on a lane with omitted_blocks above 0 are
// marked incomplete.
type CapacityView struct {
	FilterOccupancyRatio   float64 `json:"filter_occupancy_ratio"`
	ResidentBlocks         uint64  `json:"resident_blocks"`
	OmittedBlocks          uint64  `json:"omitted_blocks"`
	CapacityOmissions      uint64  `json:"capacity_omissions"`
	OmissionsSinceSnapshot uint64  `json:"capacity_omissions_since_snapshot"`
}

// LanesView is the body of GET /v1/lanes.
type LanesView struct {
	Time             time.Time `json:"time"`
	ConsumerInstance string    `json:"consumer_instance"`
	Domain           string    `json:"domain"`
	BucketCount      uint64    `json:"bucket_count"`
	// LaneCount is the table's lane count: the highest lane of indexer.lanes + 1 (consumer
	// §16).
	LaneCount int `json:"lane_count"`
	// ConfiguredLanes, ReadyLanes and EligibleLanes are lane masks (bit l = lane l, up to 64
	// bits: consumer §16), kept for the clients that read them; the *LaneNumbers are the same
	// sets as lists of lane numbers, which a person reads without decoding bits (a mask of 3 is
	// lanes 0 and 1, not 3 lanes), and which stay exact where a reader's JSON numbers are
	// doubles (lanes above 52).
	ConfiguredLanes       uint64  `json:"configured_lanes"`
	ReadyLanes            uint64  `json:"ready_lanes"`
	EligibleLanes         uint64  `json:"eligible_lanes"`
	ConfiguredLaneNumbers []uint8 `json:"configured_lane_numbers"`
	ReadyLaneNumbers      []uint8 `json:"ready_lane_numbers"`
	EligibleLaneNumbers   []uint8 `json:"eligible_lane_numbers"`
	// Ready is the "lanes" readiness check's verdict; NotReady says why not.
	Ready    bool       `json:"ready"`
	NotReady string     `json:"not_ready,omitempty"`
	Lanes    []LaneView `json:"lanes"`
}

// View returns the lane table now.
func (a *API) View() LanesView {
	m := a.g.Manifest()
	elig := a.Observe()
	ever := a.everEligible.Load()
	v := LanesView{
		LaneCount:        m.LaneCount(),
		Time:             time.Now().UTC(),
		ConsumerInstance: fmt.Sprintf("%016x", uint64(m.ConsumerInstance())),
		Domain:           m.IndexerDomain().String(),
		BucketCount:      a.g.BucketCount(),
		ConfiguredLanes:  m.ConfiguredLanes64(),
		ReadyLanes:       a.g.ReadyLanes64(),
		EligibleLanes:    elig,
		Lanes:            []LaneView{},
	}
	v.ConfiguredLaneNumbers, v.ReadyLaneNumbers, v.EligibleLaneNumbers = laneNumbers(v.ConfiguredLanes), laneNumbers(v.ReadyLanes), laneNumbers(v.EligibleLanes)
	if err := a.Ready(context.Background()); err != nil {
		v.NotReady = err.Error()
	} else {
		v.Ready = true
	}
	answers := a.laneAnswers()
	for _, s := range a.lanes() {
		pool, _ := m.PoolOf(s.Lane)
		lv := LaneView{
			Lane: s.Lane, DcID: pool.Dc.String(), Pool: s.Pool, Phase: s.Phase.String(),
			Ready: s.Ready, Excluded: s.Excluded, Identity: s.Identity, LeaseEpoch: s.LeaseEpoch,
			InstalledSequence: s.InstalledSequence, AppliedOffset: s.AppliedOffset,
			HighWatermark: s.HighWatermark, LagRecords: s.LagRecords, LagSeconds: s.LagTime.Seconds(),
			SnapshotOffset: s.SnapshotOffset, Deltas: s.Deltas, Images: s.Images, Snapshots: s.Snapshots,
			Heartbeats: s.Heartbeats, Rejected: s.Rejected, Recoveries: s.Recoveries,
			SnapshotRequests: s.SnapshotRequests, Faults: s.Faults, LastFault: s.LastFault, BlockSize: s.BlockSize,
			Source: s.Source, ReplayedRecords: s.ReplayedRecords,
		}
		if len(lv.Faults) == 0 {
			lv.Faults = nil
		}
		lv.AnswerState = queryapi.LaneStateName(schemas.LaneStateUnknown)
		if st, ok := answers[s.Lane]; ok {
			lv.AnswerState = queryapi.LaneStateName(st.State)
			if age, ok := st.AgeMillis.Get(); ok {
				lv.AgeMillis = &age
			}
		}
		if h := s.Sources; h.Reported {
			lv.Sources = &SourcesView{DegradedSources: h.DegradedSources, LostHistoryClears: h.LostHistoryClears}
		}
		if nm, ok := a.neverMatch.view(s.Lane); ok {
			lv.NeverMatch = &NeverMatchView{WindowSeconds: a.neverMatch.eval.Config().Window.Seconds(), Searches: nm.Searched,
				Misses: nm.Missed, MissRatio: nm.MissShare(), Alarm: nm.Alarm}
		}
		if c := s.Capacity; c.Reported {
			lv.Capacity = &CapacityView{FilterOccupancyRatio: c.FilterOccupancy, ResidentBlocks: c.ResidentBlocks,
				OmittedBlocks: c.OmittedBlocks, CapacityOmissions: c.CapacityOmissions, OmissionsSinceSnapshot: c.OmissionsSinceSnapshot}
		}
		if !s.LastFaultTime.IsZero() {
			t := s.LastFaultTime.UTC()
			lv.LastFaultTime = &t
		}
		bit := uint64(1) << s.Lane
		switch {
		case elig&bit != 0:
			lv.State = StateServing
		case ever&bit != 0:
			lv.State = StateDegraded
		default:
			lv.State = StateStarting
		}
		v.Lanes = append(v.Lanes, lv)
	}
	return v
}

// laneAnswers returns, per configured lane, the state and age an answer gives it now: those of
// an empty query's answer (no block to search, so it costs no lookup and counts in no
// first-block statistics).
func (a *API) laneAnswers() map[uint8]schemas.LaneState {
	r := a.ans.AnswerPooled(&schemas.QueryRequest{CorrelationID: "lanes-view", Input: schemas.InputLocalBlockHashes,
		LaneMask64: schemas.Some(schemas.AllLanes64)})
	out := make(map[uint8]schemas.LaneState, len(r.LaneStates))
	for _, st := range r.LaneStates {
		out[st.Lane] = st
	}
	return out
}

// Routes returns the API's HTTP routes: GET /v1/lanes, GET /lanes and GET / (the page),
// POST /v1/prefix-matches.
func (a *API) Routes() []httpserver.Route {
	page := a.PageHandler()
	return []httpserver.Route{
		{Pattern: "GET /v1/lanes", Handler: a.LanesHandler()},
		{Pattern: "GET /lanes", Handler: page},
		{Pattern: "GET /{$}", Handler: page},
		{Pattern: "POST /v1/prefix-matches", Handler: a.QueryHandler()},
	}
}

// LanesHandler serves GET /v1/lanes: the lane table as JSON (LanesView).
func (a *API) LanesHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Cache-Control", "no-store")
		writeJSON(w, http.StatusOK, a.View())
	})
}

// laneNumbers lists the lanes of mask in ascending order; empty, never null, for none.
func laneNumbers(mask uint64) []uint8 {
	out := make([]uint8, 0, bits.OnesCount64(mask))
	for m := mask; m != 0; m &= m - 1 {
		out = append(out, uint8(bits.TrailingZeros64(m)))
	}
	return out
}
