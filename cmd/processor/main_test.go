package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ckf-stream/ckf-stream/app/config"
	"github.com/ckf-stream/ckf-stream/app/kafka"
	"github.com/ckf-stream/ckf-stream/ckf"
	"github.com/ckf-stream/ckf-stream/testenv"
	"github.com/twmb/franz-go/pkg/kfake"
)

// runCmd runs one command line in-process with exactly vars as its environment.
func runCmd(t *testing.T, vars map[string]string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code = run(args, &out, &errOut, func(k string) (string, bool) { v, ok := vars[k]; return v, ok })
	return code, out.String(), errOut.String()
}

func TestConfigPrintRedactsSecrets(t *testing.T) {
	const pw = "s3cr3t-do-not-print"
	vars := map[string]string{
		"KAFKA_BROKERS":            "b1:9092",
		"CKF_KAFKA_SASL_MECHANISM": "scram-sha-256",
		"CKF_KAFKA_SASL_USERNAME":  "relay",
		"CKF_KAFKA_SASL_PASSWORD":  pw,
	}
	for _, format := range []string{"yaml", "json"} {
		code, out, errOut := runCmd(t, vars, "config", "print", "--format", format, "--indexer.verification_window=4")
		if code != 0 {
			t.Fatalf("config print --format %s: exit %d, stderr %s", format, code, errOut)
		}
		if strings.Contains(out, pw) {
			t.Errorf("config print --format %s shows the password:\n%s", format, out)
		}
		for _, want := range []string{config.Redacted, "SCRAM-SHA-256", "b1:9092", "verification_window", "4"} {
			if !strings.Contains(out, want) {
				t.Errorf("config print --format %s lacks %q:\n%s", format, want, out)
			}
		}
	}
	if code, _, errOut := runCmd(t, nil, "config", "print", "--format", "toml"); code != exitUsage || !strings.Contains(errOut, `"toml" is not one of yaml, json`) {
		t.Errorf("--format toml: exit %d, stderr %q", code, errOut)
	}
	// An invalid configuration is printed (to find the layer that set the bad value), then refused.
	code, out, errOut := runCmd(t, nil, "config", "print", "--relay.lane=64")
	if code != exitUsage || !strings.Contains(out, "lane: 64") || !strings.Contains(errOut, "relay.lane: 64 is not in [0,63]") {
		t.Errorf("config print of an invalid config: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	if code, _, _ := runCmd(t, nil, "config"); code != exitUsage {
		t.Errorf("config without print: exit %d", code)
	}
}

// TestInvalidConfigExits: every command that loads the configuration refuses an invalid one with
// exit status 2 and a message naming the field.
func TestInvalidConfigExits(t *testing.T) {
	for _, tc := range []struct {
		args []string
		vars map[string]string
		want string
	}{
		{[]string{"demo", "--indexer.verification_window=9"}, nil, "processor: config: indexer.verification_window: 9 is not in [1,8]"},
		{[]string{"config", "print", "--relay.lane=64"}, nil, "processor: config: relay.lane: 64 is not in [0,63]"},
		{[]string{"demo"}, map[string]string{"KAFKA_BROKERS": "nohostport"}, `processor: config: kafka.brokers[0]: "nohostport" is not host:port`},
		{[]string{"demo"}, map[string]string{"CKF_LOG_LEVEL": "loud"}, `processor: config: log.level: "loud" is not one of debug, info, warn, error`},
		{[]string{"demo", "--kafka.sasl.mechanism=OAUTH"}, nil, `processor: config: kafka.sasl.mechanism: "OAUTH" is not one of PLAIN, SCRAM-SHA-256, SCRAM-SHA-512`},
		{[]string{"demo", "--topics.lanes=a/b"}, nil, `processor: config: topics.lanes: "a/b" holds characters`},
		{[]string{"demo", "--http.listen=nowhere"}, nil, `processor: config: http.listen: "nowhere" is not host:port`},
		{[]string{"demo"}, map[string]string{"CKF_METRICS_REPORT_INTERVAL": "0s"}, "processor: config: metrics.report_interval: 0s is not positive"},
		{[]string{"demo", "--indexer.lanes=0=1,1=1"}, nil, "processor: config: indexer.lanes: DC 0x1 is on lanes 0 and 1"},
		{[]string{"demo"}, map[string]string{"CKF_INDEXER_QUERY_BATCH_SIZE": "0"}, "processor: config: indexer.query_batch_size: must be in [1, 65536], got 0"},
		{[]string{"demo", "--relay.heartbeat_interval=0s"}, nil, "processor: config: relay.heartbeat_interval: 0s is not positive"},
		{[]string{"demo"}, map[string]string{"CKF_SHUTDOWN_TIMEOUT": "-1s"}, "processor: config: shutdown_timeout: -1s is not positive"},
		{[]string{"demo", "--kafka.tls.enabled"}, nil, "processor: config: kafka.tls.enabled: is true, but kafka.brokers is empty"},
		{[]string{"demo", "--config=/no/such/file.yaml"}, nil, "processor: config: file /no/such/file.yaml: open /no/such/file.yaml: no such file or directory"},
		{[]string{"demo", "--no-such-flag"}, nil, "flag provided but not defined: -no-such-flag"},
		{[]string{"demo", "stray"}, nil, `processor: demo: unexpected argument "stray"`},
		{[]string{"demo", "--dcs=65"}, nil, "processor: demo: --dcs 65 is not in [1,64]"},
		{[]string{"demo", "--table-every=0s"}, nil, "processor: demo: --table-every 0s is not positive"},
	} {
		code, _, errOut := runCmd(t, tc.vars, tc.args...)
		if code != exitUsage || !strings.Contains(errOut, tc.want) {
			t.Errorf("%q with %v: exit %d, stderr %q; want exit %d and %q", tc.args, tc.vars, code, errOut, exitUsage, tc.want)
		}
	}
}

func TestUnknownCommand(t *testing.T) {
	if code, _, errOut := runCmd(t, nil, "frobnicate"); code != exitUsage || !strings.Contains(errOut, `unknown command "frobnicate"`) {
		t.Errorf("unknown command: exit %d, stderr %q", code, errOut)
	}
}

func TestHelp(t *testing.T) {
	for _, args := range [][]string{{"help"}, {"-h"}, {"--help"}} {
		code, out, _ := runCmd(t, nil, args...)
		if code != 0 || !strings.Contains(out, "usage: processor") || strings.Contains(out, "not yet implemented") {
			t.Errorf("%q: exit %d, stdout %q", args, code, out)
		}
	}
	code, out, _ := runCmd(t, nil, "help", "config")
	if code != 0 || !strings.Contains(out, "indexer.verification_window") || !strings.Contains(out, "CKF_INDEXER_VERIFICATION_WINDOW") {
		t.Errorf("help config: exit %d, stdout %q", code, out)
	}
	if code, out, _ := runCmd(t, nil, "demo", "-h"); code != 0 || !strings.Contains(out, "indexer.verification_window") {
		t.Errorf("demo -h: exit %d, stdout %q", code, out)
	}
}

// TestCommandHelpFlagErrorsAndVersion: "<command> --help" prints that command's own flags and
// only the settings it reads, each with its description; a bad flag prints the error and one
// line pointing to --help (not every flag of the process); --version prints a version; and
// processor with no command prints the usage and exits 2 instead of running the demo.
func TestCommandHelpFlagErrorsAndVersion(t *testing.T) {
	for _, tc := range []struct {
		cmd       string
		want, not []string
	}{
		{"indexer", []string{"usage: processor indexer", "indexer.query_group", "consumer group of the query topic, shared by the replicas"}, []string{"relay.dc_id", "bridge.", "--duration"}},
		{"relay", []string{"usage: processor relay", "relay.dc_id", "DC id of the pool this relay publishes for"}, []string{"indexer.query_group", "bridge."}},
		{"demo", []string{"--duration", "run this long", "indexer.verification_window"}, []string{"relay.dc_id"}},
		{"query", []string{"--hashes", "--http URL", "kafka.brokers"}, []string{"relay.snapshot_interval"}},
	} {
		for _, args := range [][]string{{tc.cmd, "--help"}, {"help", tc.cmd}} {
			code, out, errOut := runCmd(t, nil, args...)
			if code != exitOK || errOut != "" {
				t.Errorf("%q: exit %d, stderr %q", args, code, errOut)
			}
			for _, w := range tc.want {
				if !strings.Contains(out, w) {
					t.Errorf("%q lacks %q:\n%s", args, w, out)
				}
			}
			for _, n := range tc.not {
				if strings.Contains(out, n) {
					t.Errorf("%q shows %q, which %s does not read", args, n, tc.cmd)
				}
			}
		}
	}
	code, out, errOut := runCmd(t, nil, "indexer", "--nope")
	if lines := strings.Split(strings.TrimSpace(errOut), "\n"); code != exitUsage || out != "" || len(lines) != 2 ||
		!strings.Contains(lines[0], "-nope") || !strings.Contains(lines[1], `"processor indexer --help"`) {
		t.Errorf("indexer --nope: exit %d, stdout %q, stderr %q; want 2 and two lines", code, out, errOut)
	}
	for _, args := range [][]string{{"--version"}, {"version"}, {"indexer", "--version"}} {
		code, out, _ := runCmd(t, nil, args...)
		if code != exitOK || !regexp.MustCompile(`^processor \S+ \(.*go1\.`).MatchString(out) {
			t.Errorf("%q: exit %d, stdout %q", args, code, out)
		}
	}
	code, out, errOut = runCmd(t, nil)
	if code != exitUsage || out != "" || !strings.Contains(errOut, "usage: processor") || !strings.Contains(errOut, "no command given") {
		t.Errorf("no command: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
}

// TestHelpConfigDescribesEverySetting: help config prints, under each setting, its description
// and the commands that use it, and every command it names is one that processor runs.
func TestHelpConfigDescribesEverySetting(t *testing.T) {
	code, out, _ := runCmd(t, nil, "help", "config")
	if code != 0 {
		t.Fatalf("help config: exit %d", code)
	}
	lines := strings.Split(out, "\n")
	for _, f := range config.Fields() {
		i := slices.IndexFunc(lines, func(l string) bool { return strings.HasPrefix(strings.TrimSpace(l), f.Path+" ") })
		if i < 0 || i+1 >= len(lines) {
			t.Errorf("help config does not list %s", f.Path)
			continue
		}
		want := f.Description + " [" + strings.Join(f.UsedBy, " ") + "]"
		if f.Description == "" || len(f.UsedBy) == 0 || strings.TrimSpace(lines[i+1]) != want {
			t.Errorf("help config under %s: %q, want %q", f.Path, strings.TrimSpace(lines[i+1]), want)
		}
	}
	for _, cmd := range config.Commands {
		if code, out, _ := runCmd(t, nil, cmd, "-h"); code != 0 || !strings.Contains(out, "usage: processor "+cmd) {
			t.Errorf("%s -h: exit %d, stdout %q: config.Commands names a command processor does not run", cmd, code, out)
		}
	}
}

func checkLayoutPrinted(t *testing.T, out string, topics config.Topics) {
	t.Helper()
	for _, spec := range kafka.TopicLayout(topics) {
		if !strings.Contains(out, spec.Name) {
			t.Errorf("demo output lacks topic %s:\n%s", spec.Name, out)
		}
	}
	if !strings.Contains(out, "topic layout:") || !strings.Contains(out, "16 partitions") {
		t.Errorf("demo output:\n%s", out)
	}
}

// TestDemoEmbedded is `make run` with no broker configured, shortened: the embedded broker, the
// layout printed, relays, indexer and load running, sample answers with cached prefixes, the
// summary, exit 0.
func TestDemoEmbedded(t *testing.T) {
	start := time.Now()
	code, out, errOut := runCmd(t, nil, "demo", "--http.listen=127.0.0.1:0", "--duration=6s", "--table-every=2s",
		"--event-rate=1000", "--query-rate=100", "--http-samples=200")
	if code != 0 {
		t.Fatalf("demo: exit %d, stdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
	if !strings.Contains(out, "ckf-stream: using embedded in-process broker") {
		t.Errorf("demo did not use the embedded broker:\n%s", out)
	}
	checkLayoutPrinted(t, out, config.DefaultTopics(""))
	checkDemoRan(t, out, 4)
	t.Logf("demo took %v:\n%s", time.Since(start).Round(time.Millisecond), out)
}

// checkDemoRan checks the demo's live output and summary.
func checkDemoRan(t *testing.T, out string, dcs int) {
	t.Helper()
	for _, want := range []string{
		fmt.Sprintf("relays: %d DCs published their start-up snapshots", dcs),
		fmt.Sprintf("indexer: all %d lanes ready", dcs),
		"demo summary", "events through the relays:", "queries over Kafka:", "query latency over Kafka:    p50",
		"HTTP query endpoint:         p50",
		// Where to look, where the events flow, and a cached prompt to try by hand.
		"while it runs, look at: the lane page http://127.0.0.1:", "/v1/lanes", "/metrics", "POST http://127.0.0.1:",
		"KV events flow on one topic per DC", "kv-events.dc-dc01",
		"a cached prompt to try by hand while the demo runs:", "curl -s -H 'Content-Type: application/json' -d '{\"",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("demo output lacks %q:\n%s", want, out)
		}
	}
	if !regexp.MustCompile(`sample answer \(OK\): .* depth per DC: .*=[1-9]`).MatchString(out) {
		t.Errorf("no sample answer with a non-zero depth:\n%s", out)
	}
	if m := regexp.MustCompile(`sample answers printed: +(\d+), (\d+) with a non-zero depth`).FindStringSubmatch(out); m == nil || m[2] == "0" {
		t.Errorf("sample answers: %v", m)
	}
	if m := regexp.MustCompile(`ok (\d+), unavailable`).FindStringSubmatch(out); m == nil || m[1] == "0" {
		t.Errorf("no query answered OK over Kafka: %v", m)
	}
}

func TestDemoRealBroker(t *testing.T) {
	prefix := testenv.UniqueName(t, "demo") + "."
	vars := map[string]string{"KAFKA_BROKERS": strings.Join(testenv.Brokers(t), ","), "CKF_TOPIC_PREFIX": prefix}
	topics := config.DefaultTopics(prefix)
	adm := testenv.Admin(t)
	t.Cleanup(func() {
		names := []string{topics.KVEvents + ".dc-dc01", topics.KVEvents + ".dc-dc02"}
		for _, s := range kafka.TopicLayout(topics) {
			names = append(names, s.Name)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_, _ = adm.DeleteTopics(ctx, names...)
	})
	code, out, errOut := runCmd(t, vars, "demo", "--http.listen=127.0.0.1:0", "--dcs=2", "--duration=3s",
		"--table-every=1s", "--event-rate=500", "--query-rate=50", "--http-samples=50")
	if code != 0 {
		t.Fatalf("demo: exit %d, stdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
	checkDemoRan(t, out, 2)
	if !strings.Contains(out, "ckf-stream: using Kafka cluster at "+vars["KAFKA_BROKERS"]) {
		t.Errorf("demo output:\n%s", out)
	}
	checkLayoutPrinted(t, out, topics)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	details, err := adm.ListTopics(ctx, topics.Lanes)
	if err != nil || len(details[topics.Lanes].Partitions) != ckf.LaneCount {
		t.Errorf("lane topic on the broker: %v, %v", details, err)
	}
}

// TestBinaryExitStatus builds the processor and checks real exit statuses.
func TestBinaryExitStatus(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	bin := filepath.Join(t.TempDir(), "processor")
	build := exec.Command("go", "build", "-o", bin, ".")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	for _, tc := range []struct {
		args   []string
		status int
		stderr string
	}{
		{[]string{"demo", "--indexer.verification_window=9"}, exitUsage, "config: indexer.verification_window: 9 is not in [1,8]"},
		{[]string{"indexer"}, exitUsage, "processor: config: indexer.domain: is required by the indexer"},
		{[]string{"config", "print", "--kafka.brokers=b:1", "--kafka.sasl.mechanism=PLAIN", "--kafka.sasl.username=u", "--kafka.sasl.password=pw-xyz"}, 0, ""},
	} {
		cmd := exec.Command(bin, tc.args...)
		cmd.Env = []string{"PATH=" + os.Getenv("PATH")}
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		status := 0
		var exitErr *exec.ExitError
		if errors.As(err, &exitErr) {
			status = exitErr.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		if status != tc.status || !strings.Contains(stderr.String(), tc.stderr) || strings.Contains(stdout.String(), "pw-xyz") {
			t.Errorf("processor %q: status %d, stderr %q, stdout %q; want status %d and %q", tc.args, status, stderr.String(), stdout.String(), tc.status, tc.stderr)
		}
	}
}

// TestDemoWithSASL runs the demo against a kfake broker that requires SCRAM-SHA-512, configured
// only through the environment, as an operator would.
func TestDemoWithSASL(t *testing.T) {
	fake, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.EnableSASL(), kfake.Superuser(config.SASLScramSHA512, "ops", "pw-512"))
	if err != nil {
		t.Fatal(err)
	}
	defer fake.Close()
	vars := map[string]string{
		"KAFKA_BROKERS":            strings.Join(fake.ListenAddrs(), ","),
		"CKF_KAFKA_SASL_MECHANISM": "scram-sha-512",
		"CKF_KAFKA_SASL_USERNAME":  "ops",
		"CKF_KAFKA_SASL_PASSWORD":  "pw-512",
		"CKF_HTTP_LISTEN":          "127.0.0.1:0",
	}
	code, out, errOut := runCmd(t, vars, "demo", "--dcs=1", "--duration=2s", "--table-every=1s", "--event-rate=200",
		"--query-rate=20", "--http-samples=20")
	if code != 0 {
		t.Fatalf("demo with SASL: exit %d, stdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
	checkDemoRan(t, out, 1)
	checkLayoutPrinted(t, out, config.DefaultTopics(""))
	if strings.Contains(out+errOut, "pw-512") {
		t.Errorf("the password appears in the output")
	}

	// kfake drops the connection of a failed authentication (a real broker answers
	// SASL_AUTHENTICATION_FAILED, which ends the start at once): the start fails with the last
	// error seen, before the start timeout.
	vars["CKF_KAFKA_SASL_PASSWORD"] = "wrong"
	vars["CKF_STARTUP_TIMEOUT"] = "2s"
	code, _, errOut = runCmd(t, vars, "demo")
	if code != exitFailure || !strings.Contains(errOut, "processor: demo: start: kafka: Kafka cluster at "+vars["KAFKA_BROKERS"]+": no broker answered before the start timeout (startup_timeout); check kafka.brokers (KAFKA_BROKERS), that the brokers run, and kafka.tls / kafka.sasl: EOF") {
		t.Errorf("demo with a wrong password: exit %d, stderr:\n%s", code, errOut)
	}
}
