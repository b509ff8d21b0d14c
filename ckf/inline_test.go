package ckf

import (
	"os/exec"
	"regexp"
	"strings"
	"testing"
)

// TestHotPathsInline asks the compiler (go build -gcflags=-m on this
// package) whether the per-block hashing functions still inline. Probe sits
// just under the inliner's budget (cost 79 of 80 with Go 1.26); an edit that
// pushes it over would silently add a call per probe to every query and
// producer batch, so it fails here instead.
func TestHotPathsInline(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the compiler")
	}
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skip("go command not on PATH")
	}
	out, err := exec.Command(goTool, "build", "-gcflags=-m", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go build -gcflags=-m: %v\n%s", err, out)
	}
	for _, fn := range []string{"Addressing.Probe", "NextSequenceHash", "CanonicalChild"} {
		if !regexp.MustCompile(`(?m): can inline ` + regexp.QuoteMeta(fn) + `( |$)`).Match(out) {
			t.Errorf("%s no longer inlines (go build -gcflags=-m=2 ./ckf/ shows its cost); -m lines:\n%s", fn, grepLines(out, fn))
		}
	}
}

// grepLines returns the lines of out that mention s.
func grepLines(out []byte, s string) string {
	var b strings.Builder
	for _, line := range strings.Split(string(out), "\n") {
		if strings.Contains(line, s) {
			b.WriteString(line + "\n")
		}
	}
	return b.String()
}
