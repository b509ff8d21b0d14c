package loadgen_test

import (
	"errors"
	"math/rand/v2"
	"reflect"
	"testing"

	"github.com/ckf-stream/ckf-stream/ckf"
	"github.com/ckf-stream/ckf-stream/ckf/producer"
	"github.com/ckf-stream/ckf-stream/loadgen"
	"github.com/ckf-stream/ckf-stream/schemas"
	"github.com/ckf-stream/ckf-stream/streams/relay"
)

func events(t *testing.T, cfg loadgen.Config, n int) []loadgen.Event {
	t.Helper()
	w, err := loadgen.NewWorkload(cfg)
	if err != nil {
		t.Fatal(err)
	}
	out := make([]loadgen.Event, n)
	for i := range out {
		out[i] = w.NextEvent()
	}
	return out
}

// TestWorkloadDeterministic: one seed, one stream; another seed, another stream.
func TestWorkloadDeterministic(t *testing.T) {
	cfg := loadgen.Config{Seed: 42, DCs: []uint64{0xa, 0xb, 0xc}, WorkerCapacity: 300}
	a, b := events(t, cfg, 5000), events(t, cfg, 5000)
	if !reflect.DeepEqual(a, b) {
		t.Fatal("two workloads of one seed differ")
	}
	cfg.Seed = 43
	if reflect.DeepEqual(a, events(t, cfg, 5000)) {
		t.Fatal("two seeds gave the same stream")
	}
	// Queries drawn with equal generators after equal events are equal too.
	wa, _ := loadgen.NewWorkload(cfg)
	wb, _ := loadgen.NewWorkload(cfg)
	ra, rb := rand.New(rand.NewPCG(1, 1)), rand.New(rand.NewPCG(1, 1))
	for i := 0; i < 500; i++ {
		wa.NextEvent()
		wb.NextEvent()
		if qa, qb := wa.NextQuery(ra), wb.NextQuery(rb); !reflect.DeepEqual(qa, qb) {
			t.Fatalf("query %d differs: %+v vs %+v", i, qa, qb)
		}
	}
}

// TestWorkloadIsValidEngineOutput applies the stream to one exact producer state per DC, as the
// relays do: no event may be rejected (parents exist, removals name stored blocks, event ids
// are in order), and the mix holds every kind of event.
func TestWorkloadIsValidEngineOutput(t *testing.T) {
	dcs := []uint64{1, 2, 3, 4}
	cfg := loadgen.Config{Seed: 7, DCs: dcs, WorkerCapacity: 400, Clear: 0.01}
	w, err := loadgen.NewWorkload(cfg)
	if err != nil {
		t.Fatal(err)
	}
	states := map[uint64]*producer.DcState{}
	for _, dc := range dcs {
		if states[dc], err = producer.NewDcState(ckf.NewCkfConfig(1 << 14)); err != nil {
			t.Fatal(err)
		}
	}
	kinds := map[schemas.KvEventKind]int{}
	lastID := map[uint64]uint64{}
	for i := 0; i < 20_000; i++ {
		ev := w.NextEvent()
		kinds[ev.KV.Kind]++
		if ev.KV.EventID != lastID[ev.KV.WorkerID]+1 {
			t.Fatalf("event %d: worker %d event id %d after %d", i, ev.KV.WorkerID, ev.KV.EventID, lastID[ev.KV.WorkerID])
		}
		lastID[ev.KV.WorkerID] = ev.KV.EventID
		if got := dcs[ev.DCIndex]; got != ev.DC {
			t.Fatalf("event %d: DC %d at index %d", i, ev.DC, ev.DCIndex)
		}
		out := states[ev.DC].ApplyEvent(relay.RouterEventOf(&ev.KV))
		if out.FirstError != nil && !errors.Is(out.FirstError, ckf.ErrCapacityExhausted) {
			t.Fatalf("event %d (%s of worker %d): %v", i, ev.KV.Kind, ev.KV.WorkerID, out.FirstError)
		}
	}
	st := w.Stats()
	if kinds[schemas.KvStoredEvent] == 0 || kinds[schemas.KvRemovedEvent] == 0 || kinds[schemas.KvClearedEvent] == 0 ||
		st.Branches == 0 || st.Migrations == 0 || st.Evictions == 0 {
		t.Fatalf("the mix lacks something: kinds %v, stats %+v", kinds, st)
	}
	t.Logf("20,000 events: %v; %+v", kinds, st)
}

// TestQueriesFindCachedPrefixes: queries for live conversations match blocks the engines stored,
// by hashes and by tokens alike.
func TestQueriesFindCachedPrefixes(t *testing.T) {
	cfg := loadgen.Config{Seed: 3, DCs: []uint64{1}, WorkersPerDC: 1, WorkerCapacity: 1 << 20}
	w, err := loadgen.NewWorkload(cfg)
	if err != nil {
		t.Fatal(err)
	}
	stored := map[uint64]bool{}
	for i := 0; i < 300; i++ {
		ev := w.NextEvent()
		for _, b := range ev.KV.Stored.Blocks {
			stored[b.TokensHash] = true
		}
	}
	rng := rand.New(rand.NewPCG(5, 5))
	var byHashes, byTokens, hits int
	for i := 0; i < 200; i++ {
		q := w.NextQuery(rng)
		var local []uint64
		switch q.Request.Input {
		case schemas.InputLocalBlockHashes:
			byHashes++
			local = q.Request.Hashes.AppendTo(nil)
		case schemas.InputTokenIDs:
			byTokens++
			for _, h := range ckf.TokenBlockHashes(q.Request.Tokens.AppendTo(nil), int(q.Request.BlockSize), ckf.BlockSaltSeed("", "")) {
				local = append(local, uint64(h))
			}
		}
		if len(local) != q.Blocks {
			t.Fatalf("query %d: %d blocks, says %d", i, len(local), q.Blocks)
		}
		if stored[local[0]] {
			hits++
		}
		if stored[local[len(local)-1]] {
			t.Fatalf("query %d: its new message is already cached", i)
		}
	}
	if byHashes == 0 || byTokens == 0 || hits < 150 {
		t.Fatalf("by hashes %d, by tokens %d, first block cached in %d of 200", byHashes, byTokens, hits)
	}
}

func TestWorkloadConfigErrors(t *testing.T) {
	for _, cfg := range []loadgen.Config{
		{},
		{DCs: []uint64{1, 1}},
		{DCs: []uint64{1}, TurnBlocks: [2]int{3, 2}},
		{DCs: []uint64{1}, Branch: 2},
	} {
		if _, err := loadgen.NewWorkload(cfg); !errors.Is(err, loadgen.ErrConfig) {
			t.Errorf("%+v: %v", cfg, err)
		}
	}
}

// BenchmarkNextEvent is the cost of generating one engine event (four DCs, default mix).
func BenchmarkNextEvent(b *testing.B) {
	w, err := loadgen.NewWorkload(loadgen.Config{Seed: 1, DCs: []uint64{1, 2, 3, 4}})
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		w.NextEvent()
	}
}

// TestNamespaceSaltsTheBlocks: the same seed with another namespace is the same workload shape
// on other blocks (no local hash in common), and its token queries carry the namespace, so that
// an earlier run's state cannot answer a later run's queries; the report flags a run none of
// whose answered queries found a block.
func TestNamespaceSaltsTheBlocks(t *testing.T) {
	cfg := loadgen.Config{Seed: 7, DCs: []uint64{0xa, 0xb}, TokenQueries: 1}
	a, err := loadgen.NewWorkload(cfg)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Namespace = "run-2"
	b, err := loadgen.NewWorkload(cfg)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[uint64]bool{}
	var na, nb int
	for i := 0; i < 200; i++ {
		ea, eb := a.NextEvent(), b.NextEvent()
		if ea.DC != eb.DC || ea.KV.Kind != eb.KV.Kind {
			t.Fatalf("event %d: the shapes differ: %+v / %+v", i, ea, eb)
		}
		for _, bl := range ea.KV.Stored.Blocks {
			seen[bl.TokensHash] = true
			na++
		}
		for _, bl := range eb.KV.Stored.Blocks {
			if seen[bl.TokensHash] {
				t.Fatalf("event %d: block hash %#x in both namespaces", i, bl.TokensHash)
			}
			nb++
		}
	}
	if na == 0 || na != nb {
		t.Fatalf("%d and %d stored blocks", na, nb)
	}
	if q := b.NextQuery(rand.New(rand.NewPCG(1, 2))); q.Request.Input == schemas.InputTokenIDs && q.Request.CacheNamespace != "run-2" {
		t.Errorf("token query namespace %q", q.Request.CacheNamespace)
	}
	if !(loadgen.Report{EventAcks: 10, OK: 5}).NoHitsFromThisRun() || (loadgen.Report{EventAcks: 10, OK: 5, Hits: 1}).NoHitsFromThisRun() {
		t.Error("NoHitsFromThisRun")
	}
}
