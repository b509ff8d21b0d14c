package kafka

import (
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"strings"

	"github.com/ckf-stream/ckf-stream/app/config"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// eofsBeforeRefusal is how many connection attempts in a row a broker may close at once (an EOF
// before its first answer) before waitForBroker reports the security settings as the cause. A
// broker shutting down can close one connection so; a listener of another security protocol
// (a TLS client on a PLAINTEXT port, a client without SASL on a SASL port) closes every one.
const eofsBeforeRefusal = 5

// refusal returns the *config.FieldError naming the setting behind err when err is a refusal that
// retrying does not cure: the broker's certificate is not trusted (kafka.tls.ca_file) or names
// another host (kafka.tls.server_name), the broker refused the client certificate
// (kafka.tls.cert_file) or the SASL credentials (kafka.sasl.password) or mechanism
// (kafka.sasl.mechanism). It returns nil for any other error. eofs is the number of attempts in
// a row, this one included, that the broker closed at once; from eofsBeforeRefusal on, that is
// reported as a security protocol mismatch (kafka.tls.enabled), as is a TLS alert in answer to
// a plaintext request. No case is retried into a
// connection with less security: the client has no other way in than the configured one.
func refusal(cfg config.Kafka, err error, eofs int) error {
	var (
		unknownCA x509.UnknownAuthorityError
		invalid   x509.CertificateInvalidError
		hostname  x509.HostnameError
		opErr     *net.OpError
		firstEOF  *kgo.ErrFirstReadEOF
	)
	field := func(name, format string, a ...any) error {
		return &config.FieldError{Field: name, Reason: fmt.Sprintf(format, a...), Err: err}
	}
	switch {
	case errors.As(err, &unknownCA):
		return field("kafka.tls.ca_file", "the broker's certificate is not signed by a CA of %s: %v", caSource(cfg.TLS), unknownCA)
	case errors.As(err, &invalid):
		return field("kafka.tls.ca_file", "the broker's certificate is not valid for a CA of %s: %v", caSource(cfg.TLS), invalid)
	case errors.As(err, &hostname):
		return field("kafka.tls.server_name", "the broker's certificate does not name the host the client checks (%s): %v",
			serverName(cfg.TLS), hostname)
	case errors.As(err, &opErr) && opErr.Op == "remote error":
		// The broker ends the handshake with a TLS alert (crypto/tls reports a received alert as
		// a "remote error") when it requires a client certificate it does not get, or one its
		// truststore does not trust; with TLS 1.3 the alert arrives on the first read.
		return field("kafka.tls.cert_file", "the broker refused the TLS handshake (%v): it requires a client certificate its truststore accepts (kafka.tls.cert_file, kafka.tls.key_file)", opErr.Err)
	case errors.Is(err, kerr.SaslAuthenticationFailed):
		return field("kafka.sasl.password", "the broker refused the credentials of user %q (%s): check kafka.sasl.username and kafka.sasl.password", cfg.SASL.Username, cfg.SASL.Mechanism)
	case errors.Is(err, kerr.UnsupportedSaslMechanism), errors.Is(err, kerr.IllegalSaslState):
		return field("kafka.sasl.mechanism", "the broker does not take %s on this listener: %v", orNone(cfg.SASL.Mechanism), err)
	case strings.Contains(err.Error(), "tls alert record"):
		// The broker answered a plaintext request with a TLS alert. franz-go (v1.22.3) says so
		// in its error's text only ("... appear to be a tls alert record ...").
		return field("kafka.tls.enabled", "the broker answered with a TLS alert: the port is a TLS listener (SSL or SASL_SSL); set kafka.tls.enabled (and kafka.sasl.* for SASL_SSL)")
	case errors.As(err, &firstEOF) && eofs >= eofsBeforeRefusal:
		if cfg.TLS.Enabled {
			hint := ""
			if cfg.SASL.Mechanism == "" {
				hint = ", or it is a SASL_SSL listener and kafka.sasl.mechanism is not set"
			}
			return field("kafka.tls.enabled", "the broker closed the connection before its first answer %d times in a row: the port is probably not a TLS listener (kafka.brokers names a PLAINTEXT or SASL_PLAINTEXT port)%s", eofs, hint)
		}
		return field("kafka.tls.enabled", "the broker closed the connection before its first answer %d times in a row: the listener probably requires TLS (kafka.tls.enabled) or SASL (kafka.sasl.mechanism, now %s)", eofs, orNone(cfg.SASL.Mechanism))
	}
	return nil
}

func caSource(t config.TLS) string {
	if t.CAFile == "" {
		return "the system roots (kafka.tls.ca_file is empty)"
	}
	return t.CAFile
}

func serverName(t config.TLS) string {
	if t.ServerName == "" {
		return "the broker's host; set kafka.tls.server_name to check another"
	}
	return t.ServerName
}

func orNone(s string) string {
	if strings.TrimSpace(s) == "" {
		return "none"
	}
	return s
}
