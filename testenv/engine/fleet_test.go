//go:build linux

package engine

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ckf-stream/ckf-stream/bridge/engineemu"
	"github.com/ckf-stream/ckf-stream/testenv"
)

// fleet is n Go engine emulators, cycling through the engine release lines, and the one
// `processor bridge` that serves them all from an engines file (bridge.engines_file).
type fleet struct {
	engines []*engineemu.Engine
	names   []string
	bridge  *proc
}

// newFleet starts n engines (binding loopback ports) and prepares (does not start) their bridge.
func newFleet(t testing.TB, s *e2e, name string, n, capacity int) *fleet {
	t.Helper()
	f := &fleet{}
	var file strings.Builder
	file.WriteString("engines:\n")
	for i := range n {
		rel := engineemu.Releases[i%len(engineemu.Releases)]
		ports := testenv.FreePorts(t, 2)
		opts := append(rel.Opts(), engineemu.Endpoint(fmt.Sprintf("tcp://127.0.0.1:%d", ports[0])), engineemu.Mode(engineemu.PubBind),
			engineemu.ReplayEndpoint(fmt.Sprintf("tcp://127.0.0.1:%d", ports[1])), engineemu.Topic("kv@"+rel.Name),
			engineemu.BlockSize(blockSize), engineemu.Capacity(capacity), engineemu.Seed(uint64(1000+i)),
			engineemu.LoRA("adapter-a", 7, 0.2))
		e, err := engineemu.New(opts...)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = e.Close() })
		f.engines = append(f.engines, e)
		f.names = append(f.names, fmt.Sprintf("%s#%d", rel.Name, i))
		pub, replay := e.Endpoints(0)
		fmt.Fprintf(&file, "  - {worker_id: %d, endpoint: %q, replay_endpoint: %q}\n", 301+i, pub, replay)
	}
	path := filepath.Join(t.TempDir(), "engines.yaml")
	if err := os.WriteFile(path, []byte(file.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	f.bridge = newProc(t, s.logDir, name, append(slices.Clone(s.common), "CKF_BRIDGE_ENGINES_FILE="+path,
		"CKF_BRIDGE_LORA_NAMES=7=adapter-a", "CKF_BRIDGE_TOPIC=kv@", fmt.Sprintf("CKF_BRIDGE_BLOCK_SIZE=%d", blockSize),
		"CKF_BRIDGE_IDLE_RECHECK=500ms"), "bridge")
	return f
}

// waitSubscribed waits until every engine's PUB socket has the bridge's subscription.
func (f *fleet) waitSubscribed(t testing.TB) {
	t.Helper()
	testenv.WaitUntilEvery(t, 20*time.Millisecond, time.Minute, "every engine has the bridge's subscription", func() bool {
		for _, e := range f.engines {
			if !e.Subscribed(0) {
				return false
			}
		}
		return true
	})
}

func (f *fleet) models() []engineModel {
	out := make([]engineModel, len(f.engines))
	for i, e := range f.engines {
		out[i] = engineModel{name: f.names[i], model: e.Model()}
	}
	return out
}

// each runs publish on every engine at once and returns the first error.
func (f *fleet) each(publish func(e *engineemu.Engine) error) error {
	errs := make(chan error, len(f.engines))
	var wg sync.WaitGroup
	for _, e := range f.engines {
		wg.Add(1)
		go func() { defer wg.Done(); errs <- publish(e) }()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// One `processor bridge` serves many engines (bridge.engines_file), each with its own sockets,
// order and gap fill, and a kill -9 of that process while every engine publishes loses nothing
// the engines' replay buffers still hold: after the restart (which resumes each engine from its
// records in Kafka) every answer equals the union of the engines' exact models, and no engine
// reports a lost batch. Eight engines, one of each release line.
func TestBridgeFleetKill9LosesNothing(t *testing.T) {
	s := newE2E(t)
	s.start()
	f := newFleet(t, s, "fleet", len(engineemu.Releases), 200)
	f.bridge.Start()
	f.bridge.WaitReady(time.Minute)
	f.waitSubscribed(t)

	// Gaps on every engine, the final batch included.
	if err := f.each(func(e *engineemu.Engine) error {
		return e.Publish(120, func(_ int, seq uint64) bool { return seq%30 == 7 || seq == 119 })
	}); err != nil {
		t.Fatal(err)
	}
	r, took := s.converged(newOracle(f.models()...), "the fleet's engines converged", 90*time.Second)
	t.Logf("gaps: %d engines, 120 batches each, 5 dropped each; answers %+v within %v", len(f.engines), r, took.Round(time.Millisecond))

	// kill -9 while every engine publishes.
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	done := make(chan error, 1)
	go func() { done <- f.each(func(e *engineemu.Engine) error { return e.Run(ctx, 100) }) }()
	before := counter(t, f.bridge, "ckf_bridge_batches")
	testenv.WaitUntilEvery(t, 20*time.Millisecond, time.Minute, "the fleet takes live batches", func() bool {
		v, err := f.bridge.metric("ckf_bridge_batches")
		return err == nil && v >= before+float64(20*len(f.engines))
	})
	f.bridge.Kill9()
	f.bridge.Start()
	f.bridge.WaitReady(time.Minute)
	testenv.WaitUntilEvery(t, 20*time.Millisecond, time.Minute, "the restarted fleet takes live batches", func() bool {
		v, err := f.bridge.metric("ckf_bridge_batches")
		return err == nil && v >= float64(20*len(f.engines))
	})
	stop()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	r, took = s.converged(newOracle(f.models()...), "the fleet converged after kill -9", 120*time.Second)
	t.Logf("kill -9 of the fleet's process mid-stream: answers %+v within %v", r, took.Round(time.Millisecond))
	if v := counter(t, f.bridge, "ckf_bridge_lost_batches"); v != 0 {
		t.Errorf("the fleet reports %v lost batches", v)
	}
}

// BenchmarkBridgeFleet64 measures one `processor bridge` serving 64 engines (Go emulators in
// the benchmark's process, cycling through the release lines) on the real broker: the memory
// each engine adds to the process (its resident set with 64 engines against one with a single
// engine, both idle after start), and the events per second and per CPU-second of the bridge
// process while all 64 engines publish as fast as they can. No relay or indexer runs, so the
// bridge shares the machine with the engines and the broker only. One run whatever b.N.
func BenchmarkBridgeFleet64(b *testing.B) {
	const engines, batches = 64, 1500
	s := newE2E(b)
	s.createTopics()
	one := newFleet(b, s, "fleet-1", 1, 2000)
	one.bridge.Start()
	one.bridge.WaitReady(time.Minute)
	one.waitSubscribed(b)
	rss1, err := testenv.ResidentBytesOf(one.bridge.Pid())
	if err != nil {
		b.Fatal(err)
	}
	f := newFleet(b, s, "fleet-64", engines, 2000)
	f.bridge.Start()
	f.bridge.WaitReady(time.Minute)
	f.waitSubscribed(b)
	rss64, err := testenv.ResidentBytesOf(f.bridge.Pid())
	if err != nil {
		b.Fatal(err)
	}
	cpu0, err := testenv.CPUSeconds(f.bridge.Pid())
	if err != nil {
		b.Fatal(err)
	}
	start := time.Now()
	if err := f.each(func(e *engineemu.Engine) error { return e.Publish(batches, nil) }); err != nil {
		b.Fatal(err)
	}
	published := time.Since(start)
	testenv.WaitUntilEvery(b, 20*time.Millisecond, 5*time.Minute, "the fleet handled every batch", func() bool {
		v, err := f.bridge.metric("ckf_bridge_batches")
		return err == nil && v >= engines*batches
	})
	handled := time.Since(start)
	cpu1, err := testenv.CPUSeconds(f.bridge.Pid())
	if err != nil {
		b.Fatal(err)
	}
	rssBusy, _ := testenv.ResidentBytesOf(f.bridge.Pid())
	var events int64
	for _, e := range f.engines {
		st := e.Stats()
		events += st.Stored + st.Removed + st.Cleared
	}
	perEngine := float64(rss64-rss1) / (engines - 1)
	b.ReportMetric(float64(events)/handled.Seconds(), "events/s")
	b.ReportMetric(float64(events)/(cpu1-cpu0), "events/cpu-s")
	b.ReportMetric(perEngine/1024, "KiB/engine")
	b.ReportMetric(float64(rssBusy)/(1<<20), "MiB-busy")
	b.Logf("%d engines, %d batches each, %d events: published in %v, handled in %v (%.0f events/s, %.0f events per bridge CPU-second); RSS idle: 1 engine %.1f MiB, %d engines %.1f MiB (%.0f KiB per engine), after the run %.1f MiB; lost %v",
		engines, batches, events, published.Round(time.Millisecond), handled.Round(time.Millisecond), float64(events)/handled.Seconds(),
		float64(events)/(cpu1-cpu0), float64(rss1)/(1<<20), engines, float64(rss64)/(1<<20), perEngine/1024, float64(rssBusy)/(1<<20),
		counter(b, f.bridge, "ckf_bridge_lost_batches"))
}
