//go:build linux

package faults

import (
	"flag"
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/ckf-stream/ckf-stream/testenv"
)

var longMode = flag.Bool("long", false, "the long fault suite: five times the iterations, longer holds")

// processorBin is the processor binary TestMain builds once for the whole test binary.
var processorBin string

func TestMain(m *testing.M) {
	flag.Parse()
	dir, err := os.MkdirTemp("", "ckf-faults-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "faults:", err)
		os.Exit(1)
	}
	start := time.Now()
	processorBin, err = testenv.BuildProcessor(dir)
	if err != nil {
		fmt.Fprintln(os.Stderr, "faults:", err)
		_ = os.RemoveAll(dir)
		os.Exit(1)
	}
	fmt.Fprintf(os.Stderr, "faults: built %s in %v\n", processorBin, time.Since(start).Round(time.Millisecond))
	code := m.Run()
	_ = os.RemoveAll(dir)
	os.Exit(code)
}

// envInt reads a positive integer from the environment, or returns def.
func envInt(t testing.TB, name string, def int) int {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 {
		t.Fatalf("%s=%q is not a non-negative integer", name, v)
	}
	return n
}

// proc is one processor process (a relay or an indexer replica) of the suite's deployment:
// testenv.Process running the binary TestMain built, plus the suite's queries against it.
type proc struct{ *testenv.Process }

// newProc registers a process; it is killed (if running) and checked gone when the test ends.
func newProc(t testing.TB, logDir, name string, env []string, args ...string) *proc {
	return &proc{testenv.NewProcess(t, processorBin, logDir, name, env, args...)}
}

// sumMetrics sums every series whose name (before the labels) is name.
func sumMetrics(m map[string]float64, name string) float64 { return testenv.SumSeries(m, name) }

// scrapePoll is how often the suite's waits poll: a poll is usually an HTTP scrape of a process.
const scrapePoll = 50 * time.Millisecond
