package kafka_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ckf-stream/ckf-stream/app/config"
	"github.com/ckf-stream/ckf-stream/app/kafka"
	"github.com/ckf-stream/ckf-stream/testenv"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl"
)

// optClient builds a client from opts without connecting, to read the options back.
func optClient(t *testing.T, opts []kgo.Opt) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cl
}

func TestClientOptsPlain(t *testing.T) {
	opts, err := kafka.ClientOpts(config.Kafka{Brokers: []string{"a:9092", "b:9093"}, ClientID: "me"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	cl := optClient(t, opts)
	if got := cl.OptValue(kgo.SeedBrokers).([]string); strings.Join(got, ",") != "a:9092,b:9093" {
		t.Errorf("seed brokers = %v", got)
	}
	if got := cl.OptValue(kgo.ClientID); got != "me" {
		t.Errorf("client id = %v", got)
	}
	if got := cl.OptValue(kgo.SASL).([]sasl.Mechanism); len(got) != 0 {
		t.Errorf("SASL without configuration: %v", got)
	}
	if got := cl.OptValue(kgo.DialTLSConfig).(*tls.Config); got != nil {
		t.Errorf("TLS without configuration: %+v", got)
	}
	// Brokers passed explicitly (the embedded broker) override the configured ones.
	opts, _ = kafka.ClientOpts(config.Kafka{Brokers: []string{"a:9092"}, ClientID: "me"}, []string{"127.0.0.1:1"})
	if got := optClient(t, opts).OptValue(kgo.SeedBrokers).([]string); strings.Join(got, ",") != "127.0.0.1:1" {
		t.Errorf("seed brokers with override = %v", got)
	}
}

func TestClientOptsSASLMechanisms(t *testing.T) {
	for _, mech := range []string{config.SASLPlain, config.SASLScramSHA256, config.SASLScramSHA512} {
		opts, err := kafka.ClientOpts(config.Kafka{
			Brokers: []string{"a:9092"}, ClientID: "me",
			SASL: config.SASL{Mechanism: mech, Username: "u", Password: "p"},
		}, nil)
		if err != nil {
			t.Fatalf("%s: %v", mech, err)
		}
		got := optClient(t, opts).OptValue(kgo.SASL).([]sasl.Mechanism)
		if len(got) != 1 || got[0].Name() != mech {
			t.Errorf("%s: mechanisms %v", mech, got)
		}
	}
	_, err := kafka.SASLMechanism(config.SASL{Mechanism: "GSSAPI", Username: "u", Password: "p"})
	if !errors.Is(err, config.ErrInvalid) || !strings.Contains(err.Error(), "kafka.sasl.mechanism") {
		t.Errorf("GSSAPI: %v", err)
	}
}

// testPKI is a CA, a server certificate for 127.0.0.1 and a client certificate, as PEM files.
type testPKI struct {
	dir                       string
	caFile, certFile, keyFile string // CA bundle; client pair
	serverCert                tls.Certificate
	pool                      *x509.CertPool
}

func newPKI(t *testing.T) testPKI {
	t.Helper()
	dir := t.TempDir()
	write := func(name, typ string, der []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	newKey := func() *ecdsa.PrivateKey {
		k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	caKey := newKey()
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "ckf test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	issue := func(serial int64, usage x509.ExtKeyUsage, ips []net.IP) ([]byte, *ecdsa.PrivateKey) {
		k := newKey()
		der, err := x509.CreateCertificate(rand.Reader, &x509.Certificate{
			SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: "ckf test"},
			NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
			KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{usage}, IPAddresses: ips,
		}, ca, &k.PublicKey, caKey)
		if err != nil {
			t.Fatal(err)
		}
		return der, k
	}
	srvDER, srvKey := issue(2, x509.ExtKeyUsageServerAuth, []net.IP{net.ParseIP("127.0.0.1")})
	cliDER, cliKey := issue(3, x509.ExtKeyUsageClientAuth, nil)
	cliKeyDER, _ := x509.MarshalECPrivateKey(cliKey)
	pool := x509.NewCertPool()
	pool.AddCert(ca)
	return testPKI{
		dir:        dir,
		caFile:     write("ca.pem", "CERTIFICATE", caDER),
		certFile:   write("client.pem", "CERTIFICATE", cliDER),
		keyFile:    write("client-key.pem", "EC PRIVATE KEY", cliKeyDER),
		serverCert: tls.Certificate{Certificate: [][]byte{srvDER}, PrivateKey: srvKey},
		pool:       pool,
	}
}

func TestTLSConfigFromFiles(t *testing.T) {
	pki := newPKI(t)
	tc, err := kafka.TLSConfig(config.TLS{Enabled: true, CAFile: pki.caFile, CertFile: pki.certFile, KeyFile: pki.keyFile, ServerName: "kafka.internal"})
	if err != nil {
		t.Fatal(err)
	}
	if tc.RootCAs == nil || len(tc.Certificates) != 1 || tc.ServerName != "kafka.internal" || tc.MinVersion != tls.VersionTLS12 || tc.InsecureSkipVerify {
		t.Errorf("tls config = %+v", tc)
	}
	opts, err := kafka.ClientOpts(config.Kafka{Brokers: []string{"a:1"}, ClientID: "c", TLS: config.TLS{Enabled: true, CAFile: pki.caFile}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := optClient(t, opts).OptValue(kgo.DialTLSConfig).(*tls.Config); got == nil || got.RootCAs == nil {
		t.Errorf("client TLS option = %+v", got)
	}

	for _, tc := range []struct {
		cfg  config.TLS
		want string
	}{
		{config.TLS{Enabled: true, CAFile: filepath.Join(pki.dir, "missing.pem")}, "config: kafka.tls.ca_file: open "},
		{config.TLS{Enabled: true, CAFile: pki.keyFile}, "config: kafka.tls.ca_file: " + pki.keyFile + " holds no PEM certificate"},
		{config.TLS{Enabled: true, CertFile: pki.certFile, KeyFile: pki.caFile}, "config: kafka.tls.cert_file: with kafka.tls.key_file: "},
	} {
		if _, err := kafka.TLSConfig(tc.cfg); err == nil || !strings.HasPrefix(err.Error(), tc.want) {
			t.Errorf("TLSConfig(%+v) = %v, want %q...", tc.cfg, err, tc.want)
		}
	}
}

// startConn builds a Connection for cfg and ensures the layout within timeout, as the kafka
// module does at start.
func startConn(cfg config.Kafka, timeout time.Duration) (*kafka.Connection, error) {
	conn, err := kafka.New(kafka.Params{Config: cfg, Topics: config.DefaultTopics("")})
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	if err := conn.Start(ctx); err != nil {
		return nil, err // Start closed the connection
	}
	return conn, nil
}

// TestSASLEndToEnd authenticates against kfake with each mechanism, through the same path the
// module uses, and fails with a wrong password.
func TestSASLEndToEnd(t *testing.T) {
	fake, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.EnableSASL(),
		kfake.Superuser(config.SASLPlain, "plain-user", "plain-pw"),
		kfake.Superuser(config.SASLScramSHA256, "s256-user", "s256-pw"),
		kfake.Superuser(config.SASLScramSHA512, "s512-user", "s512-pw"),
	)
	if err != nil {
		t.Fatal(err)
	}
	defer fake.Close()
	for _, c := range []struct{ mech, user, pass string }{
		{config.SASLPlain, "plain-user", "plain-pw"},
		{config.SASLScramSHA256, "s256-user", "s256-pw"},
		{config.SASLScramSHA512, "s512-user", "s512-pw"},
	} {
		cfg := config.Kafka{Brokers: fake.ListenAddrs(), ClientID: "sasl-test", CreateTopics: true,
			SASL: config.SASL{Mechanism: c.mech, Username: c.user, Password: config.Secret(c.pass)}}
		conn, err := startConn(cfg, 10*time.Second)
		if err != nil {
			t.Errorf("%s with the right password: %v", c.mech, err)
			continue
		}
		cl, err := conn.NewClient("producer", kgo.DefaultProduceTopic(conn.Topics.Control))
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		if err := cl.ProduceSync(ctx, &kgo.Record{Value: []byte(c.mech)}).FirstErr(); err != nil {
			t.Errorf("%s: produce: %v", c.mech, err)
		}
		cancel()
		cl.Close()
		conn.Close()

		// franz-go retries a failed authentication until the request's context ends.
		cfg.SASL.Password = "wrong"
		if conn, err := startConn(cfg, time.Second); err == nil {
			conn.Close()
			t.Errorf("%s with a wrong password: started", c.mech)
		} else {
			t.Logf("%s with a wrong password: %v", c.mech, err)
		}
	}
}

// TestTLSEndToEnd connects to a kfake broker that serves TLS and requires a client certificate.
func TestTLSEndToEnd(t *testing.T) {
	pki := newPKI(t)
	fake, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.TLS(&tls.Config{
		Certificates: []tls.Certificate{pki.serverCert},
		ClientAuth:   tls.RequireAndVerifyClientCert,
		ClientCAs:    pki.pool,
		MinVersion:   tls.VersionTLS12,
	}))
	if err != nil {
		t.Fatal(err)
	}
	defer fake.Close()
	cfg := config.Kafka{Brokers: fake.ListenAddrs(), ClientID: "tls-test", CreateTopics: true,
		TLS: config.TLS{Enabled: true, CAFile: pki.caFile, CertFile: pki.certFile, KeyFile: pki.keyFile}}
	conn, err := startConn(cfg, 10*time.Second)
	if err != nil {
		t.Fatalf("TLS with CA and client certificate: %v", err)
	}
	conn.Close()

	// Each refusal ends the start at once with an error naming the setting to fix: the
	// start timeout is long, so a refusal that was retried until it ends would fail the check.
	// (TLS to a plaintext port needs a real broker, which closes the connection on the
	// ClientHello; kfake waits for the rest of the "request": testenv/engine's
	// TestSecuredKafkaEndToEnd checks it.)
	noClientCert := cfg
	noClientCert.TLS.CertFile, noClientCert.TLS.KeyFile = "", ""
	otherCA := cfg
	other, err := testenv.WritePKI(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	otherCA.TLS.CAFile = other.CAFile
	systemRoots := cfg
	systemRoots.TLS.CAFile = ""
	for _, c := range []struct {
		name  string
		cfg   config.Kafka
		field string
	}{
		{"without the client certificate the broker requires", noClientCert, "kafka.tls.cert_file"},
		{"trusting another CA", otherCA, "kafka.tls.ca_file"},
		{"trusting only the system roots", systemRoots, "kafka.tls.ca_file"},
	} {
		conn, err := startConn(c.cfg, time.Minute)
		if err == nil {
			conn.Close()
			t.Errorf("%s: started", c.name)
			continue
		}
		var fe *config.FieldError
		if !errors.As(err, &fe) || fe.Field != c.field {
			t.Errorf("%s: %v; want an error naming %s", c.name, err, c.field)
		}
		t.Logf("%s: %v", c.name, err)
	}
}

// TestQueryOptsSeeds checks that the query path's clients are seeded with kafka.query_brokers
// when it is set, and with kafka.brokers otherwise, while every other client keeps
// kafka.brokers.
func TestQueryOptsSeeds(t *testing.T) {
	for _, tc := range []struct {
		name          string
		query         []string
		wantQueryPath string
	}{
		{"query_brokers set", []string{"q1:9095", "q2:9095"}, "q1:9095,q2:9095"},
		{"query_brokers empty", nil, "a:9092"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			conn, err := kafka.New(kafka.Params{Config: config.Kafka{Brokers: []string{"a:9092"}, QueryBrokers: tc.query, ClientID: "me"}})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(conn.Close)
			if got := optClient(t, conn.QueryOpts("queries")).OptValue(kgo.SeedBrokers).([]string); strings.Join(got, ",") != tc.wantQueryPath {
				t.Errorf("query path seeds = %v, want %s", got, tc.wantQueryPath)
			}
			if got := optClient(t, conn.Opts("lanes")).OptValue(kgo.SeedBrokers).([]string); strings.Join(got, ",") != "a:9092" {
				t.Errorf("lane client seeds = %v, want a:9092", got)
			}
			if got := optClient(t, conn.QueryOpts("queries", kgo.ClientID("other"))).OptValue(kgo.ClientID); got != "other" {
				t.Errorf("extra options do not win over the query path's: client id %v", got)
			}
		})
	}
}
