//go:build linux

package deploy_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ckf-stream/ckf-stream/app/indexer"
	"github.com/ckf-stream/ckf-stream/testenv"
	"gopkg.in/yaml.v3"
)

// composeFile is the part of docker-compose.yml a host run needs: each service's image source,
// command and environment (YAML anchors and merge keys resolved by the decoder).
type composeFile struct {
	Services map[string]struct {
		Build       string            `yaml:"build"`
		Command     []string          `yaml:"command"`
		Environment map[string]string `yaml:"environment"`
		Healthcheck struct {
			Test []string `yaml:"test"`
		} `yaml:"healthcheck"`
	} `yaml:"services"`
}

// composeService is one service built from this repository, as the test runs it.
type composeService struct {
	name string
	args []string
	env  []string
	// healthcheck is the compose healthcheck's command after /healthcheck (the image's
	// deploy/healthcheck); nil when the service has none of that form.
	healthcheck []string
}

// composeVariable is compose's ${NAME:-default} (the only form docker-compose.yml uses).
var composeVariable = regexp.MustCompile(`\$\{(\w+):-([^}]*)\}`)

// interpolate replaces the ${NAME:-default} of a compose value with vars[NAME], else default, as
// compose does with its environment.
func interpolate(v string, vars map[string]string) string {
	return composeVariable.ReplaceAllStringFunc(v, func(m string) string {
		sub := composeVariable.FindStringSubmatch(m)
		if val, ok := vars[sub[1]]; ok && val != "" {
			return val
		}
		return sub[2]
	})
}

// hostServices reads docker-compose.yml and returns its services built from this repository
// (build: .), with the environment adapted to a host run against the test broker (and compose's
// ${NAME:-default} taken from vars): KAFKA_BROKERS
// is the test broker, the schema registry is the test registry (TEST_SCHEMA_REGISTRY_URL) or none,
// and CKF_TOPIC_PREFIX and CKF_INDEXER_QUERY_GROUP are the test's own so that runs never share
// topics (topic names the file sets explicitly, CKF_TOPICS_*, get the same prefix, as
// topic_prefix applies only to default names). Every other variable and every argument is the compose file's. CKF_HTTP_LISTEN is
// replaced by testenv.Process (one free port per process, as one host cannot give every service
// port 8080).
func hostServices(t *testing.T, prefix string, vars map[string]string) []composeService {
	t.Helper()
	raw, err := os.ReadFile("../docker-compose.yml")
	if err != nil {
		t.Fatal(err)
	}
	var cf composeFile
	if err := yaml.Unmarshal(raw, &cf); err != nil {
		t.Fatalf("docker-compose.yml: %v", err)
	}
	var out []composeService
	for name, s := range cf.Services {
		if s.Build != "." {
			continue
		}
		env := map[string]string{}
		for k, v := range s.Environment {
			env[k] = interpolate(v, vars)
		}
		env["KAFKA_BROKERS"] = strings.Join(testenv.Brokers(t), ",")
		if url := os.Getenv("TEST_SCHEMA_REGISTRY_URL"); url != "" {
			env["CKF_SCHEMA_REGISTRY_URLS"] = url
		} else {
			delete(env, "CKF_SCHEMA_REGISTRY_URLS")
		}
		env["CKF_TOPIC_PREFIX"] = prefix
		for k, v := range env {
			if strings.HasPrefix(k, "CKF_TOPICS_") {
				env[k] = prefix + v // explicit names take no topic_prefix: give them the test's
			}
		}
		env["CKF_INDEXER_QUERY_GROUP"] = prefix + "queries"
		delete(env, "CKF_HTTP_LISTEN")
		var kv []string
		for k, v := range env {
			kv = append(kv, k+"="+v)
		}
		sort.Strings(kv)
		var check []string
		if test := s.Healthcheck.Test; len(test) >= 2 && test[0] == "CMD" && test[1] == "/healthcheck" {
			check = append([]string{}, test[2:]...)
		}
		out = append(out, composeService{name: name, args: s.Command, env: kv, healthcheck: check})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].name < out[j].name })
	return out
}

// hitsLine is the loadgen report's line of query hits: OK replies with a non-zero depth.
var hitsLine = regexp.MustCompile(`hits (\d+) of (\d+) ok`)

// TestComposeIndexes runs the services of docker-compose.yml that are built from this repository
// (two relays, the indexer, the load generator) as host processes with the compose file's
// commands and environments against the test broker (there is no Docker engine on the test
// machines; the compose file stays the one source of the deployment). The engines' events must
// reach the relays: both lanes hold blocks, and the load generator's routers get answers with a
// depth above 0. The compose file once gave loadgen the relay's CKF_TOPICS_KV_EVENTS, so its
// engines wrote kv-events.dc-dc01.dc-dc0N, which no relay read, and every answer was depth 0.
func TestComposeIndexes(t *testing.T) {
	prefix := testenv.UniqueName(t, "ckfcompose") + "-"
	services := hostServices(t, prefix, nil)
	byName := map[string]*proc{}
	var names []string
	for _, s := range services {
		names = append(names, s.name)
		byName[s.name] = &proc{testenv.NewProcess(t, processorBin, t.TempDir(), s.name, s.env, s.args...)}
	}
	for _, want := range []string{"indexer", "loadgen", "relay-dc01", "relay-dc02"} {
		if byName[want] == nil {
			t.Fatalf("docker-compose.yml has services %v built here; the test expects %s", names, want)
		}
	}
	// The start order of depends_on: relays, the worker stage and indexer, then the load.
	started := []string{"relay-dc01", "relay-dc02", "indexer", "workers-dc01"}
	if byName["workers-dc01"] == nil {
		t.Fatalf("docker-compose.yml has services %v built here; the test expects workers-dc01", names)
	}
	for _, name := range started {
		byName[name].Start()
	}
	for _, name := range started {
		byName[name].WaitReady(2 * time.Minute)
	}
	// Each ready service's compose healthcheck passes against the real process (the image's
	// /healthcheck, built here, asking the port the process listens on).
	healthcheck := buildHealthcheck(t)
	healthy := func(name string) error {
		s := services[slices.IndexFunc(services, func(s composeService) bool { return s.name == name })]
		if s.healthcheck == nil {
			t.Fatalf("%s has no healthcheck running /healthcheck", name)
		}
		cmd := exec.Command(healthcheck, s.healthcheck...)
		cmd.Env = append(os.Environ(), "CKF_HTTP_LISTEN="+byName[name].HTTP)
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("%v: %s", err, out)
		}
		return nil
	}
	for _, name := range started {
		if err := healthy(name); err != nil {
			t.Errorf("%s is ready, but its compose healthcheck fails: %v", name, err)
		}
	}
	load := byName["loadgen"]
	load.Start()
	var loadErr error
	testenv.WaitUntil(t, 2*time.Minute, "loadgen's compose healthcheck passes", func() bool {
		loadErr = healthy("loadgen")
		return loadErr == nil
	}, func() string { return fmt.Sprint(loadErr) })

	ix := byName["indexer"]
	c := &http.Client{Timeout: 2 * time.Second}
	var last indexer.LanesView
	testenv.WaitUntilEvery(t, 200*time.Millisecond, 2*time.Minute, "every lane of the compose indexer holds blocks", func() bool {
		if !load.Alive() {
			t.Fatalf("loadgen exited (%v):\n%s", load.ExitError(), testenv.Tail(load.LogPath(1), 30))
		}
		resp, err := c.Get("http://" + ix.HTTP + "/v1/lanes")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		last = indexer.LanesView{}
		if err := json.NewDecoder(resp.Body).Decode(&last); err != nil || len(last.Lanes) != 2 {
			return false
		}
		return !slices.ContainsFunc(last.Lanes, func(l indexer.LaneView) bool {
			return l.Capacity == nil || l.Capacity.ResidentBlocks == 0
		})
	}, func() string {
		b, _ := json.Marshal(last)
		return fmt.Sprintf("lanes %s\nloadgen:\n%s", b, testenv.Tail(load.LogPath(1), 10))
	})
	// Resident memory at the compose file's sizes (1,048,576 expected blocks per DC), under load:
	// the figures deploy/helm's resource requests come from.
	for _, name := range []string{"relay-dc01", "relay-dc02", "indexer"} {
		t.Logf("RSS %s: %.1f MiB", name, float64(byName[name].RSS())/(1<<20))
	}
	// Routers' queries sent once the lanes hold blocks find them: stop the load (its report
	// counts the hits) once it has sent some.
	start := load.LogCount("loadgen ")
	testenv.WaitUntil(t, time.Minute, "three more loadgen progress lines", func() bool { return load.LogCount("loadgen ") >= start+3 })
	if err := load.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-load.Done():
	case <-time.After(time.Minute):
		t.Fatal("loadgen did not stop within a minute of SIGTERM")
	}
	lines := load.LogLines(1, "hits ")
	if len(lines) == 0 {
		t.Fatalf("loadgen report lacks the hits line:\n%s", testenv.Tail(load.LogPath(1), 20))
	}
	m := hitsLine.FindStringSubmatch(lines[len(lines)-1])
	if m == nil {
		t.Fatalf("loadgen hits line %q", lines[len(lines)-1])
	}
	hits, _ := strconv.Atoi(m[1])
	if hits == 0 {
		t.Errorf("no answer with depth > 0: %s\n%s", lines[len(lines)-1], testenv.Tail(load.LogPath(1), 20))
	}
	t.Logf("compose on the host: %s", strings.TrimSpace(lines[len(lines)-1]))
}

// TestComposeBridgeStarts runs the compose file's bridge-dc01 (profile bridge) on the host with
// ENGINE_HOST at an address where no engine runs: the bridge takes its compose configuration
// (no refusal at start), and its /readyz, which the compose healthcheck asks, says which engine
// it waits for, until one answers.
func TestComposeBridgeStarts(t *testing.T) {
	prefix := testenv.UniqueName(t, "ckfcomposebridge") + "-"
	services := hostServices(t, prefix, map[string]string{"ENGINE_HOST": "127.0.0.2"})
	i := slices.IndexFunc(services, func(s composeService) bool { return s.name == "bridge-dc01" })
	if i < 0 {
		t.Fatal("docker-compose.yml has no bridge-dc01 built here")
	}
	s := services[i]
	p := startProc(t, s.name, s.env, s.args...)
	c := &http.Client{Timeout: 2 * time.Second}
	var last string
	testenv.WaitUntil(t, 2*time.Minute, "the compose bridge's /readyz names the engine it waits for", func() bool {
		if !p.Alive() {
			t.Fatalf("the compose bridge exited (%v):\n%s", p.ExitError(), testenv.Tail(p.LogPath(1), 20))
		}
		resp, err := c.Get("http://" + p.HTTP + "/readyz")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		last = fmt.Sprintf("%d %s", resp.StatusCode, b)
		// 200 only if something answers there after all (an engine bound to every address).
		return resp.StatusCode == http.StatusOK || strings.Contains(string(b), "no engine answers at tcp://127.0.0.2:5557")
	}, func() string { return last + "\n" + testenv.Tail(p.LogPath(1), 20) })
	t.Logf("the compose bridge's /readyz: %s", strings.TrimSpace(last))
}

// buildHealthcheck builds deploy/healthcheck, the image's /healthcheck, and returns its path.
func buildHealthcheck(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "healthcheck")
	if out, err := exec.Command("go", "build", "-o", bin, "./healthcheck").CombinedOutput(); err != nil {
		t.Fatalf("building deploy/healthcheck: %v\n%s", err, out)
	}
	return bin
}

// TestComposeWaitsOnHealth reads docker-compose.yml and checks that a service starts only once
// what it needs serves: every depends_on entry waits for service_healthy, on a service that has
// a healthcheck and is started by default whenever the dependent is; every service built here
// has a healthcheck that runs /healthcheck (which the Dockerfile puts in the image) against
// /readyz on the port the service listens on (CKF_HTTP_LISTEN), within a timeout longer than
// the healthcheck's own 3 s, and publishes that port where it publishes one. Loadgen once
// started as soon as the relays' containers had, before anything was ready.
func TestComposeWaitsOnHealth(t *testing.T) {
	raw, err := os.ReadFile("../docker-compose.yml")
	if err != nil {
		t.Fatal(err)
	}
	type healthcheck struct {
		Test    []string `yaml:"test"`
		Timeout string   `yaml:"timeout"`
		Disable bool     `yaml:"disable"`
	}
	var cf struct {
		Services map[string]struct {
			Build       string            `yaml:"build"`
			Profiles    []string          `yaml:"profiles"`
			Environment map[string]string `yaml:"environment"`
			Ports       []string          `yaml:"ports"`
			Healthcheck *healthcheck      `yaml:"healthcheck"`
			DependsOn   yaml.Node         `yaml:"depends_on"`
		} `yaml:"services"`
	}
	if err := yaml.Unmarshal(raw, &cf); err != nil {
		t.Fatalf("docker-compose.yml: %v", err)
	}
	dockerfile, err := os.ReadFile("../Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`(?m)^COPY --from=build \S+ /healthcheck$`).Match(dockerfile) {
		t.Fatal("the Dockerfile does not put /healthcheck in the image, which the compose healthchecks run")
	}
	built := 0
	for name, s := range cf.Services {
		switch s.DependsOn.Kind {
		case 0:
		case yaml.MappingNode:
			var deps map[string]struct {
				Condition string `yaml:"condition"`
			}
			if err := s.DependsOn.Decode(&deps); err != nil {
				t.Fatalf("%s: depends_on: %v", name, err)
			}
			for dep, d := range deps {
				target, ok := cf.Services[dep]
				switch {
				case !ok:
					t.Errorf("%s depends on %s, which the file does not define", name, dep)
				case d.Condition != "service_healthy":
					t.Errorf("%s depends on %s with condition %q, want service_healthy", name, dep, d.Condition)
				case target.Healthcheck == nil || len(target.Healthcheck.Test) == 0 || target.Healthcheck.Disable:
					t.Errorf("%s waits for %s to be healthy, which has no healthcheck", name, dep)
				case len(target.Profiles) > 0 && !slices.Equal(target.Profiles, s.Profiles):
					t.Errorf("%s depends on %s, which only starts with the profiles %v", name, dep, target.Profiles)
				}
			}
		default:
			t.Errorf("%s: depends_on is a list: it waits for the containers to start, not to be ready; give each a condition: service_healthy", name)
		}
		if s.Build != "." {
			continue
		}
		built++
		hc := s.Healthcheck
		if hc == nil || len(hc.Test) < 2 || hc.Test[0] != "CMD" || hc.Test[1] != "/healthcheck" || hc.Disable {
			t.Errorf("%s: healthcheck %+v, want [CMD, /healthcheck]", name, hc)
			continue
		}
		_, port, err := net.SplitHostPort(s.Environment["CKF_HTTP_LISTEN"])
		if err != nil || port == "0" {
			t.Errorf("%s: CKF_HTTP_LISTEN %q names no port for its healthcheck", name, s.Environment["CKF_HTTP_LISTEN"])
			continue
		}
		if len(hc.Test) > 2 {
			u, err := url.Parse(hc.Test[2])
			if err != nil || u.Port() != port || u.Path != "/readyz" {
				t.Errorf("%s: healthcheck asks %q, not /readyz on the port it listens on (%s)", name, hc.Test[2], port)
			}
		}
		if d, err := time.ParseDuration(hc.Timeout); err != nil || d <= 3*time.Second {
			t.Errorf("%s: healthcheck timeout %q, want more than the healthcheck's own 3s", name, hc.Timeout)
		}
		for _, p := range s.Ports {
			if container := p[strings.LastIndex(p, ":")+1:]; container != port {
				t.Errorf("%s publishes container port %s, but listens on %s", name, container, port)
			}
		}
	}
	if built < 5 {
		t.Errorf("%d services built here; want relays, the worker stage, the indexer and loadgen", built)
	}
}
