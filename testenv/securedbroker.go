package testenv

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl/scram"
)

// SecuredBrokerConfig describes a broker that StartSecuredBroker launches: a single node like
// StartBroker's, on its own ports and run directory, with a second client listener that takes
// SASL_SSL only.
type SecuredBrokerConfig struct {
	// RunDir is the broker's run directory (wiped at every start); the PKI is written next to
	// it, in RunDir + "-pki". Required: the shared broker's default must not be reused.
	RunDir string
	// Users are the SCRAM-SHA-512 principals and their passwords, created at format time.
	Users map[string]string
	// RequireClientCert makes the SASL_SSL listener require a client certificate signed by the
	// PKI's CA (ssl.client.auth=required) on top of SASL.
	RequireClientCert bool
}

// SecuredBroker is a broker with two client listeners: PLAINTEXT on Addr, for the test's own
// set-up and checks (and for the plaintext-port negative test), and SASL_SSL with
// SCRAM-SHA-512 on SecureAddr, for the processes under test.
type SecuredBroker struct {
	*Broker
	// SecureAddr is the SASL_SSL listener (host:port). A client that comes in there learns only
	// that listener's addresses from metadata.
	SecureAddr string
	PKI        *PKI
	Users      map[string]string
	cfg        SecuredBrokerConfig
}

// StartSecuredBroker writes a PKI and the SASL_SSL listener's properties, then starts the broker
// (StartBroker) with the SCRAM users created at format time. The server's key and certificate
// chain are given to Kafka inline as PEM (ssl.keystore.type=PEM), so no keytool is needed.
func StartSecuredBroker(ctx context.Context, cfg SecuredBrokerConfig) (*SecuredBroker, error) {
	if cfg.RunDir == "" {
		return nil, fmt.Errorf("testenv: SecuredBrokerConfig.RunDir is required")
	}
	pkiDir := strings.TrimRight(cfg.RunDir, "/") + "-pki"
	pki, err := WritePKI(pkiDir)
	if err != nil {
		return nil, err
	}
	ports, err := freeLoopbackPorts(3)
	if err != nil {
		return nil, err
	}
	plain, controller, secure := ports[0], ports[1], ports[2]
	clientAuth := "none"
	if cfg.RequireClientCert {
		clientAuth = "required"
	}
	lsn := "listener.name.sasl_ssl."
	props := []string{
		fmt.Sprintf("listeners=PLAINTEXT://127.0.0.1:%d,CONTROLLER://127.0.0.1:%d,SASL_SSL://127.0.0.1:%d", plain, controller, secure),
		fmt.Sprintf("advertised.listeners=PLAINTEXT://127.0.0.1:%d,SASL_SSL://127.0.0.1:%d", plain, secure),
		"listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT,SASL_SSL:SASL_SSL",
		"sasl.enabled.mechanisms=SCRAM-SHA-512",
		lsn + "sasl.enabled.mechanisms=SCRAM-SHA-512",
		lsn + "scram-sha-512.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required;",
		lsn + "ssl.keystore.type=PEM",
		lsn + "ssl.keystore.certificate.chain=" + propertyValue(pki.ServerCertPEM),
		lsn + "ssl.keystore.key=" + propertyValue(pki.ServerKeyPEM),
		lsn + "ssl.truststore.type=PEM",
		lsn + "ssl.truststore.certificates=" + propertyValue(pki.CAPEM),
		lsn + "ssl.client.auth=" + clientAuth,
	}
	extra := filepath.Join(pkiDir, "secured.properties")
	if err := os.WriteFile(extra, []byte(strings.Join(props, "\n")+"\n"), 0o600); err != nil {
		return nil, err
	}
	var users []string
	for name, pass := range cfg.Users {
		users = append(users, fmt.Sprintf("SCRAM-SHA-512=[name=%s,password=%s]", name, pass))
	}
	b, err := StartBroker(ctx, BrokerConfig{RunDir: cfg.RunDir, Port: plain, ControllerPort: controller,
		ExtraConfig: extra, ScramUsers: users})
	if err != nil {
		return nil, err
	}
	return &SecuredBroker{Broker: b, SecureAddr: fmt.Sprintf("127.0.0.1:%d", secure), PKI: pki, Users: cfg.Users, cfg: cfg}, nil
}

// propertyValue writes PEM as one Java properties value: each line break becomes the \n escape,
// which Properties.load turns back into a line break.
func propertyValue(pem []byte) string {
	return strings.ReplaceAll(strings.TrimSpace(string(pem)), "\n", `\n`)
}

// ClientOpts are franz-go options that reach the SASL_SSL listener as user (one of Users), with
// the PKI's CA and, when the listener requires one, its client certificate. The SASL option is
// the last one.
func (b *SecuredBroker) ClientOpts(user string) ([]kgo.Opt, error) {
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(b.PKI.CAPEM)
	tc := &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	if b.cfg.RequireClientCert {
		pair, err := tls.LoadX509KeyPair(b.PKI.ClientCertFile, b.PKI.ClientKeyFile)
		if err != nil {
			return nil, err
		}
		tc.Certificates = []tls.Certificate{pair}
	}
	return []kgo.Opt{
		kgo.SeedBrokers(b.SecureAddr),
		kgo.DialTLSConfig(tc),
		kgo.SASL(scram.Auth{User: user, Pass: b.Users[user]}.AsSha512Mechanism()),
	}, nil
}
