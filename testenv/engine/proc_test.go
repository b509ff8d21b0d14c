//go:build linux

package engine

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
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

// processor builds cmd/processor once per test binary and returns its path.
func processor(t testing.TB) string {
	t.Helper()
	processorOnce.Do(func() {
		dir, err := os.MkdirTemp("", "ckf-engine-bin-")
		if err != nil {
			processorErr = err
			return
		}
		processorDir = dir
		start := time.Now()
		processorPath, processorErr = testenv.BuildProcessor(dir)
		if processorErr == nil {
			fmt.Fprintf(os.Stderr, "engine: built %s in %v\n", processorPath, time.Since(start).Round(time.Millisecond))
		}
	})
	if processorErr != nil {
		t.Fatal(processorErr)
	}
	return processorPath
}

// proc is one processor process (relay, indexer or bridge) that the test starts, kills with
// SIGKILL and starts again (testenv.Process).
type proc struct{ *testenv.Process }

func newProc(t testing.TB, logDir, name string, env []string, args ...string) *proc {
	return &proc{testenv.NewProcess(t, processor(t), logDir, name, env, args...)}
}

// metric returns the sum of every sample of the named metric (counters with or without the
// _total suffix), 0 when absent.
func (p *proc) metric(name string) (float64, error) {
	m, err := p.Metrics()
	if err != nil {
		return 0, err
	}
	return testenv.SumSeries(m, name) + testenv.SumSeries(m, name+"_total"), nil
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
			t.Logf("%s: stderr:\n%s", name, testenv.Tail(f.Name(), 20))
		}
	})
	if !e.out.Scan() {
		t.Fatalf("%s: no ready line: %v\n%s", name, e.out.Err(), testenv.Tail(f.Name(), 20))
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
