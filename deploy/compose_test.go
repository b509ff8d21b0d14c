//go:build linux

package deploy_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
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
	} `yaml:"services"`
}

// composeService is one service built from this repository, as the test runs it.
type composeService struct {
	name string
	args []string
	env  []string
}

// hostServices reads docker-compose.yml and returns its services built from this repository
// (build: .), with the environment adapted to a host run against the test broker: KAFKA_BROKERS
// is the test broker, the schema registry is the test registry (TEST_SCHEMA_REGISTRY_URL) or none,
// and CKF_TOPIC_PREFIX and CKF_INDEXER_QUERY_GROUP are the test's own so that runs never share
// topics (topic names the file sets explicitly, CKF_TOPICS_*, get the same prefix, as
// topic_prefix applies only to default names). Every other variable and every argument is the compose file's. CKF_HTTP_LISTEN is
// replaced by testenv.Process (one free port per process, as one host cannot give every service
// port 8080).
func hostServices(t *testing.T, prefix string) []composeService {
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
			env[k] = v
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
		out = append(out, composeService{name: name, args: s.Command, env: kv})
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
	services := hostServices(t, prefix)
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
	load := byName["loadgen"]
	load.Start()

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
