//go:build linux

package deploy_test

import (
	"bufio"
	"encoding/json"
	"errors"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// ignoreRule is one line of .dockerignore.
type ignoreRule struct {
	pattern string
	re      *regexp.Regexp
	negate  bool
}

// readDockerignore parses ../.dockerignore with Docker's rules: a pattern matches from the
// context's root (not in any folder, as git's do), * and ? stay within a path element, ** spans
// elements, a leading ! re-includes, and a path is left out when the last pattern matching it
// or one of its parent folders is not a ! one. Character classes and escapes are refused: the
// file does not use them, and this reader does not implement them.
func readDockerignore(t *testing.T) []ignoreRule {
	t.Helper()
	f, err := os.Open("../.dockerignore")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var rules []ignoreRule
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		r := ignoreRule{pattern: line}
		if strings.HasPrefix(line, "!") {
			r.negate, line = true, strings.TrimSpace(line[1:])
		}
		if strings.ContainsAny(line, `[]\`) {
			t.Fatalf(".dockerignore: %q uses a character class or an escape, which this test does not read", r.pattern)
		}
		line = strings.TrimPrefix(filepath.ToSlash(filepath.Clean(line)), "/")
		var b strings.Builder
		b.WriteString("^")
		for i := 0; i < len(line); i++ {
			switch c := line[i]; {
			case c == '*' && i+1 < len(line) && line[i+1] == '*':
				i++
				if i+1 < len(line) && line[i+1] == '/' {
					i++
					b.WriteString("(.*/)?")
				} else {
					b.WriteString(".*")
				}
			case c == '*':
				b.WriteString("[^/]*")
			case c == '?':
				b.WriteString("[^/]")
			default:
				b.WriteString(regexp.QuoteMeta(string(c)))
			}
		}
		b.WriteString("$")
		r.re = regexp.MustCompile(b.String())
		rules = append(rules, r)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return rules
}

// leftOut says whether the build context leaves out path (slash-separated, relative to the
// repository root).
func leftOut(rules []ignoreRule, path string) bool {
	out := false
	for _, r := range rules {
		for p := path; ; p = filepath.Dir(p) {
			if r.re.MatchString(p) {
				out = !r.negate
				break
			}
			if !strings.Contains(p, "/") {
				break
			}
		}
	}
	return out
}

// dockerfileBuilds returns the packages the Dockerfile's build stage compiles (the arguments of
// its go build commands) and those commands.
func dockerfileBuilds(t *testing.T) (pkgs, runs []string) {
	t.Helper()
	raw, err := os.ReadFile("../Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	build := regexp.MustCompile(`\bgo build\b.*\s(\./[\w./-]+)\s*$`)
	for _, line := range strings.Split(string(raw), "\n") {
		if strings.HasPrefix(line, "FROM ") && len(runs) > 0 {
			break // the build stage ends
		}
		if cmd, ok := strings.CutPrefix(line, "RUN "); ok {
			runs = append(runs, cmd)
			if m := build.FindStringSubmatch(cmd); m != nil {
				pkgs = append(pkgs, m[1])
			}
		}
	}
	if len(pkgs) == 0 {
		t.Fatal("the Dockerfile's build stage has no go build of a ./package")
	}
	return pkgs, runs
}

// TestDockerBuildContext checks .dockerignore against what the image needs and what it must not
// carry: every file of every package the Dockerfile's build stage compiles (and their embedded
// files, go.mod and go.sum) is in the context; every path git ignores here (build outputs,
// downloads, venvs) and .git, bin/, testenv/kafka/libs, the Python venvs, test binaries and the
// traces are left out. With CKF_TEST_IMAGE_BUILD=1 it also runs the build stage's commands in a
// copy of the context (no Docker engine is needed; a first run compiles every dependency).
func TestDockerBuildContext(t *testing.T) {
	rules := readDockerignore(t)
	pkgs, runs := dockerfileBuilds(t)

	// What the build reads, from go list in the repository.
	cmd := exec.Command("go", append([]string{"list", "-deps", "-json=Dir,GoFiles,SFiles,EmbedFiles,Module,Standard"}, pkgs...)...)
	cmd.Dir, cmd.Env = "..", append(os.Environ(), "CGO_ENABLED=0")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	needed := []string{"go.mod", "go.sum"}
	dec := json.NewDecoder(strings.NewReader(string(out)))
	for {
		var p struct {
			Dir                         string
			GoFiles, SFiles, EmbedFiles []string
			Standard                    bool
			Module                      *struct{ Main bool }
		}
		if err := dec.Decode(&p); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		if p.Standard || p.Module == nil || !p.Module.Main {
			continue
		}
		rel, err := filepath.Rel(root, p.Dir)
		if err != nil {
			t.Fatal(err)
		}
		for _, files := range [][]string{p.GoFiles, p.SFiles, p.EmbedFiles} {
			for _, f := range files {
				needed = append(needed, filepath.ToSlash(filepath.Join(rel, f)))
			}
		}
	}
	if len(needed) < 50 {
		t.Fatalf("go list found only %d files for %v", len(needed), pkgs)
	}
	for _, f := range needed {
		if leftOut(rules, f) {
			t.Errorf(".dockerignore leaves out %s, which the image's build compiles", f)
		}
	}

	// What must stay out.
	for _, p := range []string{".git/HEAD", "bin/processor", "bin/helm-v4.3.2/helm", "processor", "testenv/kafka/libs/kafka.jar",
		"testenv/registry/dist/registry.jar", "examples/python/.venv/bin/python", "testenv/engine/.venv/bin/python",
		"indexer.test", "streams/relay/relay.test", "traces/conversation_trace.jsonl", "bench/peer-dynamo/target/release/peer"} {
		if !leftOut(rules, p) {
			t.Errorf(".dockerignore does not leave out %s", p)
		}
	}
	ignored := exec.Command("git", "ls-files", "--others", "--ignored", "--exclude-standard", "--directory")
	ignored.Dir = ".."
	list, err := ignored.Output()
	if err != nil {
		if exec.Command("git", "-C", "..", "rev-parse", "--git-dir").Run() == nil {
			t.Fatalf("git ls-files: %v", err)
		}
		t.Log("not a git checkout: the paths git ignores are not checked")
	}
	for _, p := range strings.Fields(string(list)) {
		if !leftOut(rules, strings.TrimSuffix(p, "/")) {
			t.Errorf("git ignores %s, but the image's build context carries it: add it to .dockerignore", p)
		}
	}

	if os.Getenv("CKF_TEST_IMAGE_BUILD") != "1" {
		return
	}
	ctx := copyContext(t, root, rules)
	outDir := t.TempDir()
	for _, run := range runs {
		sh := exec.Command("sh", "-c", strings.ReplaceAll(run, "/out/", outDir+"/"))
		sh.Env = append(os.Environ(), "VERSION=image-context-test")
		sh.Dir = ctx
		if b, err := sh.CombinedOutput(); err != nil {
			t.Fatalf("RUN %s: %v\n%s", run, err, b)
		}
	}
	for _, bin := range []string{"processor", "healthcheck"} {
		if _, err := os.Stat(filepath.Join(outDir, bin)); err != nil {
			t.Errorf("the build stage wrote no /out/%s: %v", bin, err)
		}
	}
	if b, err := exec.Command(filepath.Join(outDir, "processor"), "version").CombinedOutput(); err != nil {
		t.Errorf("processor version: %v\n%s", err, b)
	} else {
		t.Logf("the build stage's processor: %s", strings.TrimSpace(string(b)))
	}
}

// copyContext copies the files of the build context (the repository less what rules leave out)
// into a new folder and returns it.
func copyContext(t *testing.T, root string, rules []ignoreRule) string {
	t.Helper()
	dst := t.TempDir()
	var size int64
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		if rel == "." {
			return nil
		}
		if leftOut(rules, filepath.ToSlash(rel)) {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		if d.IsDir() {
			return os.MkdirAll(filepath.Join(dst, rel), 0o755)
		}
		if !d.Type().IsRegular() {
			return nil // links (the chart's files/) play no part in the build
		}
		raw, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		size += int64(len(raw))
		return os.WriteFile(filepath.Join(dst, rel), raw, 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("build context: %.1f MiB", float64(size)/(1<<20))
	return dst
}
