package testenv

import (
	"strings"
	"testing"
)

func TestParseMetricsAndSumSeries(t *testing.T) {
	const text = `# HELP ckf_relay_events_total events
# TYPE ckf_relay_events_total counter
ckf_relay_events_total{kind="stored"} 7
ckf_relay_events_total{kind="removed"} 3
ckf_relay_events_total_other 100
ckf_indexer_lane_ready{lane="0",note="a b"} 1
ckf_relay_started 1
broken_line_without_value
bad_value NaNx
`
	m, err := ParseMetrics(strings.NewReader(text))
	if err != nil {
		t.Fatal(err)
	}
	if got := m[`ckf_indexer_lane_ready{lane="0",note="a b"}`]; got != 1 {
		t.Errorf("a label value with a space: got %v, want 1 (series %v)", got, m)
	}
	if _, ok := m["bad_value"]; ok {
		t.Error("a value that does not parse was kept")
	}
	if len(m) != 5 {
		t.Errorf("%d series, want 5: %v", len(m), m)
	}
	if got := SumSeries(m, "ckf_relay_events_total"); got != 10 {
		t.Errorf("SumSeries = %v, want 10 (a longer name with the same prefix must not count)", got)
	}
	if got := SumSeries(m, "ckf_relay_started"); got != 1 {
		t.Errorf("SumSeries of an unlabelled series = %v, want 1", got)
	}
}
