package query_test

import (
	"testing"
	"time"

	"github.com/ckf-stream/ckf-stream/ckf"
	"github.com/ckf-stream/ckf-stream/streams/query"
)

// TestNeverMatchWindow: the share counts only the window's searches (the newest sample at least
// a window old is the base), needs MinSearches of them, rises at the share and falls when
// matches come back; lanes are independent.
func TestNeverMatchWindow(t *testing.T) {
	n := query.NewNeverMatch(query.NeverMatchConfig{Window: 60 * time.Second, MinSearches: 10, Share: 0.999})
	t0 := time.Unix(1000, 0)
	var s, m [ckf.MaxLanes]uint64
	step := func(at time.Duration, searched, missed uint64) query.NeverMatchLane {
		s[3] += searched
		m[3] += missed
		s[4] += searched // lane 4 always matches
		return n.Observe(t0.Add(at), s, m)[3]
	}
	if l := step(0, 0, 0); l.Alarm || l.Searched != 0 {
		t.Fatalf("start: %+v", l)
	}
	if l := step(10*time.Second, 9, 9); l.Alarm || l.Searched != 9 {
		t.Fatalf("9 of 9 missed, under MinSearches: %+v", l)
	}
	if l := step(20*time.Second, 1, 1); !l.Alarm || l.Searched != 10 || l.MissShare() != 1 {
		t.Fatalf("10 of 10 missed: %+v", l)
	}
	if l := n.Observe(t0.Add(20*time.Second), s, m)[4]; l.Alarm || l.Searched != 10 || l.Missed != 0 {
		t.Fatalf("lane 4: %+v", l)
	}
	// One hit in the window lowers the share below 0.999.
	if l := step(30*time.Second, 10, 9); l.Alarm || l.Searched != 20 || l.Missed != 19 {
		t.Fatalf("a hit among the misses: %+v", l)
	}
	// At 95 s the samples older than 35 s are out of the window: the hit (at 30 s) is gone.
	if l := step(95*time.Second, 20, 20); !l.Alarm || l.Searched != 20 || l.Missed != 20 {
		t.Fatalf("the window past the hit: %+v", l)
	}
	if l := step(200*time.Second, 0, 0); l.Alarm || l.Searched != 0 {
		t.Fatalf("no search in the window: %+v", l)
	}
}
