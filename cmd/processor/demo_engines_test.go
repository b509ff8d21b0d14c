package main

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/ckf-stream/ckf-stream/app/config"
	"github.com/ckf-stream/ckf-stream/app/kafka"
	"github.com/ckf-stream/ckf-stream/testenv"
	"github.com/twmb/franz-go/pkg/kadm"
)

// The demo with built-in engines on the real broker: each engine emulator speaks vLLM's ZeroMQ
// protocol to a bridge, the bridges write to their DC's topic, and at the end every chain the
// engines hold is answered at full depth by token ids (no false negatives).
func TestDemoWithEngines(t *testing.T) {
	prefix := testenv.UniqueName(t, "demo") + "."
	vars := map[string]string{"KAFKA_BROKERS": strings.Join(testenv.Brokers(t), ","), "CKF_TOPIC_PREFIX": prefix}
	topics := config.DefaultTopics(prefix)
	adm := testenv.Admin(t)
	t.Cleanup(func() {
		names := []string{topics.KVEvents + ".dc-dc01"}
		for _, s := range kafka.TopicLayout(topics) {
			names = append(names, s.Name)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_, _ = adm.DeleteTopics(ctx, names...)
	})
	code, out, errOut := runCmd(t, vars, "demo", "--http.listen=127.0.0.1:0", "--dcs=1", "--duration=3s",
		"--table-every=1s", "--event-rate=200", "--query-rate=20", "--http-samples=20", "--engines=2", "--engine-rate=100")
	if code != 0 {
		t.Fatalf("demo: exit %d, stdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
	if !strings.Contains(out, "engines: 2 built-in engines") {
		t.Errorf("no engines line:\n%s", out)
	}
	m := regexp.MustCompile(`built-in engines: +2 engines, (\d+) batches \((\d+) events`).FindStringSubmatch(out)
	if m == nil || m[1] == "0" || m[2] == "0" {
		t.Errorf("engine totals %v:\n%s", m, out)
	}
	c := regexp.MustCompile(`engine chains answered: +(\d+) of (\d+) resident chains at full depth; false negatives: 0`).FindStringSubmatch(out)
	if c == nil || c[1] != c[2] || c[2] == "0" {
		t.Errorf("engine chains %v:\n%s", c, out)
	}
}

// TestDemoOnASharedBroker: the demo on a real broker without topic_prefix takes topics of its
// own, says so, and deletes them at the end, so that it never meets the lanes another pool owns
// on the default names (a demo beside the README's relay once failed with "relay lane is not
// owned by its pool").
func TestDemoOnASharedBroker(t *testing.T) {
	vars := map[string]string{"KAFKA_BROKERS": strings.Join(testenv.Brokers(t), ",")}
	code, out, errOut := runCmd(t, vars, "demo", "--http.listen=127.0.0.1:0", "--dcs=1", "--duration=1s",
		"--table-every=1s", "--event-rate=100", "--query-rate=10", "--http-samples=0")
	m := regexp.MustCompile(`on topics of its own \(prefix (ckf-demo-[0-9a-z]+\.)\), deleted at the end`).FindStringSubmatch(out)
	if code != 0 || m == nil {
		t.Fatalf("demo: exit %d, prefix %v, stdout:\n%s\nstderr:\n%s", code, m, out, errOut)
	}
	// A deletion the controller has taken reaches every broker's metadata a moment later: wait
	// for the listing to show none of the demo's topics (a fresh client each time, so that no
	// cached metadata answers).
	var left []string
	testenv.WaitUntil(t, 30*time.Second, "no topic of the demo listed", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		listed, err := kadm.NewClient(testenv.Client(t)).ListTopics(ctx)
		if err != nil {
			return false
		}
		left = left[:0]
		for _, name := range listed.Names() {
			if strings.HasPrefix(name, m[1]) {
				left = append(left, name)
			}
		}
		return len(left) == 0
	}, func() string { return fmt.Sprintf("still listed: %v", left) })
}
