package httpserver

import (
	"crypto/sha256"
	"crypto/subtle"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net/http"
	"os"
	"slices"
	"strings"

	"github.com/ckf-stream/ckf-stream/app/config"
)

// OpenPatterns are the routes that answer without credentials when http.auth or
// http.tls.client_ca_file protects the others: the probes, which kubelets and load balancers ask
// without a token or a client certificate. /readyz then lists its checks only to a request with
// credentials; without, it answers "ready" or "not ready" alone. /metrics is protected: its
// series name topics, lanes, DCs and the index's fill, and Prometheus presents a bearer token
// (authorization.credentials_file) or a client certificate (tls_config) on its scrapes.
func OpenPatterns() []string { return slices.Clone(openPatterns) }

var openPatterns = []string{"GET /healthz", "GET /readyz"}

// minTokenLength is the shortest bearer token http.auth.bearer_token_file may hold.
const minTokenLength = 16

// realm is the realm of the server's WWW-Authenticate challenges.
const realm = "ckf-stream"

// access is the server's access control: the bearer token's digest and whether a verified
// client certificate is required. The zero value lets every request in.
type access struct {
	token      [sha256.Size]byte
	needToken  bool
	needClient bool
}

// newAccess reads the bearer token file, if any.
func newAccess(cfg config.HTTP) (access, error) {
	a := access{needClient: cfg.TLS.ClientCAFile != ""}
	if cfg.Auth.BearerTokenFile == "" {
		return a, nil
	}
	raw, err := os.ReadFile(cfg.Auth.BearerTokenFile)
	if err != nil {
		return a, &config.FieldError{Field: "http.auth.bearer_token_file", Reason: err.Error(), Err: err}
	}
	tok := strings.TrimSpace(string(raw))
	if len(tok) < minTokenLength || strings.ContainsAny(tok, " \t\r\n") {
		return a, &config.FieldError{Field: "http.auth.bearer_token_file",
			Reason: fmt.Sprintf("%s must hold one token of at least %d characters without white space", cfg.Auth.BearerTokenFile, minTokenLength)}
	}
	a.token, a.needToken = sha256.Sum256([]byte(tok)), true
	return a, nil
}

// protected reports whether any route needs credentials.
func (a access) protected() bool { return a.needToken || a.needClient }

// check returns 0 when r carries every credential the server requires, else the status to
// answer: 401 without a bearer token or with a wrong one, 403 without a verified client
// certificate. The token is compared as a SHA-256 digest in constant time, so neither its
// content nor its length shows in the answer's timing.
func (a access) check(r *http.Request) int {
	if a.needToken {
		got, ok := bearer(r)
		if !ok {
			return http.StatusUnauthorized
		}
		sum := sha256.Sum256([]byte(got))
		if subtle.ConstantTimeCompare(sum[:], a.token[:]) != 1 {
			return http.StatusUnauthorized
		}
	}
	if a.needClient && (r.TLS == nil || len(r.TLS.VerifiedChains) == 0) {
		return http.StatusForbidden
	}
	return 0
}

// bearer returns the token of r's "Authorization: Bearer <token>" header (the scheme is
// case-insensitive).
func bearer(r *http.Request) (string, bool) {
	h := r.Header.Get("Authorization")
	scheme, tok, ok := strings.Cut(h, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	tok = strings.TrimSpace(tok)
	return tok, tok != ""
}

// deny answers status with a body that says nothing about the index, and, for 401, the Bearer
// challenge (RFC 6750), with error="invalid_token" when a token was presented.
func (a access) deny(w http.ResponseWriter, r *http.Request, status int) {
	h := w.Header()
	if status == http.StatusUnauthorized {
		challenge := `Bearer realm="` + realm + `"`
		if _, presented := bearer(r); presented {
			challenge += `, error="invalid_token"`
		}
		h.Set("WWW-Authenticate", challenge)
	}
	h.Set("Content-Type", "text/plain; charset=utf-8")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	_, _ = w.Write([]byte(strings.ToLower(http.StatusText(status)) + "\n"))
}

// front puts the access control in front of mux: a request for any route but OpenPatterns, or
// for no route at all (a 404 or 405 would tell which paths exist), is denied without the
// credentials before a handler sees it and before its body is read.
func (a access) front(mux *http.ServeMux) http.Handler {
	if !a.protected() {
		return mux
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, pattern := mux.Handler(r); !IsOpen(pattern) {
			if status := a.check(r); status != 0 {
				a.deny(w, r, status)
				return
			}
		}
		mux.ServeHTTP(w, r)
	})
}

// serverTLS is the HTTPS configuration of http.tls, or nil for plain HTTP. With a client CA, a
// client certificate is verified when presented and not demanded in the handshake, so that the
// probes stay reachable without one; guard demands it on every other route.
func serverTLS(cfg config.HTTPTLS) (*tls.Config, error) {
	if cfg.CertFile == "" {
		return nil, nil
	}
	pair, err := tls.LoadX509KeyPair(cfg.CertFile, cfg.KeyFile)
	if err != nil {
		return nil, &config.FieldError{Field: "http.tls.cert_file", Reason: "with http.tls.key_file: " + err.Error(), Err: err}
	}
	tc := &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{pair}}
	if cfg.ClientCAFile != "" {
		pem, err := os.ReadFile(cfg.ClientCAFile)
		if err != nil {
			return nil, &config.FieldError{Field: "http.tls.client_ca_file", Reason: err.Error(), Err: err}
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, &config.FieldError{Field: "http.tls.client_ca_file", Reason: fmt.Sprintf("%s holds no PEM certificate", cfg.ClientCAFile)}
		}
		tc.ClientCAs, tc.ClientAuth = pool, tls.VerifyClientCertIfGiven
	}
	return tc, nil
}
