package main

import (
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func TestTarget(t *testing.T) {
	env := func(kv map[string]string) func(string) string { return func(k string) string { return kv[k] } }
	for _, tc := range []struct {
		args []string
		env  map[string]string
		want string
		err  string
	}{
		{nil, nil, "http://127.0.0.1:8080/readyz", ""},
		{nil, map[string]string{"CKF_HTTP_LISTEN": "0.0.0.0:9000"}, "http://127.0.0.1:9000/readyz", ""},
		{nil, map[string]string{"CKF_HTTP_LISTEN": ":9000", "CKF_HTTP_TLS_CERT_FILE": "/etc/ckf/http-tls/tls.crt"}, "https://127.0.0.1:9000/readyz", ""},
		{[]string{"http://10.0.0.1:8081/healthz"}, map[string]string{"CKF_HTTP_LISTEN": "0.0.0.0:9000"}, "http://10.0.0.1:8081/healthz", ""},
		{nil, map[string]string{"CKF_HTTP_LISTEN": "0.0.0.0"}, "", `CKF_HTTP_LISTEN "0.0.0.0" names no port`},
		{nil, map[string]string{"CKF_HTTP_LISTEN": "127.0.0.1:0"}, "", `CKF_HTTP_LISTEN "127.0.0.1:0" names no port`},
		{[]string{"-h"}, nil, "", "usage: healthcheck [URL]"},
		{[]string{"a", "b"}, nil, "", "usage: healthcheck [URL]"},
	} {
		got, err := target(tc.args, env(tc.env))
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("target(%q, %v): %q, %v; want an error saying %q", tc.args, tc.env, got, err, tc.err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("target(%q, %v) = %q, %v; want %q", tc.args, tc.env, got, err, tc.want)
		}
	}
}

// TestCheck: 200 is healthy; any other answer is not, and the error carries the reason /readyz
// gives; so does a closed port; a self-signed HTTPS server is asked like a plain one.
func TestCheck(t *testing.T) {
	ready := true
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/readyz" {
			http.NotFound(w, r)
			return
		}
		if !ready {
			http.Error(w, "not ready: lane 0 catching up\nmore", http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte("ok\n"))
	})
	plain := httptest.NewServer(handler)
	defer plain.Close()
	secure := httptest.NewTLSServer(handler)
	defer secure.Close()
	for _, base := range []string{plain.URL, secure.URL} {
		ready = true
		if err := check(base + "/readyz"); err != nil {
			t.Errorf("%s ready: %v", base, err)
		}
		ready = false
		err := check(base + "/readyz")
		if err == nil || !strings.Contains(err.Error(), "503 Service Unavailable not ready: lane 0 catching up") || strings.Contains(err.Error(), "more") {
			t.Errorf("%s not ready: %v; want the status and the first line of the reason", base, err)
		}
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	_ = l.Close()
	if err := check("http://" + addr + "/readyz"); err == nil || !strings.Contains(err.Error(), "refused") {
		t.Errorf("closed port: %v; want connection refused", err)
	}
}
