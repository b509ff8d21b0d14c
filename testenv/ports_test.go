package testenv

import (
	"net"
	"slices"
	"strconv"
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
