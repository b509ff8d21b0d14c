package kafka

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/ckf-stream/ckf-stream/app/config"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// ClientOpts returns the connection options every client of the process shares: the seed
// brokers, client.id, and TLS and SASL as cfg configures them. brokers overrides cfg.Brokers when
// not empty (the embedded broker's address). It reads the TLS files, so a missing or malformed
// file is reported here, as a *config.FieldError naming the field.
func ClientOpts(cfg config.Kafka, brokers []string) ([]kgo.Opt, error) {
	if len(brokers) == 0 {
		brokers = cfg.Brokers
	}
	opts := []kgo.Opt{
		kgo.SeedBrokers(brokers...),
		kgo.ClientID(cfg.ClientID),
	}
	if cfg.TLS.Enabled {
		tc, err := TLSConfig(cfg.TLS)
		if err != nil {
			return nil, err
		}
		opts = append(opts, kgo.DialTLSConfig(tc))
	}
	if cfg.SASL.Mechanism != "" {
		mech, err := SASLMechanism(cfg.SASL)
		if err != nil {
			return nil, err
		}
		opts = append(opts, kgo.SASL(mech))
	}
	return opts, nil
}

// TLSConfig builds the client TLS configuration: TLS 1.2 or newer, the CA bundle (else the
// system roots), the client key pair when configured, and the server name override.
func TLSConfig(cfg config.TLS) (*tls.Config, error) {
	tc := &tls.Config{
		MinVersion:         tls.VersionTLS12,
		ServerName:         cfg.ServerName,
		InsecureSkipVerify: cfg.InsecureSkipVerify, //nolint:gosec // operator's explicit choice, documented as tests only
	}
	if cfg.CAFile != "" {
		pem, err := os.ReadFile(cfg.CAFile)
		if err != nil {
			return nil, &config.FieldError{Field: "kafka.tls.ca_file", Reason: err.Error(), Err: err}
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, &config.FieldError{Field: "kafka.tls.ca_file", Reason: fmt.Sprintf("%s holds no PEM certificate", cfg.CAFile)}
		}
		tc.RootCAs = pool
	}
	if cfg.CertFile != "" || cfg.KeyFile != "" {
		pair, err := tls.LoadX509KeyPair(cfg.CertFile, cfg.KeyFile)
		if err != nil {
			return nil, &config.FieldError{Field: "kafka.tls.cert_file", Reason: "with kafka.tls.key_file: " + err.Error(), Err: err}
		}
		tc.Certificates = []tls.Certificate{pair}
	}
	return tc, nil
}

// SASLMechanism returns the franz-go mechanism for cfg: PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512.
func SASLMechanism(cfg config.SASL) (sasl.Mechanism, error) {
	user, pass := cfg.Username, cfg.Password.Reveal()
	switch cfg.Mechanism {
	case config.SASLPlain:
		return plain.Auth{User: user, Pass: pass}.AsMechanism(), nil
	case config.SASLScramSHA256:
		return scram.Auth{User: user, Pass: pass}.AsSha256Mechanism(), nil
	case config.SASLScramSHA512:
		return scram.Auth{User: user, Pass: pass}.AsSha512Mechanism(), nil
	default:
		return nil, &config.FieldError{Field: "kafka.sasl.mechanism",
			Reason: fmt.Sprintf("%q is not one of %s, %s, %s", cfg.Mechanism, config.SASLPlain, config.SASLScramSHA256, config.SASLScramSHA512)}
	}
}

// zapLogger adapts a zap logger to franz-go's Logger. franz-go's info level narrates every
// connection and rebalance, so it is used only when the process logs at debug; otherwise
// franz-go logs warnings and errors.
type zapLogger struct {
	l     *zap.Logger
	level kgo.LogLevel
	gate  *logGate // writes stop once it is shut

	mu   sync.Mutex
	last map[string]time.Time // repeated warnings: when each was last written
	hush map[string]int       // and how many were left out since
}

// repeatWindow is how long a client's repeated connection warning (the same message for the
// same broker address) is left out after it was written: a broker that is down would otherwise
// get a line per dial attempt, four a second. The next line written says how many were left out.
const repeatWindow = 30 * time.Second

func newZapLogger(l *zap.Logger, gate *logGate) *zapLogger {
	level := kgo.LogLevelWarn
	if l.Core().Enabled(zapcore.DebugLevel) {
		level = kgo.LogLevelInfo
	}
	// franz-go's warnings and errors are about brokers and connections; a stack trace would show
	// only franz-go's own goroutines, so none is added below fatal.
	l = l.WithOptions(zap.AddStacktrace(zapcore.FatalLevel))
	return &zapLogger{l: l, level: level, gate: gate, last: map[string]time.Time{}, hush: map[string]int{}}
}

// logGate lets loggers write until it is shut, and close waits for the writes in progress: after
// it returns, none of its loggers writes again.
type logGate struct {
	mu   sync.RWMutex
	shut bool
}

// close shuts the gate.
func (g *logGate) close() {
	g.mu.Lock()
	g.shut = true
	g.mu.Unlock()
}

// repeated reports whether a warning or error should be left out as a repeat within
// repeatWindow, keyed by message and broker address, and returns how many were left out before
// one that is written.
func (z *zapLogger) repeated(msg string, keyvals []any) (skip bool, left int) {
	addr := ""
	for i := 0; i+1 < len(keyvals); i += 2 {
		if k, _ := keyvals[i].(string); k == "addr" {
			addr = fmt.Sprint(keyvals[i+1])
		}
	}
	if addr == "" {
		return false, 0
	}
	key := msg + "\x00" + addr
	z.mu.Lock()
	defer z.mu.Unlock()
	now := time.Now()
	if t, ok := z.last[key]; ok && now.Sub(t) < repeatWindow {
		z.hush[key]++
		return true, 0
	}
	z.last[key] = now
	left = z.hush[key]
	delete(z.hush, key)
	return false, left
}

func (z *zapLogger) Level() kgo.LogLevel { return z.level }

func (z *zapLogger) Log(level kgo.LogLevel, msg string, keyvals ...any) {
	var zl zapcore.Level
	switch level {
	case kgo.LogLevelError:
		zl = zapcore.ErrorLevel
	case kgo.LogLevelWarn:
		zl = zapcore.WarnLevel
	case kgo.LogLevelInfo:
		zl = zapcore.InfoLevel
	default:
		zl = zapcore.DebugLevel
	}
	ce := z.l.Check(zl, msg)
	if ce == nil {
		return
	}
	var left int
	if zl >= zapcore.WarnLevel {
		var skip bool
		if skip, left = z.repeated(msg, keyvals); skip {
			return
		}
	}
	fields := make([]zap.Field, 0, len(keyvals)/2+1)
	if left > 0 {
		fields = append(fields, zap.Int("repeats_left_out", left))
	}
	for i := 0; i+1 < len(keyvals); i += 2 {
		key, ok := keyvals[i].(string)
		if !ok {
			key = fmt.Sprint(keyvals[i])
		}
		fields = append(fields, zap.Any(key, keyvals[i+1]))
	}
	z.gate.mu.RLock()
	defer z.gate.mu.RUnlock()
	if !z.gate.shut {
		ce.Write(fields...)
	}
}
