//go:build linux

package deploy_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestMakeImageTargets runs make image and make image-push against stand-in engines (a script
// that logs its arguments, as docker would take them): with no engine on PATH, and with one
// whose daemon does not answer, each says so and exits 2; otherwise image builds the Dockerfile
// with the version, and image-push asks for REGISTRY before building, then tags, pushes and
// prints the chart's values for the pushed image.
func TestMakeImageTargets(t *testing.T) {
	makeBin, err := exec.LookPath("make")
	if err != nil {
		t.Skip("no make on PATH")
	}
	dir := t.TempDir()
	log := filepath.Join(dir, "engine.log")
	script := "#!/bin/sh\necho \"$*\" >> " + log + "\n[ \"$1\" != info ] || exit ${ENGINE_INFO_STATUS:-0}\n"
	if err := os.WriteFile(filepath.Join(dir, "podman"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	// PATH without the machine's own engines: the folders of the tools the Makefile needs.
	var path []string
	for _, tool := range []string{"bash", "sh", "git"} {
		p, err := exec.LookPath(tool)
		if err != nil {
			t.Fatalf("%s: %v", tool, err)
		}
		path = append(path, filepath.Dir(p))
	}
	for _, engine := range []string{"docker", "podman"} {
		for _, d := range path {
			if _, err := os.Stat(filepath.Join(d, engine)); err == nil {
				t.Skipf("%s is in %s, beside the tools the Makefile needs: no PATH here lacks an engine", engine, d)
			}
		}
	}
	run := func(pathDirs []string, env []string, args ...string) (string, int) {
		t.Helper()
		_ = os.Remove(log)
		cmd := exec.Command(makeBin, append([]string{"-s", "--no-print-directory", "-C", ".."}, args...)...)
		cmd.Env = append(os.Environ(), append(env, "PATH="+strings.Join(pathDirs, ":"), "MAKEFLAGS=")...)
		out, err := cmd.CombinedOutput()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		return string(out), code
	}
	logged := func() string {
		b, _ := os.ReadFile(log)
		return string(b)
	}

	out, code := run(path, nil, "image")
	if code != 2 || !strings.Contains(out, "make image: neither docker nor podman is on PATH") {
		t.Errorf("no engine: exit %d, %q", code, out)
	}
	withEngine := append([]string{dir}, path...)
	out, code = run(withEngine, []string{"ENGINE_INFO_STATUS=1"}, "image")
	if code != 2 || !strings.Contains(out, "podman is installed but no engine answers") || strings.Contains(logged(), "build") {
		t.Errorf("engine not answering: exit %d, %q, engine called with %q", code, out, logged())
	}
	out, code = run(withEngine, nil, "image", "IMAGE_TAG=v9")
	if code != 0 || !strings.Contains(logged(), "build --build-arg VERSION=") || !strings.Contains(logged(), " -t ckf-stream/processor:v9 .\n") {
		t.Errorf("image: exit %d, %q, engine called with %q", code, out, logged())
	}
	out, code = run(withEngine, nil, "image-push", "IMAGE_TAG=v9")
	if code != 2 || !strings.Contains(out, "make image-push: set REGISTRY") || logged() != "" {
		t.Errorf("image-push without REGISTRY: exit %d, %q, engine called with %q", code, out, logged())
	}
	out, code = run(withEngine, nil, "image-push", "IMAGE_TAG=v9", "REGISTRY=registry.internal:5000/team")
	want := "tag ckf-stream/processor:v9 registry.internal:5000/team/ckf-stream/processor:v9\npush registry.internal:5000/team/ckf-stream/processor:v9\n"
	if code != 0 || !strings.HasSuffix(logged(), want) ||
		!strings.Contains(out, "--set image.repository=registry.internal:5000/team/ckf-stream/processor --set image.tag=v9") {
		t.Errorf("image-push: exit %d, %q, engine called with %q", code, out, logged())
	}
}
