package testenv

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// RequireEnv is the variable that, set to anything but empty or "0", makes a missing broker,
// registry or Kafka distribution fail the tests that need one; make test sets it. Without it such tests skip with
// one line, so that `go test ./...` and `make test-unit` run every in-process test on a machine
// with no broker and no network.
const RequireEnv = "CKF_REQUIRE_BROKER"

// Required reports whether RequireEnv is set.
func Required() bool {
	v := strings.TrimSpace(os.Getenv(RequireEnv))
	return v != "" && v != "0"
}

// missing fails t with msg when the broker is required, and otherwise skips it with msg's first
// line and the way to run it.
func missing(t testing.TB, msg string) {
	t.Helper()
	if Required() {
		t.Fatal(msg)
	}
	first, _, _ := strings.Cut(msg, "\n")
	t.Skipf("%s (skipped: %s=1, which make test sets, makes this a failure)", first, RequireEnv)
}

// KafkaResolved reports whether the Kafka distribution's jars are in place (kafka-up.sh
// --resolve-only puts them there from Maven Central), so that a broker, a cluster or
// MirrorMaker can start without the network.
func KafkaResolved() bool {
	m, _ := filepath.Glob(filepath.Join(ScriptDir(), "libs", "kafka_*.jar"))
	return len(m) > 0
}

// InProcessEnv is the variable that, set to anything but empty or "0", limits a run to
// in-process tests: NeedKafkaJars skips even where the jars are resolved, so that no test starts
// a broker JVM of its own. make test-unit sets it.
const InProcessEnv = "CKF_IN_PROCESS_ONLY"

// NeedKafkaJars skips t (or fails it, RequireEnv) when the Kafka distribution is not resolved,
// and skips it under InProcessEnv: the tests that start brokers of their own call it first.
func NeedKafkaJars(t testing.TB) {
	t.Helper()
	if v := strings.TrimSpace(os.Getenv(InProcessEnv)); v != "" && v != "0" {
		t.Skipf("this test starts Kafka brokers of its own (skipped: %s is set)", InProcessEnv)
	}
	if !KafkaResolved() {
		missing(t, "this test starts Kafka brokers of its own and the Kafka jars are not resolved: bash "+
			filepath.Join(ScriptDir(), "kafka-up.sh")+" --resolve-only")
	}
}
