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
// and one row per configured lane. It is server-rendered HTML that reloads itself (a meta
// refresh), so it needs no script and works in any browser or with curl.
var pageTemplate = template.Must(template.New("lanes").Funcs(template.FuncMap{
	"mask":    func(m uint16) string { return fmt.Sprintf("%016b", m) },
	"seconds": func(s float64) string { return strconv.FormatFloat(s, 'f', 3, 64) },
	"percent": func(r float64) string { return strconv.FormatFloat(100*r, 'f', 1, 64) + " %" },
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
<title>ckf-stream indexer: lanes</title>
<style>
body { font-family: system-ui, sans-serif; margin: 1.5em; }
table { border-collapse: collapse; font-variant-numeric: tabular-nums; }
th, td { border: 1px solid #ccc; padding: 0.25em 0.6em; text-align: right; }
th { background: #f4f4f4; }
td.l { text-align: left; }
tr.serving td.state { background: #d9f2d9; }
tr.degraded td.state { background: #ffe0b3; }
tr.starting td.state { background: #e6e6e6; }
.ready { color: #1a7f1a; } .notready { color: #b30000; }
code { font-size: 90%; }
</style>
</head>
<body>
<h1>ckf-stream indexer</h1>
<p>Domain <code>{{.Domain}}</code>, consumer instance <code>{{.ConsumerInstance}}</code>,
{{.BucketCount}} buckets per lane. As of {{.Time.Format "2006-01-02 15:04:05.000 MST"}}; this page reloads every {{refresh}} s.</p>
<p>{{if .Ready}}<strong class="ready">ready</strong>{{else}}<strong class="notready">not ready</strong>: {{.NotReady}}{{end}}.
Eligible lanes <code>{{mask .EligibleLanes}}</code>, ready <code>{{mask .ReadyLanes}}</code>, configured <code>{{mask .ConfiguredLanes}}</code> (lane 0 rightmost).</p>
<table>
<thead><tr>
<th>lane</th><th>DC</th><th>state</th><th>phase</th><th>installed seq</th><th>applied offset</th><th>high watermark</th>
<th>lag (records)</th><th>lag (s)</th><th>deltas</th><th>images</th><th>snapshots</th><th>heartbeats</th>
<th>rejected</th><th>recoveries</th><th>faults</th><th>last fault</th><th>DC filter</th>
</tr></thead>
<tbody>
{{range .Lanes}}<tr class="{{.State}}">
<td>{{.Lane}}</td><td class="l"><code>{{.DcID}}</code></td><td class="l state">{{.State}}{{if .Excluded}} (lagging){{end}}</td>
<td class="l">{{.Phase}}</td><td>{{.InstalledSequence}}</td><td>{{.AppliedOffset}}</td><td>{{.HighWatermark}}</td>
<td>{{.LagRecords}}</td><td>{{seconds .LagSeconds}}</td><td>{{.Deltas}}</td><td>{{.Images}}</td><td>{{.Snapshots}}</td>
<td>{{.Heartbeats}}</td><td>{{.Rejected}}</td><td>{{.Recoveries}}</td><td class="l">{{faults .Faults}}</td>
<td class="l">{{.LastFault}}{{if .LastFaultTime}} at {{.LastFaultTime.Format "15:04:05"}}{{end}}</td>
<td class="l">{{with .Capacity}}{{percent .FilterOccupancyRatio}} full{{if .OmittedBlocks}}, <strong class="notready">{{.OmittedBlocks}} blocks omitted: answers may be short</strong>{{end}}{{else}}not reported{{end}}{{with .Sources}}{{if .DegradedSources}}; <strong class="notready">{{.DegradedSources}} sources degraded: engine history lost, answers may be short</strong>{{end}}{{end}}{{with .NeverMatch}}{{if .Alarm}}; <strong class="notready">queries never match: {{.Misses}} of {{.Searches}} searches in the last {{.WindowSeconds}} s missed even the first block (block size, hash seed, salts, hash kind, tokenizer)</strong>{{end}}{{end}}</td>
</tr>
{{else}}<tr><td colspan="18" class="l">no lane is running yet</td></tr>
{{end}}</tbody>
</table>
<p>Machine-readable: <a href="/v1/lanes">/v1/lanes</a> · <a href="/readyz">/readyz</a> · <a href="/metrics">/metrics</a>.
Query: <code>POST /v1/prefix-matches</code> with <code>{"local_block_hashes": [...]}</code> or
<code>{"token_ids": [...], "block_size": 16}</code>.</p>
</body>
</html>
`))

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
