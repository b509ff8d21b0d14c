package testenv

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// BrokersEnv is the environment variable that points tests and the processor at a Kafka cluster.
const BrokersEnv = "KAFKA_BROKERS"

// StartCommand is the command named in failures when no broker is reachable.
const StartCommand = "make kafka-up && export KAFKA_BROKERS=$(cat ${TMPDIR:-/tmp}/ckf-kafka/bootstrap)   (or run everything with: make test)"

// DefaultRunDir is where kafka-up.sh keeps the broker's data, log, pid and bootstrap address
// unless KAFKA_RUN_DIR says otherwise.
func DefaultRunDir() string {
	if d := os.Getenv("KAFKA_RUN_DIR"); d != "" {
		return d
	}
	return filepath.Join(os.TempDir(), "ckf-kafka")
}

// ConfiguredBrokers returns the seed brokers from KAFKA_BROKERS or, when that is unset, from the
// bootstrap file kafka-up.sh writes. It returns nil when neither names a broker.
func ConfiguredBrokers() []string {
	raw := strings.TrimSpace(os.Getenv(BrokersEnv))
	if raw == "" {
		b, err := os.ReadFile(filepath.Join(DefaultRunDir(), "bootstrap"))
		if err != nil {
			return nil
		}
		raw = strings.TrimSpace(string(b))
	}
	var out []string
	for _, s := range strings.Split(raw, ",") {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	return out
}

var reach struct {
	once    sync.Once
	brokers []string
	err     error
}

// Brokers returns the seed brokers of a reachable Kafka cluster. Without one it skips the test
// with one line naming the command that starts one, or fails it when RequireEnv is set (make
// test). Reachability is checked once per test binary (a Metadata round trip, retried for up to
// 15 seconds).
func Brokers(t testing.TB) []string {
	t.Helper()
	reach.once.Do(func() {
		reach.brokers = ConfiguredBrokers()
		if len(reach.brokers) == 0 {
			reach.err = fmt.Errorf("no Kafka broker configured: %s is unset and %s does not exist",
				BrokersEnv, filepath.Join(DefaultRunDir(), "bootstrap"))
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		defer cancel()
		reach.err = Ping(ctx, reach.brokers)
	})
	if reach.err != nil {
		missing(t, UnreachableMessage(reach.err))
	}
	return reach.brokers
}

// Ping waits until the cluster at brokers answers a Metadata request or ctx ends.
func Ping(ctx context.Context, brokers []string) error {
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		return fmt.Errorf("kafka client for %v: %w", brokers, err)
	}
	defer cl.Close()
	var last error
	for {
		pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		last = cl.Ping(pctx)
		cancel()
		if last == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("kafka at %v not reachable: %w", brokers, last)
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// UnreachableMessage is the failure text of a test that needs a broker and found none.
func UnreachableMessage(err error) string {
	return fmt.Sprintf("this test needs a real Kafka broker: %v\nstart one with: %s", err, StartCommand)
}
