package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestReplayRefusesBadTraces: a malformed trace line stops processor replay before anything
// starts (exit 2, no broker contacted), naming the file, the line and the field.
func TestReplayRefusesBadTraces(t *testing.T) {
	good := `{"timestamp": 0, "input_length": 600, "output_length": 5, "hash_ids": [0, 1], "unknown": true}` + "\n"
	for _, tc := range []struct {
		name, trace, want string
	}{
		{"bad field", good + `{"timestamp": 1, "input_length": "many", "output_length": 5, "hash_ids": [0]}` + "\n",
			`trace line 2: field "input_length": want a non-negative integer`},
		{"missing field", good + good + `{"timestamp": 1, "input_length": 1, "output_length": 5}` + "\n",
			`trace line 3: field "hash_ids": missing`},
		{"not JSON", "{\n", `trace line 1: not a JSON object`},
		{"empty", "\n", `holds no request`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "trace.jsonl")
			if err := os.WriteFile(path, []byte(tc.trace), 0o644); err != nil {
				t.Fatal(err)
			}
			// A broker nobody listens on: the command must stop before it needs one.
			code, stdout, stderr := runCmd(t, map[string]string{"KAFKA_BROKERS": "127.0.0.1:1"}, "replay", "--trace", path)
			if code == exitOK || !strings.Contains(stderr, tc.want) || stdout != "" {
				t.Errorf("exit %d, stdout %q, stderr %q; want a failure naming %q", code, stdout, stderr, tc.want)
			}
		})
	}
	code, _, stderr := runCmd(t, nil, "replay")
	if code != exitUsage || !strings.Contains(stderr, "--trace is required") {
		t.Errorf("no trace: exit %d, %q", code, stderr)
	}
	code, _, stderr = runCmd(t, nil, "replay", "--trace", "../../traces/conversation_trace.jsonl", "--query", "carrier-pigeon")
	if code != exitUsage || !strings.Contains(stderr, `--query "carrier-pigeon"`) {
		t.Errorf("bad --query: exit %d, %q", code, stderr)
	}
}

// TestReplaySimulateOnly: --simulate-only runs the simulated policies and the stale-index runs,
// millisecond delays included, with no broker (one that nobody listens on is configured), and
// writes the report, with the stale runs as rows of it.
func TestReplaySimulateOnly(t *testing.T) {
	out := t.TempDir()
	code, stdout, stderr := runCmd(t, map[string]string{"KAFKA_BROKERS": "127.0.0.1:1"}, "replay", "--trace", "../../traces/conversation_trace.jsonl",
		"--window", "2m", "--seeds", "1", "--delays", "0s,10ms,60s", "--simulate-only", "--out", out)
	if code != exitOK {
		t.Fatalf("exit %d\n%s\n%s", code, stdout, stderr)
	}
	for _, row := range []string{"ckf-stale-0s", "ckf-stale-10ms", "ckf-stale-1m0s", "oracle-depth"} {
		if !strings.Contains(stdout, row) {
			t.Errorf("no %s row in\n%s", row, stdout)
		}
	}
	if _, err := os.Stat(filepath.Join(out, "report.json")); err != nil {
		t.Error(err)
	}
	if strings.Contains(stdout, "live") && strings.Contains(stdout, "replaying") {
		t.Errorf("a live run was started:\n%s", stdout)
	}
}

// TestReplayRegionsFlags: --regions above the DCs is refused by name, and --regions above 1 on a
// configured cluster is refused before any broker is contacted (each region runs on an
// embedded cluster of its own).
func TestReplayRegionsFlags(t *testing.T) {
	trace := "../../traces/conversation_trace.jsonl"
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--regions", "5"}, "--regions 5 is above --dcs 4"},
		{[]string{"--regions", "2", "--wan-delay", "-1s"}, "--wan-delay -1s is negative"},
		{[]string{"--regions", "2"}, "embedded broker of its own"},
	} {
		args := append([]string{"replay", "--trace", trace, "--window", "1m"}, tc.args...)
		code, stdout, stderr := runCmd(t, map[string]string{"KAFKA_BROKERS": "127.0.0.1:1"}, args...)
		if code != exitUsage || !strings.Contains(stderr, tc.want) || stdout != "" {
			t.Errorf("%v: exit %d, stdout %q, stderr %q; want a usage error naming %q", tc.args, code, stdout, stderr, tc.want)
		}
	}
}
