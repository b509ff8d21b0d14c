//go:build linux

package deploy_test

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	appbridge "github.com/ckf-stream/ckf-stream/app/bridge"
	"github.com/ckf-stream/ckf-stream/app/config"
	"gopkg.in/yaml.v3"
)

// testDomain is an indexer domain for the chart tests: the chart has no default, since two
// deployments that shared one by accident would read each other's lanes.
const testDomain = "c5000000000000000000000000000000:5c000000000000000000000000000000"

// renderChart runs helm template on deploy/helm/ckf-stream under release with the values files
// given as YAML texts (and domain set to testDomain unless withoutDomain), and returns the
// rendered objects, or helm's error text.
func renderChart(t *testing.T, release string, withoutDomain bool, values ...string) ([]map[string]any, error) {
	t.Helper()
	args := []string{"template", release, "helm/ckf-stream"}
	if !withoutDomain {
		args = append(args, "--set", "domain="+testDomain)
	}
	// Not t.TempDir: a subtest's name can hold a comma, which helm's -f reads as a list.
	dir, err := os.MkdirTemp("", "ckf-values-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	for i, v := range values {
		f := filepath.Join(dir, fmt.Sprintf("values-%d.yaml", i))
		if err := os.WriteFile(f, []byte(v), 0o600); err != nil {
			t.Fatal(err)
		}
		args = append(args, "-f", f)
	}
	cmd := exec.Command(helmBin(t), args...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Run(); err != nil {
		return nil, errors.New(errOut.String())
	}
	var objs []map[string]any
	dec := yaml.NewDecoder(&out)
	for {
		var o map[string]any
		if err := dec.Decode(&o); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatalf("rendered chart: %v", err)
		}
		if o != nil {
			objs = append(objs, o)
		}
	}
	return objs, nil
}

// at reads a path of map keys and list indexes (ints) out of a decoded object; nil when absent.
func at(v any, path ...any) any {
	for _, p := range path {
		switch k := p.(type) {
		case string:
			m, _ := v.(map[string]any)
			v = m[k]
		case int:
			l, _ := v.([]any)
			if k >= len(l) {
				return nil
			}
			v = l[k]
		}
	}
	return v
}

func str(v any, path ...any) string { s, _ := at(v, path...).(string); return s }

func kindName(o map[string]any) string { return str(o, "kind") + "/" + str(o, "metadata", "name") }

// envOf is a container's variables with a plain value.
func envOf(c any) map[string]string {
	env := map[string]string{}
	list, _ := at(c, "env").([]any)
	for _, e := range list {
		env[str(e, "name")] = str(e, "value")
	}
	return env
}

// selects says whether a selector of matchLabels form (a Service's spec.selector) selects labels.
func selects(selector, labels any) bool {
	sel, _ := selector.(map[string]any)
	l, _ := labels.(map[string]any)
	if len(sel) == 0 {
		return false
	}
	for k, v := range sel {
		if l[k] != v {
			return false
		}
	}
	return true
}

// matchesExpressions evaluates a ServiceMonitor's selector (matchExpressions with In and
// DoesNotExist, the operators the chart uses) on an object's labels.
func matchesExpressions(t *testing.T, exprs any, labels any) bool {
	l, _ := labels.(map[string]any)
	list, _ := exprs.([]any)
	for _, e := range list {
		v, has := l[str(e, "key")]
		switch op := str(e, "operator"); op {
		case "In":
			values, _ := at(e, "values").([]any)
			if !has || !slices.Contains(values, v) {
				return false
			}
		case "DoesNotExist":
			if has {
				return false
			}
		default:
			t.Fatalf("the ServiceMonitor's selector uses operator %s, which this test does not evaluate", op)
		}
	}
	return true
}

// TestHelmChartRefusesValues renders values that no process could run with and checks that
// helm refuses each with a message naming the value: a missing or malformed domain, a DC
// listed twice, a lane used twice or out of the 64 (consumer §16), two DCs on one KV topic (one given
// by default), bad DC ids, duplicate or inexact bridge worker ids, and names past 63 characters.
func TestHelmChartRefusesValues(t *testing.T) {
	const twoDCs = "dcs:\n  - {id: \"0xdc01\", lane: 0, kvTopic: kv-events.dc-dc01}\n"
	for _, tc := range []struct {
		name          string
		withoutDomain bool
		values        string
		want          string
	}{
		{"no domain", true, "", "domain is required"},
		{"malformed domain", true, "domain: c5:5c\n", `domain "c5:5c" is not <32 hex digits>:<32 hex digits>`},
		{"no DC", false, "dcs: []\n", "dcs lists no DC"},
		{"DC without a lane", false, "dcs:\n  - {id: \"0xdc01\"}\n", "dcs[0] has no id or no lane"},
		{"duplicate lanes", false, twoDCs + "  - {id: \"0xdc02\", lane: 0, kvTopic: kv-events.dc-dc02}\n",
			"dcs[1]: lane 0 is given to DC 0xdc01 and DC 0xdc02"},
		{"lane 64", false, twoDCs + "  - {id: \"0xdc02\", lane: 64, kvTopic: kv-events.dc-dc02}\n",
			"dcs[1] (DC 0xdc02): lane 64 is not in [0,63]"},
		{"lane 1000", false, twoDCs + "  - {id: \"0xdc02\", lane: 1000, kvTopic: kv-events.dc-dc02}\n",
			"dcs[1] (DC 0xdc02): lane 1000 is not in [0,63]"},
		{"negative lane", false, twoDCs + "  - {id: \"0xdc02\", lane: -1, kvTopic: kv-events.dc-dc02}\n",
			`dcs[1] (DC 0xdc02): lane "-1" is not a number in [0,63]`},
		{"fractional lane", false, twoDCs + "  - {id: \"0xdc02\", lane: 1.5, kvTopic: kv-events.dc-dc02}\n",
			`dcs[1] (DC 0xdc02): lane "1.5" is not a number in [0,63]`},
		{"two DCs on one KV topic", false, twoDCs + "  - {id: \"0xdc02\", lane: 1, kvTopic: kv-events.dc-dc01}\n",
			`dcs[1]: DC 0xdc01 and DC 0xdc02 both read the KV topic "kv-events.dc-dc01"`},
		{"a KV topic another DC's default", false, twoDCs + "  - {id: \"0xdc02\", lane: 1, kvTopic: kv-events.dc-dc03}\n  - {id: \"0xdc03\", lane: 2}\n",
			`dcs[2]: DC 0xdc02 and DC 0xdc03 both read the KV topic "kv-events.dc-dc03"`},
		{"one DC twice, in two spellings", false, twoDCs + "  - {id: 56321, lane: 1, kvTopic: kv-events.other}\n",
			"dcs[1]: DC 0xdc01 is listed twice (lanes 0 and 1)"},
		{"DC id not hex", false, "dcs:\n  - {id: \"0xdcgg\", lane: 0}\n", `the DC id "0xdcgg" is not 0x and 1 to 16 hex digits`},
		{"bridge engine without endpoint", false, "dcs:\n  - {id: \"0xdc01\", lane: 0, bridge: {engines: [{worker_id: 1}]}}\n",
			"dcs[0].bridge.engines[0] (DC 0xdc01) has no endpoint"},
		{"bridge worker id twice", false, "dcs:\n  - {id: \"0xdc01\", lane: 0, bridge: {engines: [{worker_id: 7, endpoint: \"tcp://a:5557\"}, {worker_id: 7, endpoint: \"tcp://b:5557\"}]}}\n",
			"dcs[0].bridge.engines (DC 0xdc01): worker_id 7 is listed twice (engines 0 and 1)"},
		{"bridge worker id past float precision", false, "dcs:\n  - {id: \"0xdc01\", lane: 0, bridge: {engines: [{worker_id: 18446744073709551615, endpoint: \"tcp://a:5557\"}]}}\n",
			"dcs[0].bridge.engines[0] (DC 0xdc01): worker_id 1.8446744073709552e+19 is not an unquoted whole number"},
		{"bridge worker id quoted", false, "dcs:\n  - {id: \"0xdc01\", lane: 0, bridge: {engines: [{worker_id: \"7\", endpoint: \"tcp://a:5557\"}]}}\n",
			"dcs[0].bridge.engines[0] (DC 0xdc01): worker_id 7 is not an unquoted whole number"},
		{"name past 63 characters", false, "fullnameOverride: " + strings.Repeat("n", 51) + "\n",
			"is longer than 63 characters: set fullnameOverride"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			values := []string{}
			if tc.values != "" {
				values = append(values, tc.values)
			}
			_, err := renderChart(t, "demo", tc.withoutDomain, values...)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("render: %v; want a refusal saying %q", err, tc.want)
			}
		})
	}
}

// TestHelmChartNames checks the names the chart gives: the release's name and "-ckf", but not
// twice over when the release's name already says ckf (release ckf once gave ckf-ckf-relay-dc01),
// and fullnameOverride when set.
func TestHelmChartNames(t *testing.T) {
	for _, tc := range []struct {
		release, values, wantRelay string
	}{
		{"demo", "", "demo-ckf-relay-dc01"},
		{"ckf", "", "ckf-relay-dc01"},
		{"ckf-stream", "", "ckf-stream-relay-dc01"},
		{"prod-ckf", "", "prod-ckf-relay-dc01"},
		{"demo", "fullnameOverride: kvindex\n", "kvindex-relay-dc01"},
	} {
		var values []string
		if tc.values != "" {
			values = append(values, tc.values)
		}
		objs, err := renderChart(t, tc.release, false, values...)
		if err != nil {
			t.Fatalf("release %s: %v", tc.release, err)
		}
		var names []string
		for _, o := range objs {
			name := str(o, "metadata", "name")
			names = append(names, name)
			if strings.Contains(name, "ckf-ckf") || len(name) > 63 {
				t.Errorf("release %s: object name %s", tc.release, name)
			}
		}
		if !slices.Contains(names, tc.wantRelay) {
			t.Errorf("release %s (%s): names %v lack %s", tc.release, strings.TrimSpace(tc.values), names, tc.wantRelay)
		}
	}
}

// TestHelmChartBridgeAndWorkerServices renders the chart with bridges for two of three DCs and
// the worker stage's replicas set per DC, and checks what an operator relies on:
//   - a bridge Deployment per DC with engines (one replica, Recreate: never two bridges on one
//     engine), running processor bridge on the DC's KV topic with bridge.engines_file in a
//     read-only mount of a ConfigMap whose engines.yaml processor bridge accepts
//     (app/bridge.BridgeConfigs) and lists the values' engines; none for a DC without engines;
//   - a worker-stage Deployment per DC with its replicas (workerReplicas 0: none), and a Service
//     per DC selecting that DC's replicas and no other DC's, on the port of workers.service.port;
//   - the ServiceMonitor scrapes each pod through exactly one Service (the per-DC Services are
//     left out of it), the bridges included;
//   - every variable set is one processor help config lists.
func TestHelmChartBridgeAndWorkerServices(t *testing.T) {
	objs, err := renderChart(t, "ckf", false, `
workers: {replicas: 2, service: {port: 8090}}
bridge: {env: {CKF_BRIDGE_LOST_HISTORY: keep}}
dcs:
  - id: "0xdc01"
    lane: 0
    bridge:
      engines:
        - {worker_id: 101, endpoint: "tcp://vllm-0.vllm:5557", replay_endpoint: "tcp://vllm-0.vllm:5657", topic: kv, ranks: 2}
        - {worker_id: 102, endpoint: "tcp://sglang-0.sglang:5557", replay_endpoint: "tcp://sglang-0.sglang:5657", block_size: 64}
  - id: "0xdc02"
    lane: 1
    workerReplicas: 3
    bridge:
      engines:
        - {worker_id: 201, endpoint: "tcp://vllm-1.vllm:5557"}
  - id: "0xdc03"
    lane: 2
    workerReplicas: 0
`)
	if err != nil {
		t.Fatal(err)
	}
	help, err := exec.Command(processorBin, "help", "config").Output()
	if err != nil {
		t.Fatal(err)
	}
	known := map[string]bool{}
	for _, f := range strings.Fields(string(help)) {
		known[strings.TrimSuffix(f, ",")] = true
	}
	byName := map[string]map[string]any{}
	var deployments, services []map[string]any
	var monitor map[string]any
	for _, o := range objs {
		byName[kindName(o)] = o
		switch str(o, "kind") {
		case "Deployment":
			deployments = append(deployments, o)
		case "Service":
			services = append(services, o)
		case "ServiceMonitor":
			monitor = o
		}
	}
	for _, d := range deployments {
		for _, c := range at(d, "spec", "template", "spec", "containers").([]any) {
			for name := range envOf(c) {
				if !known[name] {
					t.Errorf("%s sets %s, which processor help config does not list", kindName(d), name)
				}
			}
		}
	}

	// The bridges.
	wantEngines := map[string][]uint64{"dc01": {101, 102}, "dc02": {201}}
	for dc, workers := range wantEngines {
		d := byName["Deployment/ckf-bridge-"+dc]
		if d == nil {
			t.Fatalf("no Deployment ckf-bridge-%s among %v", dc, slices.Collect(maps.Keys(byName)))
		}
		if at(d, "spec", "replicas") != 1 || str(d, "spec", "strategy", "type") != "Recreate" {
			t.Errorf("bridge of %s: replicas %v, strategy %v; want 1, Recreate", dc, at(d, "spec", "replicas"), at(d, "spec", "strategy"))
		}
		c := at(d, "spec", "template", "spec", "containers", 0)
		env := envOf(c)
		if args, _ := at(c, "args").([]any); len(args) != 1 || args[0] != "bridge" {
			t.Errorf("bridge of %s: args %v", dc, args)
		}
		if env["CKF_TOPICS_KV_EVENTS"] != "kv-events.dc-"+dc || env["CKF_BRIDGE_LOST_HISTORY"] != "keep" {
			t.Errorf("bridge of %s: CKF_TOPICS_KV_EVENTS %q, CKF_BRIDGE_LOST_HISTORY %q", dc, env["CKF_TOPICS_KV_EVENTS"], env["CKF_BRIDGE_LOST_HISTORY"])
		}
		file := env["CKF_BRIDGE_ENGINES_FILE"]
		var mount map[string]any
		for _, m := range at(c, "volumeMounts").([]any) {
			if strings.HasPrefix(file, str(m, "mountPath")+"/") {
				mount, _ = m.(map[string]any)
			}
		}
		var configMap string
		for _, v := range at(d, "spec", "template", "spec", "volumes").([]any) {
			if mount != nil && str(v, "name") == mount["name"] {
				configMap = str(v, "configMap", "name")
			}
		}
		cm := byName["ConfigMap/"+configMap]
		if mount == nil || mount["readOnly"] != true || cm == nil {
			t.Fatalf("bridge of %s: bridge.engines_file %q is not in a read-only mount of a rendered ConfigMap (mount %v, ConfigMap %q)", dc, file, mount, configMap)
		}
		path := filepath.Join(t.TempDir(), filepath.Base(file))
		if err := os.WriteFile(path, []byte(str(cm, "data", filepath.Base(file))), 0o600); err != nil {
			t.Fatal(err)
		}
		cfg := config.Default()
		cfg.Bridge.EnginesFile = path
		engines, err := appbridge.BridgeConfigs(cfg.Bridge, cfg.Topics)
		if err != nil {
			t.Fatalf("bridge of %s: processor bridge refuses the rendered engines file: %v\n%s", dc, err, str(cm, "data", filepath.Base(file)))
		}
		var got []uint64
		for _, e := range engines {
			got = append(got, e.WorkerID)
		}
		if !slices.Equal(got, workers) {
			t.Errorf("bridge of %s serves workers %v, want %v", dc, got, workers)
		}
		if str(d, "spec", "template", "metadata", "annotations", "checksum/engines") == "" {
			t.Errorf("bridge of %s: no checksum of its engines on the pod, so a changed list would not restart it", dc)
		}
	}
	if byName["Deployment/ckf-bridge-dc03"] != nil || byName["ConfigMap/ckf-bridge-dc03"] != nil {
		t.Errorf("a bridge for dc03, which lists no engines")
	}

	// The worker stages and their per-DC Services.
	wantReplicas := map[string]int{"dc01": 2, "dc02": 3}
	for dc, replicas := range wantReplicas {
		d := byName["Deployment/ckf-workers-"+dc]
		if d == nil || at(d, "spec", "replicas") != replicas {
			t.Fatalf("worker stage of %s: %v replicas, want %d", dc, at(d, "spec", "replicas"), replicas)
		}
		if env := envOf(at(d, "spec", "template", "spec", "containers", 0)); env["CKF_WORKERS_DC_ID"] != "0x"+dc || env["CKF_TOPICS_KV_EVENTS"] != "kv-events.dc-"+dc {
			t.Errorf("worker stage of %s: CKF_WORKERS_DC_ID %q, CKF_TOPICS_KV_EVENTS %q", dc, env["CKF_WORKERS_DC_ID"], env["CKF_TOPICS_KV_EVENTS"])
		}
		svc := byName["Service/ckf-workers-"+dc]
		if svc == nil {
			t.Fatalf("no Service ckf-workers-%s", dc)
		}
		if port := at(svc, "spec", "ports", 0, "port"); port != 8090 || str(svc, "spec", "ports", 0, "targetPort") != "http" {
			t.Errorf("Service ckf-workers-%s: port %v to %v, want 8090 to http", dc, port, at(svc, "spec", "ports", 0, "targetPort"))
		}
		for _, other := range deployments {
			own := str(other, "metadata", "name") == "ckf-workers-"+dc
			if selects(at(svc, "spec", "selector"), at(other, "spec", "template", "metadata", "labels")) != own {
				t.Errorf("Service ckf-workers-%s selects the pods of %s: %v", dc, kindName(other), !own)
			}
		}
	}
	if byName["Deployment/ckf-workers-dc03"] != nil || byName["Service/ckf-workers-dc03"] != nil {
		t.Errorf("a worker stage for dc03, whose workerReplicas is 0")
	}

	// Each pod is scraped once.
	if monitor == nil {
		t.Fatal("no ServiceMonitor")
	}
	for _, d := range deployments {
		var through []string
		for _, svc := range services {
			if matchesExpressions(t, at(monitor, "spec", "selector", "matchExpressions"), at(svc, "metadata", "labels")) &&
				selects(at(svc, "spec", "selector"), at(d, "spec", "template", "metadata", "labels")) {
				through = append(through, str(svc, "metadata", "name"))
			}
		}
		if len(through) != 1 {
			t.Errorf("the ServiceMonitor scrapes the pods of %s through %v, want exactly one Service", kindName(d), through)
		}
	}
}
