//go:build linux

package testenv

import (
	"errors"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// TestProcessIncarnations drives a Process over a shell instead of the processor: two
// incarnations, one killed with SIGKILL, each logging to its own file, with the settings given.
func TestProcessIncarnations(t *testing.T) {
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Skip("no sh on the PATH")
	}
	p := NewProcess(t, sh, t.TempDir(), "shell", []string{"CKF_PROBE=one"},
		"-c", `echo "probe=$CKF_PROBE listen=$CKF_HTTP_LISTEN"; echo marker; exec sleep 600`)
	if !p.Exited() || p.Pid() != 0 || p.Runs() != 0 {
		t.Fatalf("before Start: exited %v, pid %d, runs %d", p.Exited(), p.Pid(), p.Runs())
	}
	p.Start()
	WaitUntil(t, 30*time.Second, "the first incarnation logs its marker", func() bool { return len(p.LogLines(1, "marker")) == 1 })
	if !p.Alive() {
		t.Fatal("the first incarnation is not alive")
	}
	if got := p.LogLines(1, "probe="); len(got) != 1 || got[0] != "probe=one listen="+p.HTTP {
		t.Fatalf("settings seen by the process: %q", got)
	}
	p.Kill9()
	var exit *exec.ExitError
	if !p.Exited() || p.Alive() || !errors.As(p.ExitError(), &exit) || p.Kills() != 1 {
		t.Fatalf("after Kill9: exited %v, alive %v, exit error %v, kills %d", p.Exited(), p.Alive(), p.ExitError(), p.Kills())
	}
	p.AddEnv("CKF_PROBE=two")
	p.Start()
	WaitUntil(t, 30*time.Second, "the second incarnation logs its marker", func() bool { return len(p.LogLines(2, "marker")) == 1 })
	if got := p.LogLines(2, "probe="); len(got) != 1 || !strings.HasPrefix(got[0], "probe=two ") {
		t.Fatalf("a later setting must win: %q", got)
	}
	if n := p.LogCount("marker"); n != 2 {
		t.Fatalf("LogCount over both incarnations = %d, want 2", n)
	}
	if pids := p.Pids(); len(pids) != 2 || pids[0] == pids[1] || pids[1] != p.Pid() {
		t.Fatalf("pids %v, current %d", pids, p.Pid())
	}
	if env := p.Env(); env[len(env)-1] != "CKF_PROBE=two" {
		t.Fatalf("Env() = %q", env)
	}
}
