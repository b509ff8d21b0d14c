package testenv

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// RegistryEnv is the environment variable that points tests at a real schema registry: the base
// URL of its Confluent API (http://127.0.0.1:8181/apis/ccompat/v7 for the Apicurio Registry that
// testenv/registry/registry-up.sh starts). It is for tests only; processes read
// schema_registry.urls.
const RegistryEnv = "TEST_SCHEMA_REGISTRY_URL"

// RegistryStartCommand is the command named in failures when no registry is reachable.
const RegistryStartCommand = "make registry-up && export " + RegistryEnv + "=$(cat ${TMPDIR:-/tmp}/ckf-registry/url)   (or run everything with: make test)"

// RegistryRunDir is where registry-up.sh keeps the registry's log, pid and URL unless
// REGISTRY_RUN_DIR says otherwise.
func RegistryRunDir() string {
	if d := os.Getenv("REGISTRY_RUN_DIR"); d != "" {
		return d
	}
	return filepath.Join(os.TempDir(), "ckf-registry")
}

// ConfiguredRegistry returns the registry URL from TEST_SCHEMA_REGISTRY_URL or, when that is
// unset, from the url file registry-up.sh writes; "" when neither names one.
func ConfiguredRegistry() string {
	if u := strings.TrimSpace(os.Getenv(RegistryEnv)); u != "" {
		return strings.TrimRight(u, "/")
	}
	b, err := os.ReadFile(filepath.Join(RegistryRunDir(), "url"))
	if err != nil {
		return ""
	}
	return strings.TrimRight(strings.TrimSpace(string(b)), "/")
}

var registryReach struct {
	once sync.Once
	url  string
	err  error
}

// Registry returns the Confluent API base URL of a reachable schema registry. Without one it
// skips the test with one line naming the command that starts one, or fails it when RequireEnv
// is set (make test). Reachability is checked once per test binary: GET /subjects answering 200,
// retried for up to 15 seconds.
func Registry(t testing.TB) string {
	t.Helper()
	registryReach.once.Do(func() {
		registryReach.url = ConfiguredRegistry()
		if registryReach.url == "" {
			registryReach.err = fmt.Errorf("no schema registry configured: %s is unset and %s does not exist",
				RegistryEnv, filepath.Join(RegistryRunDir(), "url"))
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		defer cancel()
		registryReach.err = pingRegistry(ctx, registryReach.url)
	})
	if registryReach.err != nil {
		missing(t, fmt.Sprintf("this test needs a real schema registry: %v\nstart one with: %s", registryReach.err, RegistryStartCommand))
	}
	return registryReach.url
}

// pingRegistry waits until GET url/subjects answers 200 or ctx ends.
func pingRegistry(ctx context.Context, url string) error {
	var last error
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url+"/subjects", nil)
		if err != nil {
			return fmt.Errorf("registry URL %q: %w", url, err)
		}
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			err = fmt.Errorf("GET %s/subjects: %s", url, resp.Status)
		}
		last = err
		select {
		case <-ctx.Done():
			return fmt.Errorf("registry at %s not reachable: %w", url, last)
		case <-time.After(250 * time.Millisecond):
		}
	}
}
