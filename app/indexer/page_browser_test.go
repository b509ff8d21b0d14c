package indexer_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/ckf-stream/ckf-stream/app/indexer"
	"github.com/uber-go/tally/v4"
)

// browserBinaries are the names a Chromium binary goes by (Debian's package installs chromium).
var browserBinaries = []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable", "headless-shell"}

// chromiumFor returns the path of a Chromium binary. Without one the test skips, unless
// CKF_REQUIRE_BROWSER=1 (make test sets it; .ci/run installs Debian's chromium).
func chromiumFor(t *testing.T) string {
	t.Helper()
	for _, name := range browserBinaries {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("CKF_REQUIRE_BROWSER") == "1" {
		t.Fatalf("no Chromium binary (%s) on the PATH, and CKF_REQUIRE_BROWSER=1: apt-get install chromium", strings.Join(browserBinaries, ", "))
	}
	t.Skipf("no Chromium binary (%s) on the PATH: the lane page's browser test needs one (CKF_REQUIRE_BROWSER=1 makes this a failure)", strings.Join(browserBinaries, ", "))
	return ""
}

// pageAgeOf reads an age as the page writes it ("40 ms", "1.5 s", "2 min 3 s").
func pageAgeOf(t *testing.T, s string) time.Duration {
	t.Helper()
	var v float64
	var n1, n2 int
	switch {
	case strings.HasSuffix(s, " ms"):
		if _, err := fmt.Sscanf(s, "%d ms", &n1); err == nil {
			return time.Duration(n1) * time.Millisecond
		}
	case strings.Contains(s, " min "):
		if _, err := fmt.Sscanf(s, "%d min %d s", &n1, &n2); err == nil {
			return time.Duration(n1)*time.Minute + time.Duration(n2)*time.Second
		}
	case strings.HasSuffix(s, " s"):
		if _, err := fmt.Sscanf(s, "%g s", &v); err == nil {
			return time.Duration(v * float64(time.Second))
		}
	}
	t.Fatalf("age %q is not an age as the page writes it", s)
	return 0
}

// pageRow is one lane row as the browser renders it.
type pageRow struct {
	Lane   string   `json:"lane"`
	State  string   `json:"state"`
	Answer string   `json:"answer"`
	Age    string   `json:"age"`
	Alarms []string `json:"alarms"`
	Shown  bool     `json:"shown"` // the row has a rendered box (not hidden, not zero-sized)
}

// readRowsJS reads every lane row of the rendered page: its data attributes, the text of its
// age cell and of each alarm, as the browser lays them out.
const readRowsJS = `JSON.stringify(Array.from(document.querySelectorAll('tbody tr[data-lane]')).map(tr => ({
	lane: tr.dataset.lane, state: tr.cells[2].innerText.trim(), answer: tr.cells[3].innerText.trim(),
	age: tr.cells[4].innerText.trim(),
	alarms: Array.from(tr.cells[5].querySelectorAll('li')).map(li => li.innerText.trim()),
	shown: tr.getBoundingClientRect().height > 0 && getComputedStyle(tr).visibility === 'visible',
})))`

// TestLanePageInABrowser reads the lane page (GET /) as a person sees it, in headless Chromium:
// every configured lane's state, what answers say of it, its age and its alarms are rendered;
// the page reloads itself (the server sees requests the test never made); and when lane 0's
// relay stops (in the test, the lane source drops the lane from the eligible lanes and its as_of
// stays where the relay left it), the page shows it degraded and stale, with its alarm, after
// its own reload. It writes a screenshot of each state under t.TempDir() (and into
// CKF_LANE_PAGE_SHOTS when set, to look at them).
func TestLanePageInABrowser(t *testing.T) {
	bin := chromiumFor(t)
	tb := newTable(t)
	now := time.Now()
	tb.asOf[0].Store(now.Add(-40 * time.Millisecond).UnixMicro())
	tb.asOf[1].Store(now.Add(-1500 * time.Millisecond).UnixMicro())
	tb.incomplete.Store(0b10) // lane 1's DC reports omitted blocks (table.statuses)
	// Lane 1's first blocks never match: 60 queries of hashes no DC holds over one window.
	clock := now
	sample := indexer.WatchNeverMatch(tb.api, &tb.firstBlocks, 0b10_0011, func() time.Time { return clock }, tally.NoopScope)
	sample()
	for i := 0; i < 60; i++ {
		rec := httptest.NewRecorder()
		tb.mux.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/v1/prefix-matches",
			strings.NewReader(fmt.Sprintf(`{"local_block_hashes": [%d, 2, 3], "lane_mask": 2}`, 9000+i))))
		if rec.Code != http.StatusOK {
			t.Fatalf("query %d: %d %s", i, rec.Code, rec.Body)
		}
		clock = clock.Add(time.Second)
		if i%5 == 4 {
			sample()
		}
	}

	var pageLoads atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/" {
			pageLoads.Add(1)
		}
		tb.mux.ServeHTTP(w, r)
	}))
	defer srv.Close()

	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(bin), chromedp.WindowSize(1600, 700))
	if os.Geteuid() == 0 {
		opts = append(opts, chromedp.NoSandbox) // Chromium refuses to run as root with its sandbox
	}
	// The deadline bounds a browser that never starts or a page that never changes; nothing waits
	// for it otherwise.
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	actx, cancelAlloc := chromedp.NewExecAllocator(ctx, opts...)
	defer cancelAlloc()
	bctx, cancelBrowser := chromedp.NewContext(actx)
	defer cancelBrowser()

	shots := []string{t.TempDir()}
	if d := os.Getenv("CKF_LANE_PAGE_SHOTS"); d != "" {
		shots = append(shots, d)
	}
	screenshot := func(name string) {
		t.Helper()
		png, err := chromedp.Run(bctx, chromedp.FullScreenshot(100)) // 100: PNG
		if err != nil {
			t.Fatalf("screenshot %s: %v", name, err)
		}
		for _, d := range shots {
			p := filepath.Join(d, name)
			if err := os.WriteFile(p, png, 0o644); err != nil {
				t.Fatal(err)
			}
			t.Logf("screenshot: %s", p)
		}
	}
	rows := func(wait string) map[string]pageRow {
		t.Helper()
		// The query retries until the row is there: across the page's own reloads, each a new
		// document; every 50 ms is plenty against a 2 s reload.
		if err := chromedp.Do(bctx, chromedp.WaitVisible(chromedp.CSS(wait), chromedp.RetryInterval(50*time.Millisecond))); err != nil {
			t.Fatalf("waiting for %s: %v", wait, err)
		}
		js, err := chromedp.Run(bctx, chromedp.Evaluate[string](readRowsJS))
		if err != nil {
			t.Fatalf("reading the rows: %v", err)
		}
		var rs []pageRow
		if err := json.Unmarshal([]byte(js), &rs); err != nil {
			t.Fatalf("rows %s: %v", js, err)
		}
		out := map[string]pageRow{}
		for _, r := range rs {
			if !r.Shown {
				t.Errorf("lane %s's row is not shown", r.Lane)
			}
			out[r.Lane] = r
		}
		if len(out) != 3 {
			t.Fatalf("rows for lanes %v; want 0, 1 and 5", out)
		}
		return out
	}
	hasAlarm := func(r pageRow, prefix string) bool {
		for _, a := range r.Alarms {
			if strings.HasPrefix(a, prefix) {
				return true
			}
		}
		return false
	}

	if err := chromedp.Do(bctx, chromedp.Navigate(srv.URL+"/")); err != nil {
		t.Fatalf("opening the lane page in %s: %v", bin, err)
	}
	before := rows(`tr[data-lane="5"]`)
	screenshot("lanes-serving.png")
	l0, l1, l5 := before["0"], before["1"], before["5"]
	if l0.State != "serving" || l0.Answer != "exact" || len(l0.Alarms) != 0 {
		t.Errorf("lane 0 before: %+v; want serving, exact, no alarm", l0)
	}
	// Both ages are taken at the same render, so they differ by their as_of's 1,460 ms (shown
	// to the tenth of a second past one second).
	if a0, a1 := pageAgeOf(t, l0.Age), pageAgeOf(t, l1.Age); a1-a0 < 1360*time.Millisecond || a1-a0 > 1560*time.Millisecond {
		t.Errorf("ages %q and %q: lane 1 should read 1.46 s older than lane 0", l0.Age, l1.Age)
	}
	if l1.State != "serving" || l1.Answer != "incomplete" ||
		!hasAlarm(l1, "3 blocks omitted") || !hasAlarm(l1, "queries never match: 60 of 60 searches") {
		t.Errorf("lane 1 before: %+v; want serving, incomplete, an age in s, the omitted blocks and never-match alarms", l1)
	}
	if l5.State != "starting" || l5.Answer != "unavailable" || l5.Age != "none" || len(l5.Alarms) != 0 {
		t.Errorf("lane 5 before: %+v; want starting, unavailable, no age, no alarm", l5)
	}

	// Lane 0's relay stops: its heartbeats end, so the freshness policy drops the lane from the
	// eligible lanes, and its as_of stays where the relay left it.
	loads := pageLoads.Load()
	tb.asOf[0].Store(time.Now().Add(-45 * time.Second).UnixMicro())
	tb.eligible.And(^uint64(1))
	after := rows(`tr[data-lane="0"][data-answer="stale"]`) // shown once the page reloads itself
	if pageLoads.Load() <= loads {
		t.Fatalf("the page shows the stale lane without reloading: %d loads", pageLoads.Load())
	}
	screenshot("lanes-stale.png")
	l0 = after["0"]
	if l0.State != "degraded" || l0.Answer != "stale" || pageAgeOf(t, l0.Age) < 45*time.Second ||
		!hasAlarm(l0, "stale: older than the freshness policy allows") {
		t.Errorf("lane 0 after its relay stopped: %+v; want degraded, stale, at least 45 s old, the stale alarm", l0)
	}
	if l1 := after["1"]; l1.State != "serving" || l1.Answer != "incomplete" {
		t.Errorf("lane 1 after lane 0's relay stopped: %+v; want it unchanged", l1)
	}
}
