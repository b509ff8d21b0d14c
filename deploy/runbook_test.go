//go:build linux

package deploy_test

import (
	"os"
	"regexp"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
)

// headingAnchor is GitHub's anchor of a Markdown heading: lower case, punctuation other than
// hyphens dropped, spaces as hyphens.
func headingAnchor(h string) string {
	h = strings.ToLower(strings.TrimSpace(h))
	h = regexp.MustCompile(`[^a-z0-9 _-]`).ReplaceAllString(h, "")
	return strings.ReplaceAll(h, " ", "-")
}

// TestEveryAlertHasARunbook: every alert of prometheus/alerts.yml carries a runbook_url that is a
// section of docs/troubleshooting.md, and an alert fires when an indexer replica is gone
// (CkfIndexerDown). The alerts once had no runbook link, and nothing fired for a dead indexer.
func TestEveryAlertHasARunbook(t *testing.T) {
	b, err := os.ReadFile("prometheus/alerts.yml")
	if err != nil {
		t.Fatal(err)
	}
	var rules struct {
		Groups []struct {
			Rules []struct {
				Alert       string            `yaml:"alert"`
				Annotations map[string]string `yaml:"annotations"`
			} `yaml:"rules"`
		} `yaml:"groups"`
	}
	if err := yaml.Unmarshal(b, &rules); err != nil {
		t.Fatal(err)
	}
	doc, err := os.ReadFile("../docs/troubleshooting.md")
	if err != nil {
		t.Fatal(err)
	}
	anchors := map[string]bool{}
	for _, line := range strings.Split(string(doc), "\n") {
		if strings.HasPrefix(line, "#") {
			anchors[headingAnchor(strings.TrimLeft(line, "#"))] = true
		}
	}
	alerts := map[string]bool{}
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			alerts[r.Alert] = true
			url := r.Annotations["runbook_url"]
			file, anchor, _ := strings.Cut(url, "#")
			if file != "docs/troubleshooting.md" || !anchors[anchor] {
				t.Errorf("alert %s: runbook_url %q is not a section of docs/troubleshooting.md", r.Alert, url)
			}
		}
	}
	if !alerts["CkfIndexerDown"] {
		t.Errorf("no alert fires when an indexer replica is gone (CkfIndexerDown)")
	}
}

// TestDashboardShowsInputLagAndOmissions: the dashboard has panels for the relays' input lag, the
// blocks DC filters omitted, the query group's members and the bridges (their event rate, lost
// engine history and lag), which it once lacked.
func TestDashboardShowsInputLagAndOmissions(t *testing.T) {
	b, err := os.ReadFile("grafana/ckf-stream.json")
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range []string{"ckf_relay_input_lag_records", "ckf_indexer_lane_omitted_blocks", "ckf_indexer_query_group_member",
		"ckf_bridge_events_total", "ckf_bridge_lost_batches_total", "ckf_bridge_sequence_lag_batches", "ckf_indexer_lane_degraded_sources"} {
		if !strings.Contains(string(b), m) {
			t.Errorf("the dashboard has no panel of %s", m)
		}
	}
}
