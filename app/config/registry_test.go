package config_test

import (
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/ckf-stream/ckf-stream/app/config"
)

func TestSchemaRegistryDefaultsToBuiltinIDs(t *testing.T) {
	r := config.Default().SchemaRegistry
	if r.Enabled() || r.URLs != nil || r.Timeout != 10*time.Second || r.LookupOnly || r.Username != "" || r.Password != "" {
		t.Fatalf("default schema_registry %+v", r)
	}
	// An empty list in a file means no registry, like no key at all.
	cfg := mustLoad(t, []string{"--config", writeFile(t, "c.yaml", "schema_registry:\n  urls: []\n")}, nil)
	if cfg.SchemaRegistry.Enabled() || cfg.SchemaRegistry.URLs != nil {
		t.Fatalf("urls: [] gave %+v", cfg.SchemaRegistry)
	}
}

func TestSchemaRegistryFromEnvironmentFileAndFlags(t *testing.T) {
	const pw = "registry-pass-never-printed"
	cfg := mustLoad(t, []string{"--schema_registry.lookup_only"}, map[string]string{
		"CKF_SCHEMA_REGISTRY_URLS":     "http://a:8080/apis/ccompat/v7, https://b/apis/ccompat/v7",
		"CKF_SCHEMA_REGISTRY_USERNAME": "svc",
		"CKF_SCHEMA_REGISTRY_PASSWORD": pw,
		"CKF_SCHEMA_REGISTRY_TIMEOUT":  "3s",
	})
	want := config.SchemaRegistry{URLs: []string{"http://a:8080/apis/ccompat/v7", "https://b/apis/ccompat/v7"},
		Username: "svc", Password: config.Secret(pw), Timeout: 3 * time.Second, LookupOnly: true}
	if !reflect.DeepEqual(cfg.SchemaRegistry, want) || !cfg.SchemaRegistry.Enabled() {
		t.Fatalf("schema_registry %+v, want %+v", cfg.SchemaRegistry, want)
	}
	y, _ := cfg.Marshal("yaml")
	for name, s := range map[string]string{"yaml": string(y), "%+v": fmt.Sprintf("%+v", cfg)} {
		if strings.Contains(s, pw) || !strings.Contains(s, config.Redacted) {
			t.Errorf("%s output shows the registry password or no %s:\n%s", name, config.Redacted, s)
		}
	}
	file := writeFile(t, "c.yaml", "schema_registry:\n  urls: [http://r:8181/apis/ccompat/v7]\n  timeout: 250ms\n")
	cfg = mustLoad(t, []string{"--config", file}, nil)
	if got := cfg.SchemaRegistry; len(got.URLs) != 1 || got.URLs[0] != "http://r:8181/apis/ccompat/v7" || got.Timeout != 250*time.Millisecond || got.LookupOnly {
		t.Fatalf("from file: %+v", got)
	}
	if parts := config.Split(cfg); !reflect.DeepEqual(parts.SchemaRegistry, cfg.SchemaRegistry) {
		t.Fatalf("Split lost the schema_registry section: %+v", parts.SchemaRegistry)
	}
}

func TestSchemaRegistryInvalid(t *testing.T) {
	const url = "--schema_registry.urls=http://r:8181/apis/ccompat/v7"
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--schema_registry.urls=r:8181"}, `config: schema_registry.urls[0]: "r:8181" is not an http or https URL`},
		{[]string{"--schema_registry.urls=http://a:1,ftp://b"}, `config: schema_registry.urls[1]: "ftp://b" is not an http or https URL`},
		{[]string{"--schema_registry.urls=http:///apis"}, `config: schema_registry.urls[0]: "http:///apis" has no host`},
		{[]string{"--schema_registry.urls=http://%zz"}, `config: schema_registry.urls[0]: "http://%zz" is not a URL`},
		{[]string{"--schema_registry.urls=http://u:p@r:8181"}, "config: schema_registry.urls[0]: holds credentials; use schema_registry.username and schema_registry.password"},
		{[]string{"--schema_registry.urls=http://r:8181/x?y=1"}, `config: schema_registry.urls[0]: "http://r:8181/x?y=1" has a query or fragment`},
		{[]string{"--schema_registry.username=u", "--schema_registry.password=p"}, "config: schema_registry.username: is set, but schema_registry.urls is empty"},
		{[]string{"--schema_registry.lookup_only"}, "config: schema_registry.lookup_only: is set, but schema_registry.urls is empty"},
		{[]string{url, "--schema_registry.username=u"}, "config: schema_registry.password: is required when schema_registry.username is set"},
		{[]string{url, "--schema_registry.password=p"}, "config: schema_registry.username: is required when schema_registry.password is set"},
		{[]string{url, "--schema_registry.timeout=0s"}, "config: schema_registry.timeout: 0s is not positive"},
	} {
		_, err := config.Load(config.Sources{Args: tc.args, LookupEnv: env(nil)})
		var fe *config.FieldError
		if err == nil || !strings.Contains(err.Error(), tc.want) || !errors.Is(err, config.ErrInvalid) || !errors.As(err, &fe) {
			t.Errorf("Load(%q) = %v\nwant a FieldError containing %q", tc.args, err, tc.want)
		}
		if err != nil && strings.Contains(err.Error(), "p@") {
			t.Errorf("Load(%q): the message repeats the URL's credentials: %v", tc.args, err)
		}
	}
	if _, err := config.Load(config.Sources{Args: []string{url, "--schema_registry.username=u", "--schema_registry.password=p", "--schema_registry.lookup_only"}, LookupEnv: env(nil)}); err != nil {
		t.Fatalf("a full registry setting: %v", err)
	}
}
