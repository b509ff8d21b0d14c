package main

import (
	"bytes"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ckf-stream/ckf-stream/testenv"
)

// TestWrongBroker: an indexer pointed at an address where no broker listens answers /healthz
// (200) and /readyz (503) while it waits, says once what it waits for and what to check, logs no
// stack trace and no line per dial attempt, and ends (startup_timeout) with one line naming
// kafka.brokers. It once served no HTTP at all until Kafka answered, wrote a warning per dial
// attempt (four a second) and three stack traces. An indexer, relay or loadgen with no broker
// configured refuses to start instead of running on a private embedded broker no other process
// can reach.
func TestWrongBroker(t *testing.T) {
	for _, args := range [][]string{
		{"indexer", "--indexer.domain=" + testDomain, "--indexer.lanes=0=0x10"},
		{"relay", "--indexer.domain=" + testDomain, "--indexer.lanes=0=0x10", "--relay.dc_id=0x10", "--relay.lane=0"},
		{"loadgen"},
	} {
		code, _, errOut := runCmd(t, nil, append(args, "--http.listen=127.0.0.1:0")...)
		if code != exitUsage || !strings.Contains(errOut, "kafka.brokers: is required by "+args[0]) {
			t.Errorf("%s without brokers: exit %d, stderr %q", args[0], code, errOut)
		}
	}

	listen, dead := testenv.FreeAddr(t), testenv.FreeAddr(t) // nothing listens on dead
	type result struct {
		code   int
		stderr string
	}
	done := make(chan result, 1)
	go func() {
		var out, errOut bytes.Buffer
		code := run([]string{"indexer", "--indexer.domain=" + testDomain, "--indexer.lanes=0=0x10",
			"--http.listen=" + listen, "--kafka.brokers=" + dead, "--startup_timeout=8s"},
			&out, &errOut, func(string) (string, bool) { return "", false })
		done <- result{code, errOut.String()}
	}()
	var res *result
	healthz, readyz := 0, 0
	c := &http.Client{Timeout: time.Second}
	get := func(path string) int {
		resp, err := c.Get("http://" + listen + path)
		if err != nil {
			return 0
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	testenv.WaitUntil(t, 2*time.Minute, "/healthz to answer while the broker does not, or the start to fail", func() bool {
		select {
		case r := <-done:
			res = &r
			return true
		default:
		}
		healthz, readyz = get("/healthz"), get("/readyz")
		return healthz != 0
	})
	if healthz != http.StatusOK || readyz != http.StatusServiceUnavailable {
		t.Errorf("while waiting for the broker: /healthz %d, /readyz %d; want 200 and 503", healthz, readyz)
	}
	if res == nil {
		r := <-done
		res = &r
	}
	lines := strings.Split(strings.TrimSpace(res.stderr), "\n")
	last := lines[len(lines)-1]
	if res.code != exitFailure || !strings.HasPrefix(last, "processor: indexer: start:") || !strings.Contains(last, "check kafka.brokers") {
		t.Errorf("exit %d, last line %q", res.code, last)
	}
	if n := strings.Count(res.stderr, "unable to open connection to broker"); n > 1 {
		t.Errorf("%d dial warnings, want at most one", n)
	}
	if n := strings.Count(res.stderr, "no Kafka broker answers yet"); n != 1 {
		t.Errorf("%d lines say what the process waits for, want 1", n)
	}
	if strings.Contains(res.stderr, "stacktrace") {
		t.Errorf("stack traces in the log:\n%s", res.stderr)
	}
	t.Logf("%d lines of stderr:\n%s", len(lines), res.stderr)
}

// TestBridgeOverlappingRankPortsIsOneLine: the data-parallel engines file the README once showed
// (two ranks on PUB 5557 and replay 5558, where rank 1's PUB port is rank 0's replay port), and
// the same ports given to the one engine of bridge.endpoint, are refused before anything starts:
// exit status 2 and one line naming the setting, not fx's "could not build arguments for
// function ..." around it.
func TestBridgeOverlappingRankPortsIsOneLine(t *testing.T) {
	file := filepath.Join(t.TempDir(), "engines.yaml")
	if err := os.WriteFile(file, []byte("engines:\n"+
		"  - {worker_id: 17, endpoint: \"tcp://engine-a:5557\", replay_endpoint: \"tcp://engine-a:5558\"}\n"+
		"  - {worker_id: 18, endpoint: \"tcp://engine-b:5557\", replay_endpoint: \"tcp://engine-b:5558\", ranks: 2}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--bridge.engines_file=" + file}, "processor: config: bridge.engines_file: " + file +
			": engine 1 (worker 18): replay_endpoint: rank 0's replay endpoint tcp://engine-b:5558 is rank 1's PUB endpoint"},
		{[]string{"--bridge.endpoint=tcp://engine-b:5557", "--bridge.replay_endpoint=tcp://engine-b:5558", "--bridge.ranks=2"},
			"processor: config: bridge.replay_endpoint: rank 0's replay endpoint tcp://engine-b:5558 is rank 1's PUB endpoint"},
	} {
		code, _, errOut := runCmd(t, nil, append([]string{"bridge", "--kafka.brokers=127.0.0.1:9", "--http.listen=127.0.0.1:0"}, c.args...)...)
		lines := strings.Split(strings.TrimSpace(errOut), "\n")
		if code != exitUsage || len(lines) != 1 || !strings.HasPrefix(lines[0], c.want) || strings.Contains(errOut, "could not build") {
			t.Errorf("bridge %v: exit %d, stderr %q; want 2 and one line starting %q", c.args, code, errOut, c.want)
		}
	}
}
