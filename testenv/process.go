//go:build linux

package testenv

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
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
)

// BuildProcessor builds cmd/processor into dir with the go command on the PATH (as make and CI
// run it) and returns the binary's path. Multi-process tests call it once, from TestMain.
func BuildProcessor(dir string) (string, error) {
	bin := filepath.Join(dir, "processor")
	out, err := exec.Command("go", "build", "-o", bin, "github.com/ckf-stream/ckf-stream/cmd/processor").CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("building the processor: %v\n%s", err, out)
	}
	return bin, nil
}

// ProcessEnv is the test binary's environment without any ckf-stream or Kafka setting of the
// caller's (CKF_*, KAFKA_BROKERS), the base a Process adds its own settings to, so that a
// developer's shell never leaks into a test's deployment.
func ProcessEnv() []string {
	var out []string
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "CKF_") || strings.HasPrefix(kv, "KAFKA_BROKERS=") {
			continue
		}
		out = append(out, kv)
	}
	return out
}

// Process is one processor process of a multi-process test (a relay, an indexer replica, a
// bridge, a load generator) that the test starts, kills with SIGKILL and starts again with the
// same configuration. Every incarnation logs to its own file, LogPath(run), in the test's log
// folder, and serves HTTP on the same address, HTTP. Its methods may be called from any
// goroutine.
//
// When the test ends, whatever still runs is killed and every incarnation's pid is checked
// gone; a failed test logs the last incarnation's log tail. Should the test binary die without
// running its cleanups (a -timeout panic), the kernel kills the processes with it
// (Pdeathsig), so nothing outlives the run.
type Process struct {
	// Name names the process in failures and log files.
	Name string
	// HTTP is the process's HTTP listen address (host:port), passed as CKF_HTTP_LISTEN.
	HTTP string

	t      testing.TB
	bin    string
	args   []string
	env    []string
	logDir string

	mu      sync.Mutex
	runs    int
	cmd     *exec.Cmd
	done    chan struct{}
	exitErr error
	pids    []int
	kills   int
}

// NewProcess registers a process running bin with args and env added to ProcessEnv. It does not
// start it.
func NewProcess(t testing.TB, bin, logDir, name string, env []string, args ...string) *Process {
	p := &Process{t: t, bin: bin, Name: name, args: args, logDir: logDir, HTTP: FreeAddr(t)}
	p.env = append(append([]string(nil), env...), "CKF_HTTP_LISTEN="+p.HTTP)
	t.Cleanup(p.cleanup)
	return p
}

// LogPath is the log file of incarnation run (1 is the first).
func (p *Process) LogPath(run int) string {
	return filepath.Join(p.logDir, fmt.Sprintf("%s-%d.log", p.Name, run))
}

// Runs is the number of incarnations started so far.
func (p *Process) Runs() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.runs
}

// Kills is the number of SIGKILLs Kill9 has sent.
func (p *Process) Kills() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.kills
}

// Pids are the pids of every incarnation so far, in start order.
func (p *Process) Pids() []int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]int(nil), p.pids...)
}

// Start starts a new incarnation; the previous one must have exited (a test failure otherwise).
func (p *Process) Start() {
	p.t.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd != nil && !p.exitedLocked() {
		p.t.Fatalf("%s: start while running", p.Name)
	}
	p.runs++
	f, err := os.Create(p.LogPath(p.runs))
	if err != nil {
		p.t.Fatal(err)
	}
	cmd := exec.Command(p.bin, p.args...)
	cmd.Env = append(ProcessEnv(), p.env...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		_ = f.Close()
		p.t.Fatalf("%s: start: %v", p.Name, err)
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

func (p *Process) exitedLocked() bool {
	if p.done == nil {
		return true
	}
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// Exited reports whether the current incarnation has exited (true before the first Start).
func (p *Process) Exited() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.exitedLocked()
}

// Done is closed when the current incarnation exits (nil before the first Start).
func (p *Process) Done() <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.done
}

// ExitError is the last incarnation's exit error (nil while it runs or after a clean exit).
func (p *Process) ExitError() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.exitErr
}

// Alive reports whether the current incarnation runs, per Wait and per /proc (a zombie is not
// alive).
func (p *Process) Alive() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cmd != nil && !p.exitedLocked() && ProcessAlive(p.cmd.Process.Pid)
}

// Pid is the current incarnation's pid, 0 before the first Start.
func (p *Process) Pid() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		return 0
	}
	return p.cmd.Process.Pid
}

// Signal sends sig to the current incarnation (nothing before the first Start).
func (p *Process) Signal(sig os.Signal) error {
	p.mu.Lock()
	cmd := p.cmd
	p.mu.Unlock()
	if cmd == nil {
		return nil
	}
	return cmd.Process.Signal(sig)
}

// Kill9 sends SIGKILL (a crash: no drain, no flush, no commit) and waits for the exit; a process
// that outlives it by 10 s fails the test.
func (p *Process) Kill9() {
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
		p.t.Fatalf("%s (pid %d) did not exit after SIGKILL", p.Name, cmd.Process.Pid)
	}
}

func (p *Process) cleanup() {
	p.mu.Lock()
	cmd, done, runs := p.cmd, p.done, p.runs
	p.mu.Unlock()
	if cmd != nil {
		_ = cmd.Process.Signal(syscall.SIGKILL)
		select {
		case <-done:
		case <-time.After(10 * time.Second):
		}
	}
	if p.t.Failed() && runs > 0 {
		p.t.Logf("%s: last log lines of incarnation %d:\n%s", p.Name, runs, Tail(p.LogPath(runs), 30))
	}
	for _, pid := range p.Pids() {
		if ProcessAlive(pid) {
			p.t.Errorf("%s: pid %d is still alive after the test", p.Name, pid)
		}
	}
}

// LogLines returns the lines of incarnation run's log that contain substr.
func (p *Process) LogLines(run int, substr string) []string {
	p.t.Helper()
	b, err := os.ReadFile(p.LogPath(run))
	if err != nil {
		p.t.Fatalf("%s: %v", p.Name, err)
	}
	var out []string
	for _, line := range strings.Split(string(b), "\n") {
		if strings.Contains(line, substr) {
			out = append(out, line)
		}
	}
	return out
}

// LogCount counts the log lines containing substr over every incarnation so far: what the
// process did across restarts, where a counter on /metrics covers only the current incarnation.
func (p *Process) LogCount(substr string) int {
	p.t.Helper()
	n := 0
	for run := 1; run <= p.Runs(); run++ {
		n += len(p.LogLines(run, substr))
	}
	return n
}

// Tail returns the last n lines of the file at path, or the error reading it.
func Tail(path string, n int) string {
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

// WaitReady waits until /readyz answers 200, failing the test if the process exits first or
// timeout passes, and returns how long that took (to the polling period, 50 ms: each poll is an
// HTTP request to another process).
func (p *Process) WaitReady(timeout time.Duration) time.Duration {
	p.t.Helper()
	start := time.Now()
	c := &http.Client{Timeout: time.Second}
	var last string
	WaitUntilEvery(p.t, 50*time.Millisecond, timeout, p.Name+" is ready", func() bool {
		if !p.Alive() {
			p.t.Fatalf("%s exited while starting (%v):\n%s", p.Name, p.ExitError(), Tail(p.LogPath(p.Runs()), 25))
		}
		resp, err := c.Get("http://" + p.HTTP + "/readyz")
		if err != nil {
			last = err.Error()
			return false
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		last = string(b)
		return resp.StatusCode == http.StatusOK
	}, func() string { return last + "\n" + Tail(p.LogPath(p.Runs()), 25) })
	return time.Since(start)
}

// Metrics scrapes the process's /metrics (Scrape): series, with labels as printed, to value.
func (p *Process) Metrics() (map[string]float64, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	m, err := Scrape(ctx, http.DefaultClient, "http://"+p.HTTP+"/metrics")
	if err != nil {
		return nil, fmt.Errorf("%s: %w", p.Name, err)
	}
	return m, nil
}

// RSS reads the resident set size of the current incarnation from /proc, in bytes.
func (p *Process) RSS() int64 {
	p.t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", p.Pid()))
	if err != nil {
		p.t.Fatalf("%s: %v", p.Name, err)
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
	p.t.Fatalf("%s: no VmRSS", p.Name)
	return 0
}

// Env is the process's own settings (what NewProcess and AddEnv gave, plus CKF_HTTP_LISTEN),
// without ProcessEnv's base.
func (p *Process) Env() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.env...)
}

// AddEnv adds settings (KEY=value) for the incarnations started after it; a later setting of the
// same key wins, as in exec.
func (p *Process) AddEnv(kv ...string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.env = append(p.env, kv...)
}
