package testenv

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// TestFreeLoopbackPortsBelowEphemeralRange checks that the cluster's ports are distinct, free,
// and below the kernel's ephemeral range, where no process that binds port 0 or connects out can
// take one between the choice and the node's bind (a node that cannot bind a listener exits).
func TestFreeLoopbackPortsBelowEphemeralRange(t *testing.T) {
	ports, err := freeLoopbackPorts(24)
	if err != nil {
		t.Fatal(err)
	}
	hi := ephemeralPortsStart()
	sorted := slices.Clone(ports)
	slices.Sort(sorted)
	if len(slices.Compact(sorted)) != len(ports) {
		t.Fatalf("ports %v repeat", ports)
	}
	for _, p := range ports {
		if p >= hi || p < 1024 {
			t.Errorf("port %d is not in [1024,%d), below the ephemeral range", p, hi)
		}
		l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p))
		if err != nil {
			t.Errorf("port %d is not free: %v", p, err)
			continue
		}
		_ = l.Close()
	}
}

// TestFreePortRunNeverRepeatsAPort checks that a run of consecutive ports is free, below the
// ephemeral range, and that no port of it, nor of later calls, is handed out twice in this
// process, though every probe listener was closed before the call returned.
func TestFreePortRunNeverRepeatsAPort(t *testing.T) {
	hi := ephemeralPortsStart()
	base := FreePortRun(t, 4)
	seen := map[int]bool{}
	for p := base; p < base+4; p++ {
		if p >= hi || p < 1024 {
			t.Errorf("port %d of the run is not in [1024,%d)", p, hi)
		}
		l, err := net.Listen("tcp", ":"+strconv.Itoa(p))
		if err != nil {
			t.Errorf("port %d of the run is not free: %v", p, err)
			continue
		}
		_ = l.Close()
		seen[p] = true
	}
	for range 200 {
		p := FreePort(t)
		if seen[p] {
			t.Fatalf("port %d handed out twice", p)
		}
		seen[p] = true
	}
	for _, p := range FreePorts(t, 50) {
		if seen[p] {
			t.Fatalf("port %d handed out twice", p)
		}
		seen[p] = true
	}
}

// TestPortClaimedAcrossProcesses checks that a port this process has handed out, and not bound,
// is not free to another test binary: the other process's probe must skip it, or its listener,
// held for an instant while it chooses, makes this process's later bind fail (a broker restarting
// on its own ports met exactly that). The other process is this test binary run again.
func TestPortClaimedAcrossProcesses(t *testing.T) {
	if p := os.Getenv("CKF_PORT_CLAIM_CHILD"); p != "" {
		port, err := strconv.Atoi(p)
		if err != nil {
			t.Fatal(err)
		}
		handedOut.Lock()
		pp, free := probe(port)
		handedOut.Unlock()
		if free {
			pp.release()
			fmt.Println("probe: free")
			return
		}
		fmt.Println("probe: claimed")
		return
	}
	port := FreePort(t)
	ask := func(port int) string {
		t.Helper()
		cmd := exec.Command(os.Args[0], "-test.run=^TestPortClaimedAcrossProcesses$", "-test.count=1")
		cmd.Env = append(os.Environ(), "CKF_PORT_CLAIM_CHILD="+strconv.Itoa(port))
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("child: %v\n%s", err, out)
		}
		for _, line := range strings.Split(string(out), "\n") {
			if v, ok := strings.CutPrefix(line, "probe: "); ok {
				return v
			}
		}
		t.Fatalf("child said nothing of the probe:\n%s", out)
		return ""
	}
	if got := ask(port); got != "claimed" {
		t.Errorf("another process found port %d %s, though this process handed it out", port, got)
	}
	// The control: a port nobody handed out is free to the other process.
	other := FreePort(t)
	handedOut.Lock()
	if f := handedOut.claims[other]; f != nil {
		_ = f.Close()
		delete(handedOut.claims, other)
	}
	handedOut.Unlock()
	if got := ask(other); got != "free" {
		t.Errorf("another process found unclaimed port %d %s", other, got)
	}
}
