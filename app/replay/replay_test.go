package replay_test

import (
	"bytes"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ckf-stream/ckf-stream/app"
	"github.com/ckf-stream/ckf-stream/app/config"
	"github.com/ckf-stream/ckf-stream/app/replay"
	"github.com/ckf-stream/ckf-stream/eval"
	"go.uber.org/fx"
	"go.uber.org/zap/zapcore"
)

// speedup runs the test's replay 30 times faster than real time: five minutes of trace in ten
// seconds.
const speedup = 30

// syncBuffer is a bytes.Buffer safe for the driver and the test.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func options(t *testing.T, from, window time.Duration) replay.Options {
	t.Helper()
	reqs, st, err := eval.ReadTraceFile("../../traces/conversation_trace.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	reqs = eval.Window(reqs, float64(from.Milliseconds()), float64(window.Milliseconds()))
	return replay.Options{Trace: "conversation_trace.jsonl", Requests: reqs, Stats: st, From: from, Window: window,
		Speedup: speedup, Compress: 1, Fleet: eval.DefaultConfig(), Seeds: 3, Query: replay.QueryKafka, ReadyTimeout: time.Minute, QueryTimeout: 10 * time.Second,
		VisibleTimeout: 10 * time.Second}
}

// runReplay runs processor replay's application in process, on the embedded broker.
func runReplay(t *testing.T, o replay.Options) *replay.Report {
	t.Helper()
	out := &syncBuffer{}
	var rep *replay.Report
	o.Out, o.Done = out, func(r *replay.Report) { rep = r }
	cfg := config.Default()
	cfg.HTTP.Listen, cfg.Log.Level = "127.0.0.1:0", "warn"
	replay.Configure(&cfg, o)
	logs := &syncBuffer{}
	code, err := app.Run(app.New(cfg, replay.Module(cfg, o),
		fx.Supply(fx.Annotate(zapcore.AddSync(logs), fx.As(new(zapcore.WriteSyncer))))))
	t.Log(out.String())
	if code != 0 || err != nil {
		t.Fatalf("replay: exit %d, %v; logs:\n%s", code, err, logs.String())
	}
	if rep == nil || rep.Live == nil {
		t.Fatal("no report")
	}
	return rep
}

// checkTwoStage checks the live run's second stage: every request asked the chosen DC's worker
// stage and got an answer, no answer named a worker of another DC, every under-report of a
// worker's depth is explained by a store not yet visible in the worker stage, every store of a
// worker became visible there, and the worker choices (and DC choices) equal exact knowledge's
// on at least 99 % of the requests.
func checkTwoStage(t *testing.T, rep *replay.Report) {
	t.Helper()
	lv := rep.Live
	ws := lv.Workers
	if ws == nil {
		t.Fatal("no worker stage in the report")
	}
	if ws.Queries != rep.Requests || ws.Answered != ws.Queries || ws.FallBacks != 0 || ws.ForeignSources != 0 {
		t.Errorf("worker stage: %d requests, %d queries, %d answered, %d placed by load alone, %d foreign sources (%s)",
			rep.Requests, ws.Queries, ws.Answered, ws.FallBacks, ws.ForeignSources, ws.FirstError)
	}
	if un := ws.UnderReports - ws.UnderExplained; un != 0 {
		t.Errorf("worker stage: %d under-reports not explained by visibility", un)
	}
	if ws.Visible.Events == 0 || ws.Visible.NotSeen != 0 {
		t.Errorf("worker stage event to visible: %d seen, %d never", ws.Visible.Events, ws.Visible.NotSeen)
	}
	if ws.Requests != rep.Requests || ws.SameWorker < rep.Requests*99/100 || ws.SameDC < rep.Requests*99/100 {
		t.Errorf("two-stage agreement with exact knowledge over %d requests: DC %d, worker %d (want >= 99%%)", ws.Requests, ws.SameDC, ws.SameWorker)
	}
}

// TestReplayInvariants replays five minutes of the conversation trace, 30 times compressed,
// through the real pipeline on the embedded broker, and checks the invariants of the issue:
// ckf's hit rate is at least load's and random's and at most the best oracle's (with the
// oracles' seed-to-seed spread); every request is answered at both stages; every under-report
// is explained by an event not yet visible; where every answer was exact (the indexer's and the
// worker stage's), the two-stage ckf run made the same-seed cost oracle's every choice; and the
// two-stage run agrees with exact knowledge (checkTwoStage).
func TestReplayInvariants(t *testing.T) {
	rep := runReplay(t, options(t, 10*time.Minute, 5*time.Minute))
	lv := rep.Live
	hit := lv.Result.HitRate
	row := func(p string) replay.Row {
		r, ok := rep.RowOf(p, rep.Headline)
		if !ok {
			t.Fatalf("no row for %s", p)
		}
		return r
	}
	if l := row(eval.PolicyLoad); hit < l.HitMax {
		t.Errorf("ckf hit rate %.4f below load's %.4f", hit, l.HitMax)
	}
	if r := row(eval.PolicyRandom); hit < r.HitMax {
		t.Errorf("ckf hit rate %.4f below random's %.4f", hit, r.HitMax)
	}
	top := max(row(eval.PolicyDepth).HitMax, row(eval.PolicyCostOracle).HitMax)
	if hit > top*1.02 {
		t.Errorf("ckf hit rate %.4f above the oracles' best %.4f (+2%%)", hit, top)
	}
	if lv.Queries != rep.Requests || lv.Answered != lv.Queries || lv.FallBacks != 0 {
		t.Errorf("%d requests, %d queries, %d answered, %d placed without an answer", rep.Requests, lv.Queries, lv.Answered, lv.FallBacks)
	}
	// Exact answers throughout: the live run must have made the cost oracle's every choice.
	if lv.Exact == lv.Compared && lv.Workers.Exact == lv.Workers.Compared && !rep.SameAsCostOracle {
		t.Errorf("every answer exact, yet ckf's %d hit blocks differ from the same-seed cost oracle's", lv.Result.HitBlocks)
	}
	checkTwoStage(t, rep)
	if lv.Result.Completed != rep.Requests {
		t.Errorf("%d of %d requests completed", lv.Result.Completed, rep.Requests)
	}
	if un := lv.UnderReports - lv.UnderExplained; un != 0 {
		t.Errorf("%d under-reports not explained by visibility", un)
	}
	if lv.VisibleEvents == 0 || lv.NotSeen != 0 {
		t.Errorf("event to visible: %d seen, %d never", lv.VisibleEvents, lv.NotSeen)
	}
	if !strings.Contains(rep.Trace, "conversation") {
		t.Errorf("trace name %q", rep.Trace)
	}
}

// TestReplayViaBridge replays two minutes of the trace, 30 times compressed in time, with the
// engines' KV events through processor bridge's path (vLLM's ZeroMQ protocol, one bridge per
// worker): every query answered, every store seen, no unexplained under-report, with exact
// answers the cost oracle's choices, and the two-stage run's agreement (checkTwoStage).
func TestReplayViaBridge(t *testing.T) {
	o := options(t, 10*time.Minute, 2*time.Minute)
	o.ViaBridge, o.Seeds = true, 1
	rep := runReplay(t, o)
	lv := rep.Live
	if lv.Events != "bridge" {
		t.Errorf("events path %q", lv.Events)
	}
	if lv.Answered != rep.Requests || lv.Result.Completed != rep.Requests {
		t.Errorf("%d requests, %d answered, %d completed", rep.Requests, lv.Answered, lv.Result.Completed)
	}
	if lv.VisibleEvents == 0 || lv.NotSeen != 0 || lv.EventErrors != 0 {
		t.Errorf("event to visible: %d seen, %d never; %d events failed", lv.VisibleEvents, lv.NotSeen, lv.EventErrors)
	}
	if un := lv.UnderReports - lv.UnderExplained; un != 0 {
		t.Errorf("%d under-reports not explained by visibility", un)
	}
	if lv.Exact == lv.Compared && lv.Workers.Exact == lv.Workers.Compared && !rep.SameAsCostOracle {
		t.Errorf("every answer exact, yet ckf's %d hit blocks differ from the same-seed cost oracle's", lv.Result.HitBlocks)
	}
	checkTwoStage(t, rep)
}
