//go:build linux

package faults

import (
	"context"
	"fmt"
	mrand "math/rand/v2"
	"path/filepath"
	"testing"
	"time"

	"github.com/ckf-stream/ckf-stream/testenv"
	"github.com/twmb/franz-go/pkg/kadm"
)

// TestBrokerRestartProcesses runs two relays and two replicas as processes on a private broker
// while the engines keep writing, then restarts the broker twice: a controlled restart (an
// operator's rolling restart) and a crash (SIGKILL of the JVM, then a start on the same data).
// Every process must ride through both without exiting; afterwards the relays hold exactly the
// model's resident blocks, both replicas serve every lane at the relays' last sequences, answer
// alike, and answer no less than the model (no acknowledged KV event lost). The relays checkpoint
// their state about once a second (relayCheckpointEveryEvents), so the broker faults hit
// checkpoint transactions; after each fault every relay must commit a checkpoint again.
func TestBrokerRestartProcesses(t *testing.T) {
	testenv.NeedKafkaJars(t)
	testenv.Brokers(t) // the jars come with the shared broker; fail early with the usual message
	seed := uint64(envInt(t, "FAULTS_SEED", 1))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	ports := testenv.FreePorts(t, 2)
	cfg := testenv.BrokerConfig{RunDir: filepath.Join(t.TempDir(), "kafka"), Port: ports[0], ControllerPort: ports[1]}
	b, err := testenv.StartBroker(ctx, cfg)
	if err != nil {
		t.Fatalf("private broker: %v", err)
	}
	t.Cleanup(func() { _ = b.Kill() })
	t.Logf("private broker at %s started in %v", b.Addr(), b.Startup.Round(time.Millisecond))

	s := newSystem(t, []string{b.Addr()}, 2, 2)
	s.startAll()
	w := s.newWriter(seed+200, 150)
	w.run()
	procs := append(append([]*proc{}, s.relays...), s.indexes...)
	pids := map[string]int{}
	for _, p := range procs {
		pids[p.Name] = p.Pid()
	}
	checkAlive := func(when string) {
		t.Helper()
		for _, p := range procs {
			if !p.Alive() || p.Pid() != pids[p.Name] {
				t.Fatalf("%s: %s exited (%v):\n%s", when, p.Name, p.ExitError(), testenv.Tail(p.LogPath(p.Runs()), 20))
			}
		}
	}
	// rodeThrough waits for the proof that every process rode through a broker fault, then
	// checks that none exited: the writer's events are acknowledged again, every relay commits
	// a transaction and a state checkpoint on the broker as it is now, and every replica applies
	// each lane's records up to the lane's last stable offset as listed after those commits. A
	// process that the fault made exit fails the wait at once.
	admin := kadm.NewClient(s.client())
	rodeThrough := func(when string) {
		t.Helper()
		w.waitAcked(w.acked.Load()+150, 2*time.Minute)
		base := make([]float64, len(s.relays))
		baseCheckpoints := make([]float64, len(s.relays))
		for i, r := range s.relays {
			m, err := r.Metrics()
			if err != nil {
				t.Fatalf("%s: %s: %v", when, r.Name, err)
			}
			base[i], baseCheckpoints[i] = sumMetrics(m, "ckf_relay_transactions_total"), sumMetrics(m, "ckf_relay_checkpoints_total")
		}
		testenv.WaitUntilEvery(t, scrapePoll, 2*time.Minute, when+": every relay commits a transaction and a checkpoint", func() bool {
			checkAlive(when)
			for i, r := range s.relays {
				m, err := r.Metrics()
				if err != nil || sumMetrics(m, "ckf_relay_transactions_total") <= base[i] || sumMetrics(m, "ckf_relay_checkpoints_total") <= baseCheckpoints[i] {
					return false
				}
			}
			return true
		})
		lctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
		lso, err := testenv.ListCommittedOffsets(lctx, admin, s.topics.Lanes)
		cancel()
		if err != nil {
			t.Fatalf("%s: %v", when, err)
		}
		var last []lanesPage
		testenv.WaitUntilEvery(t, scrapePoll, 2*time.Minute, when+": every replica applies every lane up to its last stable offset", func() bool {
			checkAlive(when)
			last = last[:0]
			for _, ix := range s.indexes {
				page, err := ix.lanes()
				if err != nil || len(page.Lanes) != len(s.relays) {
					return false
				}
				for _, l := range page.Lanes {
					if o, _ := lso.Lookup(s.topics.Lanes, int32(l.Lane)); l.AppliedOffset < o.Offset-1 {
						return false
					}
				}
				last = append(last, page)
			}
			return true
		}, func() string { return fmt.Sprintf("pages %+v", last) })
		checkAlive(when)
	}

	// The two broker faults come at seeded random moments: the fault schedule itself (the load
	// runs meanwhile), not a wait for an outcome.
	rng := mrand.New(mrand.NewPCG(seed, 0x62726b))
	time.Sleep(time.Second + time.Duration(rng.Int64N(int64(2*time.Second))))

	start := time.Now()
	if err := b.Restart(ctx); err != nil {
		t.Fatalf("restart: %v\n%s", err, b.LogTail(20))
	}
	t.Logf("controlled restart: broker back after %v (start-up %v)", time.Since(start).Round(time.Millisecond), b.Startup.Round(time.Millisecond))
	rodeThrough("after the controlled restart")
	time.Sleep(time.Duration(rng.Int64N(int64(2 * time.Second)))) // the crash's moment

	start = time.Now()
	if err := b.Kill(); err != nil {
		t.Fatalf("kill -9 of the broker: %v", err)
	}
	time.Sleep(time.Duration(rng.Int64N(int64(time.Second)))) // how long the broker stays down
	restart := cfg
	restart.KeepData = true
	nb, err := testenv.StartBroker(ctx, restart)
	if err != nil {
		t.Fatalf("start after the crash: %v", err)
	}
	b = nb
	t.Cleanup(func() { _ = nb.Kill() })
	t.Logf("crash: broker back after %v (start-up %v)", time.Since(start).Round(time.Millisecond), nb.Startup.Round(time.Millisecond))
	rodeThrough("after the crash")

	w.pause()
	seqs := s.relaySettled(w, 2*time.Minute)
	pages := s.replicasCaughtUp(seqs, 2*time.Minute)
	rep := s.compareAnswers(w, w.queries(mrand.New(mrand.NewPCG(seed, 0x73)), 200))
	checkAlive("at the end")
	var recoveries uint64
	for _, page := range pages {
		for _, l := range page.Lanes {
			recoveries += l.Recoveries
		}
	}
	relayRecoveries := 0.0
	var checkpoints []float64
	for _, r := range s.relays {
		m, err := r.Metrics()
		if err != nil {
			t.Fatalf("%s: %v", r.Name, err)
		}
		relayRecoveries += m["ckf_relay_recoveries_total"]
		checkpoints = append(checkpoints, sumMetrics(m, "ckf_relay_checkpoints_total"))
	}
	t.Logf("SUMMARY broker: 2 broker faults (controlled restart, kill -9), processes alive %d/%d without restart; KV events sent %d, acknowledged %d, failed %d; "+
		"relay recoveries %v, relay checkpoints committed %v, lane recoveries %d; lanes at sequences %v; %d queries, %d probes, replica mismatches %d, answers below the model %d",
		countAlive(procs), len(procs), w.sent.Load(), w.acked.Load(), w.failed.Load(), relayRecoveries, checkpoints, recoveries, seqs, rep.queries, rep.probes, rep.mismatches, rep.lost)
}
