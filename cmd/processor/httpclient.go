package main

import (
	"flag"
	"net/http"
	"time"

	appload "github.com/ckf-stream/ckf-stream/app/loadgen"
)

// httpClientFlags are the credentials processor query --http and processor loadgen --http present
// to an indexer whose query API is locked (app/indexer/http.md, "Access control").
type httpClientFlags struct {
	creds appload.HTTPCredentials
}

func (f *httpClientFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.creds.TokenFile, "token-file", "", "with --http: send the bearer token in this `file` (the indexer's http.auth.bearer_token_file)")
	fs.StringVar(&f.creds.CAFile, "ca-file", "", "with --http https://...: trust the CAs in this PEM `file` (default: the system's)")
	fs.StringVar(&f.creds.CertFile, "cert-file", "", "with --http https://...: present this client certificate (PEM `file`), with --key-file")
	fs.StringVar(&f.creds.KeyFile, "key-file", "", "the client certificate's key (PEM `file`)")
}

// client builds the HTTP client; the error names the flag's file.
func (f *httpClientFlags) client(timeout time.Duration) (*http.Client, error) {
	return appload.NewHTTPClient(f.creds, timeout)
}
