package loadgen

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net/http"
	"os"
	"strings"
	"time"
)

// HTTPCredentials are what an indexer whose query API is locked (http.tls.*, http.auth.*, see
// app/indexer/http.md "Access control") asks of a client: a bearer token, a CA to trust its
// certificate, and a client certificate. The zero value asks nothing and trusts the system roots.
type HTTPCredentials struct {
	// TokenFile holds the bearer token (surrounding white space is trimmed, as the server does).
	TokenFile string
	// CAFile is a PEM bundle of the CAs that sign the indexer's certificate (https URLs).
	CAFile string
	// CertFile and KeyFile are the client's certificate and key (PEM), for an indexer that
	// requires client certificates (http.tls.client_ca_file).
	CertFile, KeyFile string
}

// NewHTTPClient builds the HTTP client of processor query --http and processor loadgen --http:
// it trusts CAFile, presents CertFile/KeyFile and sends the token of TokenFile on every request.
// A file that is missing or malformed is an error naming it, at once, not on the first request.
func NewHTTPClient(c HTTPCredentials, timeout time.Duration) (*http.Client, error) {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	if c.CAFile != "" || c.CertFile != "" || c.KeyFile != "" {
		tc := &tls.Config{MinVersion: tls.VersionTLS12}
		if c.CAFile != "" {
			pem, err := os.ReadFile(c.CAFile)
			if err != nil {
				return nil, fmt.Errorf("CA file: %w", err)
			}
			tc.RootCAs = x509.NewCertPool()
			if !tc.RootCAs.AppendCertsFromPEM(pem) {
				return nil, fmt.Errorf("CA file %s holds no PEM certificate", c.CAFile)
			}
		}
		if (c.CertFile == "") != (c.KeyFile == "") {
			return nil, fmt.Errorf("a client certificate needs both its certificate and its key file")
		}
		if c.CertFile != "" {
			pair, err := tls.LoadX509KeyPair(c.CertFile, c.KeyFile)
			if err != nil {
				return nil, fmt.Errorf("client certificate: %w", err)
			}
			tc.Certificates = []tls.Certificate{pair}
		}
		tr.TLSClientConfig = tc
	}
	var rt http.RoundTripper = tr
	if c.TokenFile != "" {
		b, err := os.ReadFile(c.TokenFile)
		if err != nil {
			return nil, fmt.Errorf("token file: %w", err)
		}
		tok := strings.TrimSpace(string(b))
		if tok == "" {
			return nil, fmt.Errorf("token file %s is empty", c.TokenFile)
		}
		rt = bearerTransport{next: tr, header: "Bearer " + tok}
	}
	return &http.Client{Transport: rt, Timeout: timeout}, nil
}

// bearerTransport adds the Authorization header to each request it sends, on a copy of the
// request (a RoundTripper must not modify its input).
type bearerTransport struct {
	next   http.RoundTripper
	header string
}

func (b bearerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", b.header)
	return b.next.RoundTrip(r)
}
