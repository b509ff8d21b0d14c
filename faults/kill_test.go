//go:build linux

package faults

import (
	mrand "math/rand/v2"
	"slices"
	"sort"
	"testing"
	"time"

	"github.com/ckf-stream/ckf-stream/testenv"
)

// TestKillNine kills, at seeded random moments, either the victim indexer replica or one of the
// relays with SIGKILL while the engines keep writing, restarts it, and goes on; sometimes it
// kills the victim again while it is still starting. The reference replica is never touched.
// The relays checkpoint their state about once a second (relayCheckpointEveryEvents), so relay
// kills land before, during and after checkpoint transactions and in the tail replays after a
// restore. At the end the victim answers exactly like the reference at the same installed
// sequences, every relay holds exactly the model's resident blocks, and no replica answers less
// than the resident prefix of any query (no acknowledged KV event is lost). At least one relay
// restart must have restored a checkpoint (else the run did not cover the restore path), and no
// restart may have rejected one: a kill aborts the checkpoint transaction it interrupts, so every
// committed checkpoint is whole.
func TestKillNine(t *testing.T) {
	seeds := testenv.Brokers(t)
	seed := uint64(envInt(t, "FAULTS_SEED", 1))
	iters := envInt(t, "FAULTS_ITERATIONS", 20)
	hold := [2]time.Duration{200 * time.Millisecond, 1500 * time.Millisecond}
	if *longMode {
		iters *= 5
		hold = [2]time.Duration{500 * time.Millisecond, 5 * time.Second}
	}
	t.Logf("FAULTS_SEED=%d FAULTS_ITERATIONS=%d long=%v", seed, iters, *longMode)

	s := newSystem(t, seeds, 2, 2)
	s.startAll()
	ref, victimIx := s.indexes[0], s.indexes[1]
	w := s.newWriter(seed, 150)
	w.run()

	rng := mrand.New(mrand.NewPCG(seed, 0x6b696c6c))
	type stats struct {
		injected, recovered int
		recovery            []time.Duration
		// restored counts the recovered relay restarts that started from a checkpoint;
		// rejected sums the checkpoints those restarts found unusable.
		restored, rejected int
	}
	counts := map[string]*stats{}
	victims := []*proc{victimIx, victimIx, s.relays[0], s.relays[1]} // the indexer half the time
	start := time.Now()
	for i := 0; i < iters; i++ {
		// The seeded random moment of the next kill: the fault schedule itself (the load runs
		// meanwhile), not a wait for an outcome; what happens next is waited for with waitReady.
		time.Sleep(hold[0] + time.Duration(rng.Int64N(int64(hold[1]-hold[0]))))
		v := victims[rng.IntN(len(victims))]
		st := counts[v.Name]
		if st == nil {
			st = &stats{}
			counts[v.Name] = st
		}
		v.Kill9()
		st.injected++
		v.Start()
		if rng.IntN(4) == 0 {
			// A second crash while the new incarnation replays, installs or writes its
			// start-up snapshot: a seeded random moment within its first 400 ms.
			time.Sleep(time.Duration(rng.Int64N(int64(400 * time.Millisecond))))
			v.Kill9()
			st.injected++
			v.Start()
		}
		d := v.WaitReady(2 * time.Minute)
		st.recovered++
		st.recovery = append(st.recovery, d)
		if slices.Contains(s.relays, v) {
			m := s.relayStarted(v, time.Minute)
			if m["ckf_relay_restored_from_checkpoint"] == 1 {
				st.restored++
			}
			st.rejected += int(sumMetrics(m, "ckf_relay_checkpoints_rejected_total"))
		}
		if !ref.Alive() {
			t.Fatalf("iteration %d: the reference replica died", i)
		}
		for _, r := range s.relays {
			if !r.Alive() {
				t.Fatalf("iteration %d: %s died", i, r.Name)
			}
		}
	}
	t.Logf("%d iterations in %v", iters, time.Since(start).Round(time.Millisecond))

	w.pause()
	seqs := s.relaySettled(w, 2*time.Minute)
	pages := s.replicasCaughtUp(seqs, 2*time.Minute)
	for l := range seqs {
		a, b := pages[0].Lanes[l], pages[1].Lanes[l]
		if a.InstalledSequence != b.InstalledSequence || a.Identity != b.Identity {
			t.Errorf("lane %d: reference at %d (%s), victim at %d (%s)", l, a.InstalledSequence, a.Identity, b.InstalledSequence, b.Identity)
		}
	}
	qs := w.queries(mrand.New(mrand.NewPCG(seed, 0x71)), 300)
	rep := s.compareAnswers(w, qs)

	injected, recovered, relayRestarts, restored, rejected := 0, 0, 0, 0, 0
	names := make([]string, 0, len(counts))
	for n := range counts {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		st := counts[n]
		injected += st.injected
		recovered += st.recovered
		slices.Sort(st.recovery)
		t.Logf("  %-10s kill -9: %d injected, %d restarts recovered; time to ready p50 %v max %v", n, st.injected, st.recovered,
			st.recovery[len(st.recovery)/2].Round(time.Millisecond), st.recovery[len(st.recovery)-1].Round(time.Millisecond))
	}
	var checkpoints []int
	for _, r := range s.relays {
		if st := counts[r.Name]; st != nil {
			relayRestarts += st.recovered
			restored += st.restored
			rejected += st.rejected
		}
		checkpoints = append(checkpoints, r.LogCount(checkpointCommittedLog))
	}
	t.Logf("  relays: %d restarts recovered, %d of them restored from a checkpoint, %d checkpoints rejected; checkpoints committed per relay (all incarnations) %v",
		relayRestarts, restored, rejected, checkpoints)
	t.Logf("SUMMARY kill9: seed %d, iterations %d, kills %d, restarts recovered %d/%d (relay restarts restored from a checkpoint %d/%d, checkpoints rejected %d, committed %v); "+
		"KV events sent %d, acknowledged %d, failed %d; "+
		"lanes at sequences %v; %d queries x %d replicas, %d lane probes (%d with a resident prefix, deepest %d): replica mismatches %d, answers below the model (lost) %d",
		seed, iters, injected, recovered, iters, restored, relayRestarts, rejected, checkpoints, w.sent.Load(), w.acked.Load(), w.failed.Load(), seqs,
		rep.queries, len(s.indexes), rep.probes, rep.nonZero, rep.deepest, rep.mismatches, rep.lost)
	if relayRestarts > 0 && restored == 0 {
		t.Errorf("none of the %d relay restarts restored a checkpoint: the run did not cover the checkpoint restore", relayRestarts)
	}
	if rejected != 0 {
		t.Errorf("relay restarts rejected %d checkpoints: a kill -9 left a committed checkpoint unusable (see the relays' logs)", rejected)
	}
	if w.failed.Load() != 0 {
		t.Errorf("%d KV events were not acknowledged (%v); the broker stayed up, so none should fail", w.failed.Load(), w.lastErr.Load())
	}
}
