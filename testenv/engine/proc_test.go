//go:build linux

package engine

import (
	"bufio"
	"encoding/json"
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

var (
	processorOnce sync.Once
	processorPath string
	processorErr  error
	processorDir  string
)

func TestMain(m *testing.M) {
	code := m.Run()
	if processorDir != "" {
		_ = os.RemoveAll(processorDir)
	}
	os.Exit(code)
}

// processor builds cmd/processor once per test binary (with the go command on the PATH, as make
// and CI run it) and returns its path.
func processor(t testing.TB) string {
	t.Helper()
	processorOnce.Do(func() {
		dir, err := os.MkdirTemp("", "ckf-engine-bin-")
		if err != nil {
			processorErr = err
			return
		}
		processorDir = dir
		processorPath = filepath.Join(dir, "processor")
		start := time.Now()
		out, err := exec.Command("go", "build", "-o", processorPath, "github.com/ckf-stream/ckf-stream/cmd/processor").CombinedOutput()
		if err != nil {
			processorErr = fmt.Errorf("building the processor: %v\n%s", err, out)
			return
		}
		fmt.Fprintf(os.Stderr, "engine: built %s in %v\n", processorPath, time.Since(start).Round(time.Millisecond))
	})
	if processorErr != nil {
		t.Fatal(processorErr)
	}
	return processorPath
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

func freeAddr(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// proc is one processor process (relay, indexer or bridge) that the test starts, kills with
// SIGKILL and starts again; every incarnation logs to its own file.
type proc struct {
	t      testing.TB
	name   string
	args   []string
	env    []string
	http   string
	logDir string

	mu   sync.Mutex
	runs int
	cmd  *exec.Cmd
	done chan struct{}
	err  error
	pids []int
}

func newProc(t testing.TB, logDir, name string, env []string, args ...string) *proc {
	p := &proc{t: t, name: name, args: args, logDir: logDir, http: freeAddr(t)}
	p.env = append(env, "CKF_HTTP_LISTEN="+p.http)
	t.Cleanup(p.cleanup)
	return p
}

func (p *proc) logPath(run int) string {
	return filepath.Join(p.logDir, fmt.Sprintf("%s-%d.log", p.name, run))
}

func (p *proc) start() {
	p.t.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	p.runs++
	f, err := os.Create(p.logPath(p.runs))
	if err != nil {
		p.t.Fatal(err)
	}
	cmd := exec.Command(processor(p.t), p.args...)
	cmd.Env = append(baseEnv(), p.env...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		_ = f.Close()
		p.t.Fatalf("%s: start: %v", p.name, err)
	}
	done := make(chan struct{})
	p.cmd, p.done, p.err = cmd, done, nil
	p.pids = append(p.pids, cmd.Process.Pid)
	go func() {
		err := cmd.Wait()
		_ = f.Close()
		p.mu.Lock()
		p.err = err
		p.mu.Unlock()
		close(done)
	}()
}

func (p *proc) exited() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
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

// kill9 sends SIGKILL (no drain, no flush) and waits for the exit.
func (p *proc) kill9() {
	p.t.Helper()
	p.mu.Lock()
	cmd, done := p.cmd, p.done
	p.mu.Unlock()
	_ = cmd.Process.Signal(syscall.SIGKILL)
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		p.t.Fatalf("%s (pid %d) did not exit after SIGKILL", p.name, cmd.Process.Pid)
	}
}

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
	if p.t.Failed() && p.runs > 0 {
		p.t.Logf("%s: last log lines of incarnation %d:\n%s", p.name, p.runs, tail(p.logPath(p.runs), 30))
	}
	for _, pid := range p.pids {
		if testenv.ProcessAlive(pid) {
			p.t.Errorf("%s: pid %d is still alive after the test", p.name, pid)
		}
	}
}

func (p *proc) waitReady(timeout time.Duration) {
	p.t.Helper()
	c := &http.Client{Timeout: time.Second}
	var last string
	testenv.WaitUntilEvery(p.t, 50*time.Millisecond, timeout, p.name+" is ready", func() bool {
		if p.exited() {
			p.t.Fatalf("%s exited while starting (%v):\n%s", p.name, p.err, tail(p.logPath(p.runs), 30))
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
	}, func() string { return last + "\n" + tail(p.logPath(p.runs), 30) })
}

// metric returns the sum of every sample of the named metric (counters with or without the
// _total suffix), 0 when absent.
func (p *proc) metric(name string) (float64, error) {
	c := &http.Client{Timeout: 2 * time.Second}
	resp, err := c.Get("http://" + p.http + "/metrics")
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	var sum float64
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "#") {
			continue
		}
		key, val, ok := strings.Cut(line, " ")
		if !ok {
			continue
		}
		metricName, _, _ := strings.Cut(key, "{")
		if metricName != name && metricName != name+"_total" {
			continue
		}
		v, err := strconv.ParseFloat(strings.TrimSpace(val), 64)
		if err == nil {
			sum += v
		}
	}
	return sum, sc.Err()
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

// emulator is a running engine_emulator.py, driven by JSON commands on its stdin.
type emulator struct {
	t     testing.TB
	name  string
	cmd   *exec.Cmd
	in    io.WriteCloser
	out   *bufio.Scanner
	mu    sync.Mutex // one command at a time
	done  chan struct{}
	ranks int
}

// startEmulator runs the Python emulator with args; it is stopped when the test ends.
func startEmulator(t testing.TB, logDir, name string, ranks int, args ...string) *emulator {
	t.Helper()
	f, err := os.Create(filepath.Join(logDir, name+".log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(python(t), append([]string{filepath.Join(here(t), "engine_emulator.py"),
		"--ranks", strconv.Itoa(ranks)}, args...)...)
	cmd.Stderr = f
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	outPipe, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	e := &emulator{t: t, name: name, cmd: cmd, in: in, out: bufio.NewScanner(outPipe), done: make(chan struct{}), ranks: ranks}
	e.out.Buffer(make([]byte, 1<<20), 1<<20)
	go func() { _ = cmd.Wait(); _ = f.Close(); close(e.done) }()
	t.Cleanup(func() {
		_ = in.Close()
		_ = cmd.Process.Signal(syscall.SIGKILL)
		<-e.done
		if t.Failed() {
			t.Logf("%s: stderr:\n%s", name, tail(f.Name(), 20))
		}
	})
	if !e.out.Scan() {
		t.Fatalf("%s: no ready line: %v\n%s", name, e.out.Err(), tail(f.Name(), 20))
	}
	return e
}

// do sends one command and returns its reply; a refused command fails the test.
func (e *emulator) do(cmd map[string]any) map[string]any {
	e.t.Helper()
	reply, err := e.exchange(cmd)
	if err != nil {
		e.t.Fatal(err)
	}
	return reply
}

// exchange sends one command and reads its reply (safe from any goroutine).
func (e *emulator) exchange(cmd map[string]any) (map[string]any, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	b, _ := json.Marshal(cmd)
	if _, err := e.in.Write(append(b, '\n')); err != nil {
		return nil, fmt.Errorf("%s: %w", e.name, err)
	}
	if !e.out.Scan() {
		return nil, fmt.Errorf("%s: no reply to %s: %v", e.name, b, e.out.Err())
	}
	var reply map[string]any
	if err := json.Unmarshal(e.out.Bytes(), &reply); err != nil {
		return nil, fmt.Errorf("%s: reply %q: %w", e.name, e.out.Bytes(), err)
	}
	if reply["ok"] != true {
		return nil, fmt.Errorf("%s: %s refused: %v", e.name, b, reply["error"])
	}
	return reply, nil
}

// waitSubscribed waits until every rank's PUB socket has a subscriber (the bridge's SUB).
func (e *emulator) waitSubscribed(timeout time.Duration) {
	e.t.Helper()
	testenv.WaitUntilEvery(e.t, 20*time.Millisecond, timeout, e.name+" has a subscriber on every rank", func() bool {
		subs := e.do(map[string]any{"cmd": "subscribers"})["subscribers"].([]any)
		for _, s := range subs {
			if s.(float64) < 1 {
				return false
			}
		}
		return true
	})
}

func portFree(p int) bool {
	l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p))
	if err != nil {
		return false
	}
	_ = l.Close()
	return true
}
