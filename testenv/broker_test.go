package testenv_test

import (
	"context"
	"net"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ckf-stream/ckf-stream/testenv"
)

// TestBrokerLifecycle starts a second, private broker from the scripts, checks that it serves,
// then stops it and checks that no JVM is left behind and the port is closed again.
func TestBrokerLifecycle(t *testing.T) {
	testenv.Brokers(t) // the jars are resolved by the first broker; fail fast with the usual message if absent
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	port := freePort(t)
	b, err := testenv.StartBroker(ctx, testenv.BrokerConfig{
		RunDir: filepath.Join(t.TempDir(), "kafka"),
		Port:   port,
	})
	if err != nil {
		t.Fatalf("start: %v", err)
	}
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			_ = b.Kill()
		}
	})
	if b.Addr() != "127.0.0.1:"+strconv.Itoa(port) {
		t.Fatalf("addr = %q, want port %d", b.Addr(), port)
	}
	rss, err := b.ResidentBytes()
	if err != nil || rss <= 0 {
		t.Fatalf("resident bytes = %d, %v", rss, err)
	}
	t.Logf("broker started in %v, RSS %.0f MiB", b.Startup.Round(time.Millisecond), float64(rss)/(1<<20))
	if err := b.Stop(ctx); err != nil {
		t.Fatalf("stop: %v", err)
	}
	stopped = true
	if testenv.ProcessAlive(b.Pid()) {
		t.Fatalf("broker JVM %d still alive after Stop", b.Pid())
	}
	if c, err := net.DialTimeout("tcp", b.Addr(), time.Second); err == nil {
		c.Close()
		t.Fatalf("port %s still open after Stop", b.Addr())
	}
}

// TestUnreachableBrokerMessageNamesStartCommand checks that the failure a test reports without a
// broker tells the reader how to start one.
func TestUnreachableBrokerMessageNamesStartCommand(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 600*time.Millisecond)
	defer cancel()
	err := testenv.Ping(ctx, []string{"127.0.0.1:" + strconv.Itoa(freePort(t))})
	if err == nil {
		t.Fatal("Ping of a closed port succeeded")
	}
	msg := testenv.UnreachableMessage(err)
	for _, want := range []string{"make kafka-up", "make test", "not reachable"} {
		if !strings.Contains(msg, want) {
			t.Errorf("message %q does not mention %q", msg, want)
		}
	}
}

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}
