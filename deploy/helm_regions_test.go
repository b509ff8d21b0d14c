//go:build linux

package deploy_test

import (
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/ckf-stream/ckf-stream/app/config"
)

// regionValues reads a values file of deploy/helm/regions/.
func regionValues(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile("helm/regions/" + name)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// loadEnv loads the processor's configuration from a rendered container's variables, as the
// process would at start.
func loadEnv(t *testing.T, c any) config.Config {
	t.Helper()
	env := envOf(c)
	cfg, err := config.Load(config.Sources{LookupEnv: func(k string) (string, bool) { v, ok := env[k]; return v, ok }})
	if err != nil {
		t.Fatalf("the processor refuses the rendered variables %v: %v", env, err)
	}
	return cfg
}

// TestHelmChartRegions renders the chart with the values of each region of the two-region
// setup (deploy/helm/regions/region-a.yaml and region-b.yaml, docs/regions.md) and checks what
// runs where: each release runs the relays, worker stages (and bridges) of its own DCs only, on
// its own cluster; its indexers serve every DC's lane, the other region's from MirrorMaker's
// copies (indexer.remote_lanes, indexer.mirror_policy) as the processor reads them; its relays
// read the other region's snapshot requests (relay.remote_regions); and what one region
// publishes is what the other reads as remote.
func TestHelmChartRegions(t *testing.T) {
	type rendered struct {
		relays, workers []string // DC label of each
		indexer         config.Config
		relay           config.Config
		brokers         []string
	}
	render := func(file string) rendered {
		objs, err := renderChart(t, "ckf", false, regionValues(t, file))
		if err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		var r rendered
		for _, o := range objs {
			if str(o, "kind") != "Deployment" {
				continue
			}
			c := at(o, "spec", "template", "spec", "containers", 0)
			switch dc := str(o, "spec", "template", "metadata", "labels", "ckf-stream/dc"); str(o, "metadata", "labels", "app.kubernetes.io/component") {
			case "relay":
				r.relays = append(r.relays, dc)
				r.relay = loadEnv(t, c)
			case "workers":
				r.workers = append(r.workers, dc)
			case "indexer":
				r.indexer = loadEnv(t, c)
				r.brokers = r.indexer.Kafka.Brokers
			}
		}
		return r
	}
	a, b := render("region-a.yaml"), render("region-b.yaml")
	for _, tc := range []struct {
		name, own, other, ownDC string
		ownLane, otherLane      int
		r                       rendered
	}{
		{"a", "a", "b", "dc01", 0, 1, a},
		{"b", "b", "a", "dc02", 1, 0, b},
	} {
		r := tc.r
		if !slices.Equal(r.relays, []string{tc.ownDC}) || !slices.Equal(r.workers, []string{tc.ownDC}) {
			t.Errorf("region %s: relays %v, worker stages %v; want only its own DC %s", tc.name, r.relays, r.workers, tc.ownDC)
		}
		if len(r.brokers) != 1 || !strings.Contains(r.brokers[0], "region-"+tc.own) {
			t.Errorf("region %s: brokers %v, want its own cluster", tc.name, r.brokers)
		}
		ix := r.indexer.Indexer
		if len(ix.Lanes) != 2 || ix.RemoteLanes.String() != strconv.Itoa(tc.otherLane)+"="+tc.other || ix.MirrorPolicy != "default" {
			t.Errorf("region %s: indexer lanes %v, remote lanes %q, mirror policy %q", tc.name, ix.Lanes, ix.RemoteLanes, ix.MirrorPolicy)
		}
		src := ix.LaneSources(r.indexer.Topics)
		if s, ok := src[uint8(tc.otherLane)]; !ok || s.Topic != tc.other+".ckf-lanes" || s.SnapshotIndex != tc.other+".ckf-snapshot-index" {
			t.Errorf("region %s: lane %d is read from %+v, want MirrorMaker's copies %s.ckf-lanes and %s.ckf-snapshot-index", tc.name, tc.otherLane, s, tc.other, tc.other)
		}
		if _, ok := src[uint8(tc.ownLane)]; ok {
			t.Errorf("region %s: its own lane %d is read as remote", tc.name, tc.ownLane)
		}
		if got := r.relay.Relay.MirroredControl(r.relay.Topics); !slices.Equal(got, []string{tc.other + ".ckf-control"}) {
			t.Errorf("region %s: the relay reads the other regions' requests on %v, want [%s.ckf-control]", tc.name, got, tc.other)
		}
	}
	if !maps.Equal(a.indexer.Indexer.Lanes, b.indexer.Indexer.Lanes) {
		t.Errorf("the regions' lane maps differ: %v and %v", a.indexer.Indexer.Lanes, b.indexer.Indexer.Lanes)
	}

	// One region, the chart's default values: nothing of the regions is set.
	objs, err := renderChart(t, "ckf", false)
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range objs {
		if str(o, "kind") != "Deployment" {
			continue
		}
		for name := range envOf(at(o, "spec", "template", "spec", "containers", 0)) {
			if strings.Contains(name, "REMOTE") || strings.Contains(name, "MIRROR") {
				t.Errorf("one region: %s sets %s", kindName(o), name)
			}
		}
	}
}

// TestHelmChartRefusesRegions renders region values that no region could run with and checks
// that helm refuses each, naming the value: a lane or DC both local and remote, a remote DC of
// a region not among the peers, a remote lane twice, aliases MirrorMaker would not take, this
// region among its peers, peers without an alias, and an unknown mirror policy.
func TestHelmChartRefusesRegions(t *testing.T) {
	const local = "dcs:\n  - {id: \"0xdc01\", lane: 0}\n"
	for _, tc := range []struct {
		name, values, want string
	}{
		{"lane local and remote", local + "region: {alias: a, peers: [b], remoteDCs: [{id: \"0xdc02\", lane: 0, region: b}]}\n",
			"region.remoteDCs[0]: lane 0 is given to DC 0xdc01 and DC 0xdc02 of region b; a lane is local (dcs) or remote"},
		{"DC local and remote", local + "region: {alias: a, peers: [b], remoteDCs: [{id: \"0xdc01\", lane: 1, region: b}]}\n",
			"region.remoteDCs[0]: DC 0xdc01 is listed twice (lanes 0 and 1)"},
		{"unknown alias", local + "region: {alias: a, peers: [b], remoteDCs: [{id: \"0xdc02\", lane: 1, region: c}]}\n",
			`region.remoteDCs[0] (DC 0xdc02): region "c" is unknown: not in region.peers [b]`},
		{"remote lane twice", local + "region: {alias: a, peers: [b], remoteDCs: [{id: \"0xdc02\", lane: 1, region: b}, {id: \"0xdc03\", lane: 1, region: b}]}\n",
			"region.remoteDCs[1]: lane 1 is given to DC 0xdc02 and DC 0xdc03 of region b"},
		{"remote DC without region", local + "region: {alias: a, peers: [b], remoteDCs: [{id: \"0xdc02\", lane: 1}]}\n",
			"region.remoteDCs[0] has no id, lane or region"},
		{"remote lane 64", local + "region: {alias: a, peers: [b], remoteDCs: [{id: \"0xdc02\", lane: 64, region: b}]}\n",
			"region.remoteDCs[0] (DC 0xdc02): lane 64 is not in [0,63]"},
		{"alias with a dot", local + "region: {alias: eu.west, peers: [b]}\n", `region.alias "eu.west" is not a region alias`},
		{"peer with a dot", local + "region: {alias: a, peers: [us.east]}\n", `region.peers[0] "us.east" is not a region alias`},
		{"own alias among peers", local + "region: {alias: a, peers: [b, a]}\n", `region.peers[1] is "a", this region's own alias`},
		{"peer twice", local + "region: {alias: a, peers: [b, b]}\n", `region.peers: "b" is listed twice`},
		{"peers without alias", local + "region: {peers: [b]}\n", "region.alias is required with region.peers or region.remoteDCs"},
		{"unknown policy", local + "region: {alias: a, peers: [b], mirrorPolicy: prefix}\n", `region.mirrorPolicy "prefix" is not default or identity`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := renderChart(t, "demo", false, tc.values)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("render: %v; want a refusal saying %q", err, tc.want)
			}
		})
	}
}
