package query

import (
	"errors"
	"testing"
	"time"
)

// TestPartitionRoutes walks the routes through a dead member's partitions on a clock of its own:
// a stalled call suspects its partition and is resent to one answered while it waited; later
// calls keyed there go elsewhere except one probe per interval; an answer there clears it; the
// budget bounds resends; the evidence of one group (DC) does not move another's calls.
func TestPartitionRoutes(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	r := NewPartitionRoutes(time.Second)
	for p := int32(0); p < 4; p++ { // every partition answered before the trouble
		r.Answered(p, 4, 0, at(0))
	}
	// A call sent to 0 at 100 ms waits; partition 3 answers another call meanwhile (at 200 ms).
	r.Answered(3, 4, 0, at(200))
	if p, err := r.Hedge([]int32{0}, 4, nil, at(100)); err != nil || p != 3 {
		t.Fatalf("resend of the call stalled on 0: partition %d (%v), want 3, the one answered while it waited", p, err)
	}
	// Calls keyed on 0: the first is a probe (0 was never probed), the next ones go elsewhere.
	if p, redirected := r.First(0, 4, nil, at(400)); p != 0 || redirected {
		t.Fatalf("first call on suspected 0: %d (redirected %v), want a probe of 0", p, redirected)
	}
	for i := range 4 {
		p, redirected := r.First(0, 4, nil, at(500+i))
		if !redirected || p == 0 {
			t.Fatalf("call %d keyed on suspected 0 went to %d (redirected %v)", i, p, redirected)
		}
	}
	if p, redirected := r.First(1, 4, nil, at(600)); p != 1 || redirected {
		t.Fatalf("call keyed on healthy 1 went to %d (redirected %v)", p, redirected)
	}
	if p, redirected := r.First(0, 4, nil, at(1400)); p != 0 || redirected {
		t.Fatalf("call on 0 a probe interval later: %d (redirected %v), want the next probe", p, redirected)
	}
	r.Answered(0, 4, 0, at(1450)) // the probe answered without a resend: 0 serves again
	if p, redirected := r.First(0, 4, nil, at(1500)); p != 0 || redirected {
		t.Fatalf("call on 0 after its probe was answered: %d (redirected %v)", p, redirected)
	}
	// Every other partition tried: no resend.
	if p, err := r.Hedge([]int32{0, 1, 2, 3}, 4, nil, at(2000)); !errors.Is(err, ErrNoHedgePartition) {
		t.Fatalf("resend with every partition tried: %d, %v", p, err)
	}

	// Under load a slow answer suspects a live partition (2, at 3000 ms) and the dead one (1) is
	// suspected too: a call stalled on 1 still goes to 2, which answered while it waited, not to
	// 3, which has not answered since.
	d := NewPartitionRoutes(time.Second)
	for p := int32(0); p < 4; p++ {
		d.Answered(p, 4, 0, at(0))
	}
	d.Hedge([]int32{2}, 4, nil, at(3000))
	d.Hedge([]int32{0}, 4, nil, at(3000))
	d.Answered(2, 4, 0, at(3100)) // redirected calls answered on 2
	d.Hedge([]int32{2}, 4, nil, at(3150))
	if p, err := d.Hedge([]int32{1}, 4, nil, at(3050)); err != nil || p != 2 {
		t.Fatalf("resend of the call stalled on 1: %d (%v), want 2, suspected but answered while it waited", p, err)
	}

	// The budget: a full burst of resends, then one per five first sends.
	b := NewPartitionRoutes(time.Second)
	sent := 0
	for i := range 100 {
		if _, err := b.Hedge([]int32{int32(i % 2)}, 64, nil, at(i)); err == nil {
			sent++
		} else if !errors.Is(err, ErrNoHedgeBudget) {
			t.Fatal(err)
		}
		for p := int32(0); p < 2; p++ {
			b.Answered(p, 64, 0, at(i)) // clear the suspicion so that only the budget refuses
		}
	}
	if sent != hedgeTokensMax {
		t.Fatalf("%d resends without first sends, want the burst of %d", sent, hedgeTokensMax)
	}
	for i := range 5 {
		b.First(5, 64, nil, at(200+i))
	}
	if _, err := b.Hedge([]int32{0}, 64, nil, at(300)); err != nil {
		t.Fatalf("no resend after five first sends: %v", err)
	}

	// Groups: DC 7's stall on partition 1 moves DC 7's calls, not DC 8's.
	g := NewPartitionRoutes(time.Second)
	g.Hedge([]int32{1}, 4, []uint64{7}, at(0))
	g.First(1, 4, []uint64{7}, at(10)) // the probe
	if p, redirected := g.First(1, 4, []uint64{7}, at(20)); !redirected || p == 1 {
		t.Fatalf("DC 7's call keyed on its suspected 1 went to %d", p)
	}
	if p, redirected := g.First(1, 4, []uint64{8}, at(30)); redirected || p != 1 {
		t.Fatalf("DC 8's call keyed on 1 went to %d (redirected %v)", p, redirected)
	}
}
