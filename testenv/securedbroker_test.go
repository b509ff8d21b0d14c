package testenv_test

import (
	"context"
	"errors"
	"net"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/ckf-stream/ckf-stream/testenv"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl/scram"
)

// TestSecuredBroker starts a broker with a SASL_SSL listener (SCRAM-SHA-512 over TLS, client
// certificates required): the test's user gets in and learns only the secured listener from
// metadata; a wrong password is refused with SASL_AUTHENTICATION_FAILED.
func TestSecuredBroker(t *testing.T) {
	testenv.NeedKafkaJars(t)
	testenv.Brokers(t) // the jars are resolved by the first broker; fail fast with the usual message if absent
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	b, err := testenv.StartSecuredBroker(ctx, testenv.SecuredBrokerConfig{
		RunDir:            filepath.Join(t.TempDir(), "kafka"),
		Users:             map[string]string{"ckf": "s3cret-pass"},
		RequireClientCert: true,
	})
	if err != nil {
		t.Fatalf("start: %v", err)
	}
	t.Cleanup(func() { _ = b.Stop(context.Background()) })
	t.Logf("secured broker up in %v (plaintext %s, SASL_SSL %s)", b.Startup.Round(time.Millisecond), b.Addr(), b.SecureAddr)

	opts, err := b.ClientOpts("ckf")
	if err != nil {
		t.Fatal(err)
	}
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if err := cl.Ping(ctx); err != nil {
		t.Fatalf("ping over SASL_SSL: %v", err)
	}
	meta, err := kadm.NewClient(cl).BrokerMetadata(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if bs := meta.Brokers; len(bs) != 1 || net.JoinHostPort(bs[0].Host, strconv.Itoa(int(bs[0].Port))) != b.SecureAddr {
		t.Fatalf("metadata over SASL_SSL names %v, want only %s", bs, b.SecureAddr)
	}

	// kgo.SASL adds to the mechanisms already given, so the wrong password replaces the last option.
	badOpts := append(slices.Clone(opts[:len(opts)-1]), kgo.SASL(scram.Auth{User: "ckf", Pass: "wrong"}.AsSha512Mechanism()))
	bad, err := kgo.NewClient(badOpts...)
	if err != nil {
		t.Fatal(err)
	}
	defer bad.Close()
	if err := bad.Ping(ctx); !errors.Is(err, kerr.SaslAuthenticationFailed) {
		t.Fatalf("wrong password: ping error %v, want SASL_AUTHENTICATION_FAILED", err)
	}
}
