//go:build linux

package engine

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ckf-stream/ckf-stream/bridge/engineemu"
	"github.com/ckf-stream/ckf-stream/testenv"
	"github.com/twmb/franz-go/pkg/kgo"
)

// securedUser and securedPassword are the SCRAM-SHA-512 principal of the secured broker.
const (
	securedUser     = "ckf-processes"
	securedPassword = "correct-horse-battery"
)

// The whole product over a locked door: a broker whose only listener the processes are given
// is SASL_SSL (SCRAM-SHA-512 over TLS, client certificates required, certificates made by the
// test), and a relay, an indexer, a bridge of two Go engines and a load generator configured
// with kafka.tls.* and kafka.sasl.*. The engines' chains reach the index through Kafka, and
// every answer equals the engines' exact models (never short); loadgen's events and its queries
// over Kafka (answered by the indexer's query service) go through the same door. Then each
// wrong key gets one error naming the setting to fix, at once rather than at startup_timeout, and
// no process falls back to plaintext: a wrong password (kafka.sasl.password), a CA that did not
// sign the broker (kafka.tls.ca_file), no client certificate (kafka.tls.cert_file), the
// secured configuration pointed at the broker's plaintext port, and a plaintext configuration
// pointed at the SASL_SSL port (both kafka.tls.enabled).
func TestSecuredKafkaEndToEnd(t *testing.T) {
	testenv.NeedKafkaJars(t)
	testenv.Brokers(t) // the broker jars come with the shared broker; fail with its message when absent
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	b, err := testenv.StartSecuredBroker(ctx, testenv.SecuredBrokerConfig{
		RunDir:            filepath.Join(t.TempDir(), "kafka"),
		Users:             map[string]string{securedUser: securedPassword},
		RequireClientCert: true,
	})
	if err != nil {
		t.Fatalf("secured broker: %v", err)
	}
	t.Cleanup(func() { _ = b.Stop(context.Background()) })
	t.Logf("secured broker up in %v: SASL_SSL %s (the processes' only address), plaintext %s", b.Startup.Round(time.Millisecond), b.SecureAddr, b.Addr())

	pki := b.PKI
	secured := []string{
		"CKF_KAFKA_TLS_ENABLED=true",
		"CKF_KAFKA_TLS_CA_FILE=" + pki.CAFile,
		"CKF_KAFKA_TLS_CERT_FILE=" + pki.ClientCertFile,
		"CKF_KAFKA_TLS_KEY_FILE=" + pki.ClientKeyFile,
		"CKF_KAFKA_SASL_MECHANISM=SCRAM-SHA-512",
		"CKF_KAFKA_SASL_USERNAME=" + securedUser,
		"CKF_KAFKA_SASL_PASSWORD=" + securedPassword,
	}
	admin := func() (*kgo.Client, error) {
		opts, err := b.ClientOpts(securedUser)
		if err != nil {
			return nil, err
		}
		return kgo.NewClient(opts...)
	}
	s := newE2EOn(t, []string{b.SecureAddr}, secured, admin)
	s.start()
	f := newFleet(t, s, "bridge", 2, 200)
	f.bridge.Start()
	f.bridge.WaitReady(time.Minute)
	f.waitSubscribed(t)
	if err := f.each(func(e *engineemu.Engine) error { return e.Publish(60, nil) }); err != nil {
		t.Fatal(err)
	}
	r, took := s.converged(newOracle(f.models()...), "answers over the secured cluster converged", 90*time.Second)
	t.Logf("relay, indexer and a bridge of %d engines over SASL_SSL: answers %+v within %v", len(f.engines), r, took.Round(time.Millisecond))
	if v := counter(t, f.bridge, "ckf_bridge_lost_batches"); v != 0 {
		t.Errorf("the bridge reports %v lost batches", v)
	}

	// loadgen: events to a DC no relay reads (the oracle stays exact) and queries over Kafka.
	lg := newProc(t, s.logDir, "loadgen", slices.Clone(s.common), "loadgen", "--dcs=0xdc02", "--duration=2s",
		"--event-rate=200", "--query-rate=20", "--progress=1s", "--seed=5")
	lg.Start()
	<-lg.Done()
	out := readLog(t, lg)
	if err := lg.ExitError(); err != nil {
		t.Fatalf("loadgen over SASL_SSL: %v\n%s", err, out)
	}
	for _, re := range []string{`events (\d{2,}) acknowledged`, `queries \d+ \([0-9.]+/s\): ok [1-9]\d*`} {
		if !regexp.MustCompile(re).MatchString(out) {
			t.Errorf("loadgen output lacks %s:\n%s", re, out)
		}
	}

	other := func(kv ...string) []string {
		env := slices.Clone(s.common)
		for _, v := range kv {
			name := v[:strings.IndexByte(v, '=')+1]
			env = slices.DeleteFunc(env, func(e string) bool { return strings.HasPrefix(e, name) })
			env = append(env, v)
		}
		return env
	}
	for _, c := range []struct {
		name    string
		env     []string
		setting string
	}{
		{"wrong password", other("CKF_KAFKA_SASL_PASSWORD=not-the-password"), "kafka.sasl.password"},
		{"untrusted broker certificate", other("CKF_KAFKA_TLS_CA_FILE=" + pki.OtherCAFile), "kafka.tls.ca_file"},
		{"no client certificate", other("CKF_KAFKA_TLS_CERT_FILE=", "CKF_KAFKA_TLS_KEY_FILE="), "kafka.tls.cert_file"},
		{"SASL_SSL settings against the plaintext port", other("KAFKA_BROKERS=" + b.Addr()), "kafka.tls.enabled"},
		{"plaintext settings against the SASL_SSL port", other("CKF_KAFKA_TLS_ENABLED=false", "CKF_KAFKA_TLS_CA_FILE=",
			"CKF_KAFKA_TLS_CERT_FILE=", "CKF_KAFKA_TLS_KEY_FILE=", "CKF_KAFKA_SASL_MECHANISM=", "CKF_KAFKA_SASL_USERNAME=",
			"CKF_KAFKA_SASL_PASSWORD="), "kafka.tls.enabled"},
	} {
		// A generous start timeout: the refusal must end the start long before it.
		p := newProc(t, s.logDir, "refused-"+strings.ReplaceAll(c.name, " ", "-"), append(c.env, "CKF_STARTUP_TIMEOUT=2m",
			"CKF_INDEXER_CONSUMER_INSTANCE_ID=1002", "CKF_INDEXER_QUERY_GROUP="+s.topics.Queries+"-refused"), "indexer")
		began := time.Now()
		p.Start()
		<-p.Done()
		log := readLog(t, p)
		lines := strings.Split(strings.TrimSpace(log), "\n")
		last := lines[len(lines)-1]
		switch {
		case p.ExitError() == nil:
			t.Errorf("%s: the indexer exited 0\n%s", c.name, log)
		case !strings.Contains(last, c.setting):
			t.Errorf("%s: last line does not name %s: %q\n%s", c.name, c.setting, last, log)
		case strings.Contains(log, "no broker answered before the start timeout"):
			t.Errorf("%s: retried until the start timeout\n%s", c.name, log)
		case strings.Contains(log, "stacktrace"):
			t.Errorf("%s: stack traces in the log\n%s", c.name, strings.Join(slices.DeleteFunc(lines, func(l string) bool { return !strings.Contains(l, "stacktrace") }), "\n"))
		}
		t.Logf("%s: refused after %v: %s", c.name, time.Since(began).Round(time.Millisecond), last)
	}
}

// readLog returns the log of p's latest run.
func readLog(t testing.TB, p *proc) string {
	t.Helper()
	raw, err := os.ReadFile(p.LogPath(p.Runs()))
	if err != nil {
		t.Fatal(err)
	}
	return string(raw)
}
