package testenv

import (
	"fmt"
	mrand "math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// Ports for the processes and sockets a test starts (brokers, cluster nodes, engine emulators,
// processors' HTTP servers) are chosen below the kernel's ephemeral port range
// (ip_local_port_range). A port is chosen, its probe listener closed, and only later bound by
// whatever the test starts: a port from the ephemeral range can be taken in between by any
// process on the machine that binds port 0 or connects out (the parallel test packages of
// `make test` open Kafka connections all the time), and the bind then fails with "address
// already in use". Below that range only a process that names the port explicitly can take it.
// A port is free when nothing is bound to it on any address (the probe listens on all of them),
// and this process never hands out the same port twice.

// handedOut is every port this process has handed out: a test may not have bound one yet.
var handedOut struct {
	sync.Mutex
	ports map[int]bool
}

// portRange is the range ports are chosen from: up to 12,000 ports below the ephemeral range,
// never below 1024; ok is false when there is no room for want ports there.
func portRange(want int) (lo, hi int, ok bool) {
	hi = ephemeralPortsStart()
	lo = max(hi-12000, 1024)
	return lo, hi, hi-lo >= 4*want
}

// probe holds port p on every address if nothing else is bound to it and this process has not
// handed it out; the caller closes the listener.
func probe(p int) (net.Listener, bool) {
	if handedOut.ports[p] {
		return nil, false
	}
	l, err := net.Listen("tcp", ":"+strconv.Itoa(p))
	if err != nil {
		return nil, false
	}
	return l, true
}

// handOut records ps as handed out and closes the probes.
func handOut(ls []net.Listener, ps []int) {
	for _, l := range ls {
		_ = l.Close()
	}
	if handedOut.ports == nil {
		handedOut.ports = make(map[int]bool)
	}
	for _, p := range ps {
		handedOut.ports[p] = true
	}
}

// freeLoopbackPorts returns n distinct ports that are free now, chosen below the ephemeral
// range. Every probe stays open until all are chosen, so no port is handed out twice.
func freeLoopbackPorts(n int) ([]int, error) {
	handedOut.Lock()
	defer handedOut.Unlock()
	var ls []net.Listener
	out := make([]int, 0, n)
	defer func() { handOut(ls, out) }()
	lo, hi, ok := portRange(n)
	if !ok {
		// No room below the ephemeral range: let the kernel choose.
		for range n {
			l, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				return nil, fmt.Errorf("free port: %w", err)
			}
			ls = append(ls, l)
			out = append(out, l.Addr().(*net.TCPAddr).Port)
		}
		return out, nil
	}
	start := mrand.IntN(hi - lo)
	for i := 0; i < hi-lo && len(out) < n; i++ {
		p := lo + (start+i)%(hi-lo)
		if l, free := probe(p); free {
			ls = append(ls, l)
			out = append(out, p)
		}
	}
	if len(out) < n {
		return nil, fmt.Errorf("free port: only %d of %d ports free in [%d,%d)", len(out), n, lo, hi)
	}
	return out, nil
}

// freePortRun returns the first of n consecutive ports that are free now, chosen below the
// ephemeral range (an engine emulator's ranks listen on a base port plus the rank).
func freePortRun(n int) (int, error) {
	handedOut.Lock()
	defer handedOut.Unlock()
	lo, hi, ok := portRange(n)
	if !ok {
		return 0, fmt.Errorf("free port run: no room for %d ports below the ephemeral range at %d", n, hi)
	}
	span := hi - lo - n + 1
	start := mrand.IntN(span)
	for i := 0; i < span; i++ {
		base := lo + (start+i)%span
		var ls []net.Listener
		for k := range n {
			l, free := probe(base + k)
			if !free {
				break
			}
			ls = append(ls, l)
		}
		if len(ls) == n {
			run := make([]int, n)
			for k := range run {
				run[k] = base + k
			}
			handOut(ls, run)
			return base, nil
		}
		for _, l := range ls {
			_ = l.Close()
		}
	}
	return 0, fmt.Errorf("free port run: no %d consecutive free ports in [%d,%d)", n, lo, hi)
}

// FreePorts returns n distinct loopback ports that are free now (see above for how they are
// chosen). The test fails if there are not enough.
func FreePorts(t testing.TB, n int) []int {
	t.Helper()
	ps, err := freeLoopbackPorts(n)
	if err != nil {
		t.Fatal(err)
	}
	return ps
}

// FreePort is FreePorts(t, 1)[0].
func FreePort(t testing.TB) int {
	t.Helper()
	return FreePorts(t, 1)[0]
}

// FreePortRun returns the first of n consecutive loopback ports that are free now. The test
// fails if there is no such run.
func FreePortRun(t testing.TB, n int) int {
	t.Helper()
	base, err := freePortRun(n)
	if err != nil {
		t.Fatal(err)
	}
	return base
}

// FreeAddr returns "127.0.0.1:port" for a FreePort.
func FreeAddr(t testing.TB) string {
	t.Helper()
	return "127.0.0.1:" + strconv.Itoa(FreePort(t))
}

// ephemeralPortsStart is the first port of the kernel's ephemeral range, Linux's default 32768
// when /proc does not say.
func ephemeralPortsStart() int {
	raw, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 32768
	}
	f := strings.Fields(string(raw))
	if len(f) != 2 {
		return 32768
	}
	p, err := strconv.Atoi(f[0])
	if err != nil || p <= 0 || p > 65535 {
		return 32768
	}
	return p
}
