//go:build linux

package engine

import (
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/ckf-stream/ckf-stream/bridge/engineemu"
	"github.com/ckf-stream/ckf-stream/testenv"
)

// BenchmarkBridgeThroughput measures, on the real broker, how fast one bridge turns an engine's
// batches into KvEvents with the Python emulator publishing as fast as it can on the same
// machine (then the Go emulator, which is faster), and how the bridge fills gaps: a run with one
// batch in a hundred dropped from the live stream. One run whatever b.N (make bench-bridge runs
// it with -benchtime 1x); the figures are logged and reported as metrics.
func BenchmarkBridgeThroughput(b *testing.B) {
	t := b
	const batches = 20000
	s := newE2E(t)
	s.start()
	base := testenv.FreePortRun(t, 2)
	eng := startEmulator(t, s.logDir, "engine", 1, "--endpoint", fmt.Sprintf("tcp://*:%d", base),
		"--replay-endpoint", fmt.Sprintf("tcp://*:%d", base+1), "--wire", "map", "--hash-format", "int",
		"--seed", "21", "--block-size", strconv.Itoa(blockSize), "--capacity", "2000", "--cpu-fraction", "0")
	br := s.bridge("bridge", 201, 1, base, base+1)
	br.Start()
	br.WaitReady(time.Minute)
	eng.waitSubscribed(30 * time.Second)

	// Throughput: the emulator publishes as fast as it can; the bridge's batch counter says when
	// it has handled (converted and handed to the producer) every batch.
	start := time.Now()
	run := eng.do(map[string]any{"cmd": "run", "batches": batches})
	published := time.Since(start)
	testenv.WaitUntilEvery(t, 10*time.Millisecond, 5*time.Minute, "the bridge handled every batch", func() bool {
		v, err := br.metric("ckf_bridge_batches")
		return err == nil && v >= batches
	})
	handled := time.Since(start)
	events := run["events"].(float64)
	o := newOracle(engineModel{name: "engine", model: readModel(t, eng, s.logDir)})
	r, settled := s.converged(o, "the index answers the engine's model", 5*time.Minute)
	t.Logf("throughput: %d batches, %.0f events; emulator published them in %v (%.0f events/s); the bridge handled them in %v (%.0f events/s, %.0f batches/s); answers %+v %v later",
		batches, events, published.Round(time.Millisecond), events/published.Seconds(), handled.Round(time.Millisecond),
		events/handled.Seconds(), batches/handled.Seconds(), r, settled.Round(time.Millisecond))

	// Gap fill: one batch in a hundred dropped from the live stream (the last one included).
	const gapBatches = 5000
	first := int(eng.do(map[string]any{"cmd": "stats"})["seq"].([]any)[0].(float64))
	var drops []int
	for i := 99; i < gapBatches; i += 100 {
		drops = append(drops, first+i)
	}
	replayedBefore := counter(t, br, "ckf_bridge_replayed_batches")
	gapsBefore := counter(t, br, "ckf_bridge_gaps")
	start = time.Now()
	eng.do(map[string]any{"cmd": "run", "batches": gapBatches, "drop": drops})
	published = time.Since(start)
	o = newOracle(engineModel{name: "engine", model: readModel(t, eng, s.logDir)})
	r, settled = s.converged(o, "the index answers the engine's model after the gaps", 5*time.Minute)
	t.Logf("gap fill: %d batches published in %v with %d dropped from the live stream (the last included); the bridge counted %v gaps and replayed %v batches; answers %+v %v after the last batch",
		gapBatches, published.Round(time.Millisecond), len(drops), counter(t, br, "ckf_bridge_gaps")-gapsBefore,
		counter(t, br, "ckf_bridge_replayed_batches")-replayedBefore, r, settled.Round(time.Millisecond))
	if v := counter(t, br, "ckf_bridge_lost_batches"); v != 0 {
		t.Errorf("the bridge reports %v lost batches", v)
	}

	// The Go emulator (bridge/engineemu) in this process publishes faster than the Python one,
	// so a second bridge's rate is its own, not the emulator's.
	gbase := testenv.FreePortRun(t, 2)
	ge, err := engineemu.New(engineemu.Endpoint(fmt.Sprintf("tcp://127.0.0.1:%d", gbase)),
		engineemu.ReplayEndpoint(fmt.Sprintf("tcp://127.0.0.1:%d", gbase+1)), engineemu.Mode(engineemu.PubBind),
		engineemu.BlockSize(blockSize), engineemu.Seed(22), engineemu.Capacity(2000), engineemu.CPUFraction(0))
	if err != nil {
		t.Fatal(err)
	}
	defer ge.Close()
	gbr := s.bridge("bridge-go", 202, 1, gbase, gbase+1)
	gbr.Start()
	gbr.WaitReady(time.Minute)
	testenv.WaitUntil(t, 30*time.Second, "the second bridge subscribed", func() bool { return ge.Subscribed(0) })
	start = time.Now()
	if err := ge.Publish(batches, nil); err != nil {
		t.Fatal(err)
	}
	published = time.Since(start)
	testenv.WaitUntilEvery(t, 10*time.Millisecond, 5*time.Minute, "the second bridge handled every batch", func() bool {
		v, err := gbr.metric("ckf_bridge_batches")
		return err == nil && v >= batches
	})
	handled = time.Since(start)
	gevents := float64(ge.Stats().PublishedEvents)
	b.ReportMetric(gevents/handled.Seconds(), "bridge-events/s")
	b.ReportMetric(gevents/published.Seconds(), "go-emulator-events/s")
	t.Logf("throughput (Go emulator): %d batches, %.0f events published in %v (%.0f events/s); the bridge handled them in %v (%.0f events/s, %.0f batches/s)",
		batches, gevents, published.Round(time.Millisecond), gevents/published.Seconds(), handled.Round(time.Millisecond),
		gevents/handled.Seconds(), batches/handled.Seconds())
}
