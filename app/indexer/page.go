package indexer

import (
	"bytes"
	"fmt"
	"html/template"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"
)

// PageRefresh is how often the lane status page reloads itself.
const PageRefresh = 2 * time.Second

// pageTemplate renders the lane status page: a header with the indexer's identity and readiness,
// and one row per configured lane: first what a person checks (the lane's state, what an answer
// says of it and its age, its alarms), then the figures behind them. It is server-rendered HTML
// that reloads itself every PageRefresh (a meta refresh), so it needs no script and works in any
// browser or with curl. Each row carries data-lane, data-state and data-answer attributes for
// scripts and tests (TestLanePageInABrowser reads the page in headless Chromium).
var pageTemplate = template.Must(template.New("lanes").Funcs(template.FuncMap{
	// mask renders a lane mask as bits, lane 0 rightmost, one digit per lane of the table
	// (at least 16, as the page has always shown).
	"mask":    func(m uint64, lanes int) string { return fmt.Sprintf("%0*b", max(lanes, 16), m) },
	"seconds": func(s float64) string { return strconv.FormatFloat(s, 'f', 3, 64) },
	"percent": func(r float64) string { return strconv.FormatFloat(100*r, 'f', 1, 64) + " %" },
	"age":     pageAge,
	"alarms":  pageAlarms,
	// The readiness check's error names the replica and the verdict, which the page shows already.
	"notReady": func(s string) string { return strings.TrimPrefix(s, ErrNotReady.Error()+": ") },
	"faults": func(f map[string]uint64) string {
		if len(f) == 0 {
			return ""
		}
		var parts []string
		for k, v := range f {
			parts = append(parts, k+"="+strconv.FormatUint(v, 10))
		}
		slices.Sort(parts)
		return strings.Join(parts, " ")
	},
	"refresh": func() int { return int(PageRefresh / time.Second) },
}).Parse(`<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta http-equiv="refresh" content="{{refresh}}">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>ckf-stream indexer: lanes</title>
<style>
body { font-family: system-ui, sans-serif; margin: 1.5em; color: #1a1a1a; }
table { border-collapse: collapse; font-variant-numeric: tabular-nums; }
th, td { border: 1px solid #ccc; padding: 0.25em 0.6em; text-align: right; vertical-align: top; white-space: nowrap; }
th { background: #f4f4f4; }
th.key { background: #e8eef7; }
td.l, th.l { text-align: left; }
td.alarms { text-align: left; white-space: normal; min-width: 24em; max-width: 36em; }
td.alarms ul { margin: 0; padding-left: 1.1em; }
td.alarms li { color: #b30000; font-weight: 600; }
td.none { color: #888; }
tr.serving td.state { background: #d9f2d9; }
tr.degraded td.state { background: #ffe0b3; }
tr.starting td.state { background: #e6e6e6; }
td.answer-exact { background: #d9f2d9; }
td.answer-incomplete { background: #fff2b3; }
td.answer-stale { background: #ffe0b3; }
td.answer-unavailable, td.answer-unknown { background: #f5c6c6; }
.ready { color: #1a7f1a; } .notready { color: #b30000; }
code { font-size: 90%; }
</style>
</head>
<body>
<h1>ckf-stream indexer</h1>
<p>Domain <code>{{.Domain}}</code>, consumer instance <code>{{.ConsumerInstance}}</code>,
{{.BucketCount}} buckets per lane. As of <span id="as-of">{{.Time.Format "2006-01-02 15:04:05.000 MST"}}</span>; this page reloads every {{refresh}} s.</p>
<p>{{if .Ready}}<strong class="ready">ready</strong>{{else}}<strong class="notready">not ready</strong>: {{notReady .NotReady}}{{end}}.
Eligible lanes <code>{{mask .EligibleLanes .LaneCount}}</code>, ready <code>{{mask .ReadyLanes .LaneCount}}</code>, configured <code>{{mask .ConfiguredLanes .LaneCount}}</code> (lane 0 rightmost).</p>
<table>
<thead><tr>
<th class="key">lane</th><th class="key l">DC</th><th class="key l">state</th><th class="key l">answers</th><th class="key">age</th><th class="key l">alarms</th><th class="key">block<br>size</th>
<th class="l">phase</th><th>installed<br>seq</th><th>applied<br>offset</th><th>high<br>watermark</th>
<th>lag<br>(records)</th><th>lag<br>(s)</th><th>deltas</th><th>images</th><th>snapshots</th><th>heartbeats</th>
<th>rejected</th><th>recoveries</th><th class="l">faults</th><th class="l">last fault</th><th class="l">DC filter</th>
</tr></thead>
<tbody>
{{range .Lanes}}<tr class="{{.State}}" data-lane="{{.Lane}}" data-state="{{.State}}" data-answer="{{.AnswerState}}">
<td>{{.Lane}}</td><td class="l"><code>{{.DcID}}</code></td><td class="l state">{{.State}}{{if .Excluded}} (lagging){{end}}</td>
<td class="l answer answer-{{.AnswerState}}">{{.AnswerState}}</td><td class="age">{{age .AgeMillis}}</td>
<td class="alarms">{{with alarms .}}<ul>{{range .}}<li>{{.}}</li>{{end}}</ul>{{else}}<span class="none">none</span>{{end}}</td>
<td class="block-size">{{if .BlockSize}}{{.BlockSize}}{{else}}unknown{{end}}</td>
<td class="l">{{.Phase}}</td><td>{{.InstalledSequence}}</td><td>{{.AppliedOffset}}</td><td>{{.HighWatermark}}</td>
<td>{{.LagRecords}}</td><td>{{seconds .LagSeconds}}</td><td>{{.Deltas}}</td><td>{{.Images}}</td><td>{{.Snapshots}}</td>
<td>{{.Heartbeats}}</td><td>{{.Rejected}}</td><td>{{.Recoveries}}</td><td class="l">{{faults .Faults}}</td>
<td class="l">{{.LastFault}}{{if .LastFaultTime}} at {{.LastFaultTime.Format "15:04:05"}}{{end}}</td>
<td class="l">{{with .Capacity}}{{percent .FilterOccupancyRatio}} full{{else}}not reported{{end}}</td>
</tr>
{{else}}<tr><td colspan="22" class="l">no lane is running yet</td></tr>
{{end}}</tbody>
</table>
<p>States: <em>serving</em> (answers include the lane), <em>degraded</em> (it served since this replica started and does not now: its relay stopped, it lags, or it recovers), <em>starting</em>.
Answers: <em>exact</em>, <em>incomplete</em> (the DC holds blocks its filter or its sources miss: depths may be short), <em>stale</em> (older than the freshness policy: no depth), <em>unavailable</em> (not serving: no depth).
Age: from the newest KV event the lane reflects to now.
Block size: the tokens per block of the DC's engines, as the lane's relay reads it from their events; a token query of another block size that selects the lane is refused (<em>unknown</em>: not judged).</p>
<p>Machine-readable: <a href="/v1/lanes">/v1/lanes</a> · <a href="/readyz">/readyz</a> · <a href="/metrics">/metrics</a>.
Query: <code>POST /v1/prefix-matches</code> with <code>{"local_block_hashes": [...]}</code> or
<code>{"token_ids": [...], "block_size": 16}</code>.</p>
</body>
</html>
`))

// pageAge renders a lane's age (milliseconds; nil: none) as a person reads it.
func pageAge(ms *int64) string {
	if ms == nil {
		return "none"
	}
	d := time.Duration(*ms) * time.Millisecond
	switch {
	case d < time.Second:
		return strconv.FormatInt(*ms, 10) + " ms"
	case d < time.Minute:
		return strconv.FormatFloat(d.Seconds(), 'f', 1, 64) + " s"
	case d < time.Hour:
		return fmt.Sprintf("%d min %d s", int(d/time.Minute), int(d%time.Minute/time.Second))
	}
	return fmt.Sprintf("%d h %d min", int(d/time.Hour), int(d%time.Hour/time.Minute))
}

// pageAlarms lists what is wrong with a lane, as the page words it: answers stale or
// unavailable, blocks its DC's filter omitted, sources degraded by lost engine history, queries
// that never match.
func pageAlarms(l LaneView) []string {
	var out []string
	switch l.AnswerState {
	case "stale":
		out = append(out, "stale: older than the freshness policy allows, left out of answers (its relay stopped, or the lane lags)")
	case "unavailable", "unknown":
		if l.State != StateStarting {
			out = append(out, "unavailable: not serving (recovering, drained, or no snapshot installed)")
		}
	}
	if c := l.Capacity; c != nil && c.OmittedBlocks > 0 {
		out = append(out, fmt.Sprintf("%d blocks omitted: the DC's filter is full, answers may be short", c.OmittedBlocks))
	}
	if s := l.Sources; s != nil && s.DegradedSources > 0 {
		out = append(out, fmt.Sprintf("%d sources degraded: engine history lost, answers may be short", s.DegradedSources))
	}
	if nm := l.NeverMatch; nm != nil && nm.Alarm {
		out = append(out, fmt.Sprintf("queries never match: %d of %d searches in the last %g s missed even the first block (check block size, hash seed, salts, hash kind, tokenizer)",
			nm.Misses, nm.Searches, nm.WindowSeconds))
	}
	return out
}

// PageHandler serves the lane status page for people (GET / and GET /lanes).
func (a *API) PageHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		var buf bytes.Buffer
		if err := pageTemplate.Execute(&buf, a.View()); err != nil {
			http.Error(w, "indexer: rendering the lane page: "+err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.Header().Set("Cache-Control", "no-store")
		_, _ = w.Write(buf.Bytes())
	})
}
