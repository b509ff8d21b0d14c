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
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TestBrokerLifecycle starts a second, private broker from the scripts, checks that it serves,
// then stops it and checks that no JVM is left behind and the port is closed again.
func TestBrokerLifecycle(t *testing.T) {
	testenv.NeedKafkaJars(t)
	testenv.Brokers(t) // the jars are resolved by the first broker; fail fast with the usual message if absent
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	port := testenv.FreePort(t)
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
	err := testenv.Ping(ctx, []string{"127.0.0.1:" + strconv.Itoa(testenv.FreePort(t))})
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

// TestBrokerRestartKeepsData restarts a private broker on its data: records acknowledged before
// the restart are read back after it.
func TestBrokerRestartKeepsData(t *testing.T) {
	testenv.NeedKafkaJars(t)
	testenv.Brokers(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	b, err := testenv.StartBroker(ctx, testenv.BrokerConfig{RunDir: filepath.Join(t.TempDir(), "kafka")})
	if err != nil {
		t.Fatalf("start: %v", err)
	}
	t.Cleanup(func() { _ = b.Kill() })
	cl, err := kgo.NewClient(kgo.SeedBrokers(b.Addr()), kgo.DefaultProduceTopic("restart"), kgo.AllowAutoTopicCreation())
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if _, err := kadm.NewClient(cl).CreateTopic(ctx, 1, 1, nil, "restart"); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 100; i++ {
		if err := cl.ProduceSync(ctx, &kgo.Record{Value: []byte(strconv.Itoa(i))}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	firstPid := b.Pid()
	if err := b.Restart(ctx); err != nil {
		t.Fatalf("restart: %v", err)
	}
	if b.Pid() == firstPid || testenv.ProcessAlive(firstPid) {
		t.Fatalf("restart kept the old JVM %d", firstPid)
	}
	rd, err := kgo.NewClient(kgo.SeedBrokers(b.Addr()), kgo.ConsumeTopics("restart"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close()
	got := 0
	for got < 100 {
		fs := rd.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("read back %d of 100 records after the restart", got)
		}
		fs.EachRecord(func(r *kgo.Record) {
			if string(r.Value) != strconv.Itoa(int(r.Offset)) {
				t.Fatalf("offset %d holds %q", r.Offset, r.Value)
			}
			got++
		})
	}
	t.Logf("restart took %v", b.Startup.Round(time.Millisecond))
}
