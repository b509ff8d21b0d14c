package engine

import (
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
)

var (
	pythonOnce sync.Once
	pythonPath string
	pythonErr  error
)

// here is this package's folder (where engine_emulator.py and venv.sh are).
func here(t testing.TB) string {
	t.Helper()
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		t.Fatal("no caller information")
	}
	return filepath.Dir(file)
}

// python returns the virtual environment's python, making the environment on first use
// (venv.sh: pip installs the pinned pyzmq and msgspec once; later runs find them).
func python(t testing.TB) string {
	t.Helper()
	pythonOnce.Do(func() {
		out, err := exec.Command("bash", filepath.Join(here(t), "venv.sh")).Output()
		if err != nil {
			if ee, ok := err.(*exec.ExitError); ok {
				pythonErr = &venvError{err: err, stderr: string(ee.Stderr)}
			} else {
				pythonErr = err
			}
			return
		}
		pythonPath = strings.TrimSpace(string(out))
	})
	if pythonErr != nil {
		t.Fatalf("the engine emulator's Python environment (testenv/engine/venv.sh): %v", pythonErr)
	}
	return pythonPath
}

type venvError struct {
	err    error
	stderr string
}

func (e *venvError) Error() string { return e.err.Error() + ": " + e.stderr }
func (e *venvError) Unwrap() error { return e.err }
