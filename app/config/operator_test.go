package config_test

import (
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ckf-stream/ckf-stream/app/config"
)

// TestFileAsOperatorsWriteIt: a configuration file accepts a list as one comma-separated string,
// as the variables and flags do (brokers: host:9092); a bare number for a duration says which
// duration to write; and each problem of a file is reported on a line of its own, with its line
// number. The file once refused a string list with a YAML unmarshal message, gave no hint for
// durations, and ran several errors together on one line.
func TestFileAsOperatorsWriteIt(t *testing.T) {
	cfg := mustLoad(t, []string{"--config", writeFile(t, "ok.yaml", "kafka:\n  brokers: host:9092\n  query_brokers: a:1, b:2\n")}, nil)
	if !slices.Equal(cfg.Kafka.Brokers, []string{"host:9092"}) || !slices.Equal(cfg.Kafka.QueryBrokers, []string{"a:1", "b:2"}) {
		t.Errorf("brokers %q, query brokers %q", cfg.Kafka.Brokers, cfg.Kafka.QueryBrokers)
	}
	p := writeFile(t, "bad.yaml", "kafka:\n  bokers: host:9092\nshutdown_timeout: 60\nindexer:\n  verification_window: two\n")
	_, err := config.Load(config.Sources{Args: []string{"--config", p}, LookupEnv: env(nil)})
	if err == nil {
		t.Fatal("no error")
	}
	lines := strings.Split(err.Error(), "\n")
	want := []string{
		`config: file ` + p + `: line 2: unknown key "bokers" in kafka`,
		`config: shutdown_timeout: file ` + p + ` line 3: 60 is not a duration: write it with a unit, like 60s`,
		`config: file ` + p + `: line 5: cannot unmarshal !!str ` + "`two`" + ` into int`,
	}
	if len(lines) != len(want) {
		t.Fatalf("%d error lines, want %d:\n%v", len(lines), len(want), err)
	}
	for i, w := range want {
		if !strings.HasPrefix(lines[i], w) {
			t.Errorf("error line %d: %q, want it to start with %q", i+1, lines[i], w)
		}
	}
	// A duration with its unit is fine.
	if cfg := mustLoad(t, []string{"--config", writeFile(t, "d.yaml", "shutdown_timeout: 60s\n")}, nil); cfg.ShutdownTimeout != time.Minute {
		t.Errorf("shutdown_timeout %v", cfg.ShutdownTimeout)
	}
}

// TestMisspelledVariableWarns: a CKF_ variable no setting reads is reported with the closest
// setting's variable (it was silently ignored); Kubernetes service links and real settings are not.
func TestMisspelledVariableWarns(t *testing.T) {
	t.Setenv("CKF_INDEXER_LANE", "0=0x10")
	t.Setenv("CKF_INDEXER_SERVICE_HOST", "10.0.0.1")
	t.Setenv("CKF_INDEXER_PORT", "tcp://10.0.0.1:8080")
	t.Setenv("CKF_LOG_LEVEL", "warn")
	var warnings []string
	if _, err := config.Load(config.Sources{LookupEnv: os.LookupEnv, Warn: func(m string) { warnings = append(warnings, m) }}); err != nil {
		t.Fatal(err)
	}
	// The test binary's own environment may hold other CKF_ variables (make's): look at ours.
	var lane int
	for _, w := range warnings {
		switch {
		case strings.HasPrefix(w, "CKF_INDEXER_LANE is not the variable of any setting and is ignored (did you mean CKF_INDEXER_LANES?)"):
			lane++
		case strings.HasPrefix(w, "CKF_INDEXER_SERVICE_HOST"), strings.HasPrefix(w, "CKF_INDEXER_PORT"), strings.HasPrefix(w, "CKF_LOG_LEVEL"):
			t.Errorf("warning about a variable that is fine: %q", w)
		}
	}
	if lane != 1 {
		t.Errorf("warnings %q; want one about CKF_INDEXER_LANE", warnings)
	}
}
