//go:build linux

package faults

import (
	"bufio"
	"bytes"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
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
	processorBin = filepath.Join(dir, "processor")
	// The go command on the PATH, as make and CI run it.
	gobin := "go"
	start := time.Now()
	build := exec.Command(gobin, "build", "-o", processorBin, "github.com/ckf-stream/ckf-stream/cmd/processor")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "faults: building the processor:", err)
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

// proc is one processor process (a relay or an indexer replica) that the test can start, kill
// with SIGKILL, and start again with the same configuration. Every incarnation logs to its own
// file in the test's log folder.
type proc struct {
	t    testing.TB
	name string
	args []string
	env  []string
	// http is the process's HTTP listen address (host:port).
	http   string
	logDir string

	mu      sync.Mutex
	runs    int
	cmd     *exec.Cmd
	done    chan struct{}
	exitErr error
	pids    []int
	kills   int
}

// newProc registers a process; it is killed (if running) and checked gone when the test ends.
func newProc(t testing.TB, logDir, name string, env []string, args ...string) *proc {
	p := &proc{t: t, name: name, args: args, env: env, logDir: logDir, http: freeAddr(t)}
	p.env = append(p.env, "CKF_HTTP_LISTEN="+p.http)
	t.Cleanup(p.cleanup)
	return p
}

// baseEnv is the environment without any ckf-stream or Kafka setting of the caller's.
func baseEnv() []string {
	var out []string
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "CKF_") || strings.HasPrefix(kv, "KAFKA_BROKERS=") {
			continue
		}
		out = append(out, kv)
	}
	return out
}

func (p *proc) logPath(run int) string {
	return filepath.Join(p.logDir, fmt.Sprintf("%s-%d.log", p.name, run))
}

// start starts a new incarnation; the previous one must have exited.
func (p *proc) start() {
	p.t.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd != nil && !p.exitedLocked() {
		p.t.Fatalf("%s: start while running", p.name)
	}
	p.runs++
	f, err := os.Create(p.logPath(p.runs))
	if err != nil {
		p.t.Fatal(err)
	}
	cmd := exec.Command(processorBin, p.args...)
	cmd.Env = append(baseEnv(), p.env...)
	cmd.Stdout, cmd.Stderr = f, f
	// Should the test binary die without running its cleanups (a -timeout panic), the kernel
	// kills the process with it, so nothing outlives the run.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		_ = f.Close()
		p.t.Fatalf("%s: start: %v", p.name, err)
	}
	done := make(chan struct{})
	p.cmd, p.done, p.exitErr = cmd, done, nil
	p.pids = append(p.pids, cmd.Process.Pid)
	go func() {
		err := cmd.Wait()
		_ = f.Close()
		p.mu.Lock()
		p.exitErr = err
		p.mu.Unlock()
		close(done)
	}()
}

func (p *proc) exitedLocked() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// exitError is the last incarnation's exit error (nil while it runs or after a clean exit).
func (p *proc) exitError() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.exitErr
}

// alive reports whether the current incarnation runs (per Wait and per /proc).
func (p *proc) alive() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cmd != nil && !p.exitedLocked() && testenv.ProcessAlive(p.cmd.Process.Pid)
}

func (p *proc) pid() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		return 0
	}
	return p.cmd.Process.Pid
}

// kill9 sends SIGKILL (a crash: no drain, no flush, no commit) and waits for the exit.
func (p *proc) kill9() {
	p.t.Helper()
	p.mu.Lock()
	cmd, done := p.cmd, p.done
	p.kills++
	p.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Signal(syscall.SIGKILL)
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		p.t.Fatalf("%s (pid %d) did not exit after SIGKILL", p.name, cmd.Process.Pid)
	}
}

// cleanup kills whatever still runs and checks that no incarnation is left behind.
func (p *proc) cleanup() {
	p.mu.Lock()
	cmd, done := p.cmd, p.done
	p.mu.Unlock()
	if cmd != nil {
		_ = cmd.Process.Signal(syscall.SIGKILL)
		select {
		case <-done:
		case <-time.After(10 * time.Second):
		}
	}
	if p.t.Failed() {
		p.t.Logf("%s: last log lines of incarnation %d:\n%s", p.name, p.runs, tail(p.logPath(p.runs), 25))
	}
	for _, pid := range p.pids {
		if testenv.ProcessAlive(pid) {
			p.t.Errorf("%s: pid %d is still alive after the test", p.name, pid)
		}
	}
}

// logLines returns the lines of incarnation run's log that contain substr.
func (p *proc) logLines(run int, substr string) []string {
	p.t.Helper()
	b, err := os.ReadFile(p.logPath(run))
	if err != nil {
		p.t.Fatalf("%s: %v", p.name, err)
	}
	var out []string
	for _, line := range strings.Split(string(b), "\n") {
		if strings.Contains(line, substr) {
			out = append(out, line)
		}
	}
	return out
}

// logCount counts the log lines containing substr over every incarnation so far: what the
// process did across restarts, where a counter on /metrics covers only the current incarnation.
func (p *proc) logCount(substr string) int {
	p.t.Helper()
	p.mu.Lock()
	runs := p.runs
	p.mu.Unlock()
	n := 0
	for run := 1; run <= runs; run++ {
		n += len(p.logLines(run, substr))
	}
	return n
}

func tail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// waitReady waits until /readyz answers 200, failing the test if the process exits first, and
// returns how long that took (to the polling period).
func (p *proc) waitReady(timeout time.Duration) time.Duration {
	p.t.Helper()
	start := time.Now()
	c := &http.Client{Timeout: time.Second}
	var last string
	testenv.WaitUntil(p.t, timeout, p.name+" is ready", func() bool {
		if !p.alive() {
			p.t.Fatalf("%s exited while starting (%v):\n%s", p.name, p.exitError(), tail(p.logPath(p.runs), 25))
		}
		resp, err := c.Get("http://" + p.http + "/readyz")
		if err != nil {
			last = err.Error()
			return false
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		last = string(b)
		return resp.StatusCode == http.StatusOK
	}, func() string { return last + "\n" + tail(p.logPath(p.runs), 25) })
	return time.Since(start)
}

// rss reads the resident set size of the current incarnation from /proc.
func (p *proc) rss() int64 {
	p.t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", p.pid()))
	if err != nil {
		p.t.Fatalf("%s: %v", p.name, err)
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			if err != nil {
				p.t.Fatal(err)
			}
			return kb << 10
		}
	}
	p.t.Fatalf("%s: no VmRSS", p.name)
	return 0
}

// metrics scrapes /metrics: series (name with labels, as printed) to value.
func (p *proc) metrics() (map[string]float64, error) {
	c := &http.Client{Timeout: 3 * time.Second}
	resp, err := c.Get("http://" + p.http + "/metrics")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s /metrics: %s", p.name, resp.Status)
	}
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			continue
		}
		if v, err := strconv.ParseFloat(line[i+1:], 64); err == nil {
			out[line[:i]] = v
		}
	}
	return out, sc.Err()
}

// sumMetrics sums every series whose name (before the labels) is name.
func sumMetrics(m map[string]float64, name string) float64 {
	var s float64
	for k, v := range m {
		if k == name || strings.HasPrefix(k, name+"{") {
			s += v
		}
	}
	return s
}

func freeAddr(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// scrapePoll is how often the suite's waits poll: a poll is usually an HTTP scrape of a process.
const scrapePoll = 50 * time.Millisecond
