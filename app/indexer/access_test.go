package indexer_test

import (
	"crypto/tls"
	"crypto/x509"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ckf-stream/ckf-stream/app/httpserver"
	"github.com/ckf-stream/ckf-stream/testenv"
)

// TestEveryRouteIsLocked runs an indexer whose HTTP server serves HTTPS and requires a bearer
// token and a client certificate, and asks every route it registered (the probes, /metrics and
// the query API) with no credentials, a wrong token, the token without a client certificate, and
// both. The probes answer all four; every other route, and a path no route serves, answers 401
// with a Bearer challenge (error="invalid_token" for the wrong token) or 403 without the client
// certificate, with a body that says nothing about the index, and answers normally with both.
func TestEveryRouteIsLocked(t *testing.T) {
	pki, err := testenv.WritePKI(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	const token = "s3cret-bearer-token-0123456789"
	tokenFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokenFile, []byte(token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	r := startIndexerWith(t, testenv.UniqueName(t, "ix")+".",
		"--http.tls.cert_file="+pki.ServerCertFile, "--http.tls.key_file="+pki.ServerKeyFile,
		"--http.tls.client_ca_file="+pki.CAFile, "--http.auth.bearer_token_file="+tokenFile)
	if !strings.HasPrefix(r.base, "https://") {
		t.Fatalf("base %s is not HTTPS", r.base)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(pki.CAPEM)
	pair, err := tls.LoadX509KeyPair(pki.ClientCertFile, pki.ClientKeyFile)
	if err != nil {
		t.Fatal(err)
	}
	client := func(cert bool) *http.Client {
		tc := &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}
		if cert {
			tc.Certificates = []tls.Certificate{pair}
		}
		return &http.Client{Transport: &http.Transport{TLSClientConfig: tc}}
	}
	anonymous, withCert := client(false), client(true)

	type answer struct {
		status          int
		challenge, body string
	}
	ask := func(c *http.Client, pattern, auth string) answer {
		t.Helper()
		method, path, _ := strings.Cut(pattern, " ")
		path = strings.TrimSuffix(path, "{$}")
		var body io.Reader
		if method == http.MethodPost {
			body = strings.NewReader(`{"local_block_hashes": [1, 2, 3]}`)
		}
		req, err := http.NewRequest(method, r.base+path, body)
		if err != nil {
			t.Fatal(err)
		}
		if method == http.MethodPost {
			req.Header.Set("Content-Type", "application/json")
		}
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		resp, err := c.Do(req)
		if err != nil {
			t.Fatalf("%s: %v", pattern, err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return answer{resp.StatusCode, resp.Header.Get("WWW-Authenticate"), string(b)}
	}
	denied := func(a answer) bool { return a.status == http.StatusUnauthorized || a.status == http.StatusForbidden }

	patterns := append(r.srv.Patterns(), "GET /v1/no-such-route")
	for _, want := range []string{"GET /healthz", "GET /readyz", "GET /metrics", "GET /v1/lanes", "POST /v1/prefix-matches"} {
		if !strings.Contains(strings.Join(patterns, "\n"), want) {
			t.Fatalf("the server does not register %s: %v", want, patterns)
		}
	}
	for _, p := range patterns {
		none := ask(anonymous, p, "")
		wrong := ask(withCert, p, "Bearer not-the-token-at-all-000")
		noCert := ask(anonymous, p, "Bearer "+token)
		both := ask(withCert, p, "Bearer "+token)
		if httpserver.IsOpen(p) {
			for _, a := range []answer{none, wrong, noCert, both} {
				if denied(a) {
					t.Errorf("%s is open but answered %d %q", p, a.status, a.body)
				}
			}
			if p == "GET /readyz" && strings.Count(strings.TrimSpace(none.body), "\n") != 0 {
				t.Errorf("/readyz without credentials lists its checks: %q", none.body)
			}
			continue
		}
		if none.status != http.StatusUnauthorized || none.challenge != `Bearer realm="ckf-stream"` || none.body != "unauthorized\n" {
			t.Errorf("%s without credentials: %+v, want 401 with a Bearer challenge and no details", p, none)
		}
		if wrong.status != http.StatusUnauthorized || !strings.Contains(wrong.challenge, `error="invalid_token"`) || wrong.body != "unauthorized\n" {
			t.Errorf("%s with a wrong token: %+v, want 401 invalid_token", p, wrong)
		}
		if noCert.status != http.StatusForbidden || noCert.body != "forbidden\n" {
			t.Errorf("%s with the token and no client certificate: %+v, want 403", p, noCert)
		}
		if denied(both) {
			t.Errorf("%s with the token and a client certificate: %+v", p, both)
		}
		t.Logf("%-32s none %d, wrong token %d, no client cert %d, both %d", p, none.status, wrong.status, noCert.status, both.status)
	}
}
