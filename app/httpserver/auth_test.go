package httpserver_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"

	"github.com/ckf-stream/ckf-stream/app/config"
	"github.com/ckf-stream/ckf-stream/app/httpserver"
	"github.com/ckf-stream/ckf-stream/testenv"
)

const testToken = "0123456789abcdef-token"

func tokenFile(t *testing.T, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestAccessSettingErrors: an unreadable or unfit token file, certificate or client CA fails New
// (and NewEarly) with an error naming the setting.
func TestAccessSettingErrors(t *testing.T) {
	pki, err := testenv.WritePKI(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	tlsOn := config.HTTPTLS{CertFile: pki.ServerCertFile, KeyFile: pki.ServerKeyFile}
	for _, c := range []struct {
		name  string
		cfg   config.HTTP
		field string
	}{
		{"missing token file", config.HTTP{Auth: config.HTTPAuth{BearerTokenFile: filepath.Join(t.TempDir(), "absent")}}, "http.auth.bearer_token_file"},
		{"short token", config.HTTP{Auth: config.HTTPAuth{BearerTokenFile: tokenFile(t, "short\n")}}, "http.auth.bearer_token_file"},
		{"two tokens", config.HTTP{Auth: config.HTTPAuth{BearerTokenFile: tokenFile(t, testToken+" "+testToken)}}, "http.auth.bearer_token_file"},
		{"key of another certificate", config.HTTP{TLS: config.HTTPTLS{CertFile: pki.ServerCertFile, KeyFile: pki.ClientKeyFile}}, "http.tls.cert_file"},
		{"client CA file without a certificate", config.HTTP{TLS: config.HTTPTLS{CertFile: tlsOn.CertFile, KeyFile: tlsOn.KeyFile, ClientCAFile: pki.ServerKeyFile}}, "http.tls.client_ca_file"},
	} {
		c.cfg.Listen = "127.0.0.1:0"
		_, err := httpserver.New(httpserver.Params{Config: c.cfg})
		_, earlyErr := httpserver.NewEarly(httpserver.EarlyParams{Config: c.cfg})
		for _, e := range []error{err, earlyErr} {
			var fe *config.FieldError
			if !errors.As(e, &fe) || fe.Field != c.field {
				t.Errorf("%s: %v; want an error naming %s", c.name, e, c.field)
			}
		}
	}
}

// TestBearerToken serves a token-protected server's handler: a route answers 401 without the
// token (Bearer challenge, no details), 401 invalid_token with another one or another scheme's
// credentials, and normally with it (the scheme case-insensitive); /healthz answers without, and
// /readyz lists its checks only to a request with the token.
func TestBearerToken(t *testing.T) {
	s, err := httpserver.New(httpserver.Params{
		Config: config.HTTP{Listen: "127.0.0.1:0", Auth: config.HTTPAuth{BearerTokenFile: tokenFile(t, "\n"+testToken+"\n")}},
		Routes: []httpserver.Route{{Pattern: "GET /v1/lanes", Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			_, _ = io.WriteString(w, "lane table")
		})}},
		Checks: []httpserver.ReadinessCheck{{Name: "lanes", Check: func(context.Context) error { return errors.New("lane 3 of dc 0xdc01 is behind") }}},
	})
	if err != nil {
		t.Fatal(err)
	}
	do := func(path, auth string) *httptest.ResponseRecorder {
		req := httptest.NewRequest(http.MethodGet, path, nil)
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		rec := httptest.NewRecorder()
		s.Handler().ServeHTTP(rec, req)
		return rec
	}
	for _, c := range []struct {
		path, auth, challenge, body string
		status                      int
	}{
		{"/v1/lanes", "", `Bearer realm="ckf-stream"`, "unauthorized\n", 401},
		{"/v1/lanes", "Bearer " + testToken + "x", `Bearer realm="ckf-stream", error="invalid_token"`, "unauthorized\n", 401},
		{"/v1/lanes", "Basic dXNlcjpwYXNz", `Bearer realm="ckf-stream"`, "unauthorized\n", 401},
		{"/v1/lanes", "Bearer " + testToken, "", "lane table", 200},
		{"/v1/lanes", "bearer " + testToken, "", "lane table", 200},
		{"/no-such-path", "", `Bearer realm="ckf-stream"`, "unauthorized\n", 401},
		{"/healthz", "", "", "ok\n", 200},
		{"/readyz", "", "", "not ready\n", 503},
		{"/readyz", "Bearer " + testToken, "", "not ready\nfail lanes: lane 3 of dc 0xdc01 is behind\n", 503},
	} {
		rec := do(c.path, c.auth)
		if rec.Code != c.status || rec.Header().Get("WWW-Authenticate") != c.challenge || rec.Body.String() != c.body {
			t.Errorf("GET %s with %q: %d %q %q; want %d %q %q", c.path, c.auth, rec.Code,
				rec.Header().Get("WWW-Authenticate"), rec.Body.String(), c.status, c.challenge, c.body)
		}
	}
}

// TestEarlyListenerIsLocked: while the process starts, the early listener answers the probes
// without credentials and denies every other path without the token before saying "starting".
func TestEarlyListenerIsLocked(t *testing.T) {
	e, err := httpserver.NewEarly(httpserver.EarlyParams{Config: config.HTTP{Listen: "127.0.0.1:0",
		Auth: config.HTTPAuth{BearerTokenFile: tokenFile(t, testToken)}}})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		path, auth, body string
		status           int
	}{
		{"/healthz", "", "ok starting\n", 200},
		{"/readyz", "", "not ready\n", 503},
		{"/v1/lanes", "", "unauthorized\n", 401},
		{"/v1/lanes", "Bearer " + testToken, "starting\n", 503},
	} {
		req := httptest.NewRequest(http.MethodGet, c.path, nil)
		if c.auth != "" {
			req.Header.Set("Authorization", c.auth)
		}
		rec := httptest.NewRecorder()
		e.ServeHTTP(rec, req)
		if rec.Code != c.status || rec.Body.String() != c.body {
			t.Errorf("GET %s with %q while starting: %d %q; want %d %q", c.path, c.auth, rec.Code, rec.Body.String(), c.status, c.body)
		}
	}
}
