package testenv

import (
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
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
//
// The test binaries of `make test` run side by side and choose from the same range, so a port
// one binary has handed out but not bound yet (or has unbound for a moment: a broker's restart
// on its own ports) looks free to the others, and a probe of theirs that holds it for an instant
// makes the bind fail. Each handed-out port is therefore also claimed across processes: an
// exclusive flock on a file named after the port in a folder of the machine's temporary
// directory, held by this process until it exits (the kernel drops the lock with the process,
// so a crashed test leaves no claim behind). A port another process claims is never probed.

// handedOut is every port this process has handed out: a test may not have bound one yet.
// claims holds the open claim file of each (see above); they stay open until the process exits.
var handedOut struct {
	sync.Mutex
	ports  map[int]bool
	claims map[int]*os.File
}

// claimDir is the folder of the cross-process port claims.
func claimDir() string { return filepath.Join(os.TempDir(), "ckf-stream-port-claims") }

// claimPort takes the cross-process claim of port p: ok is false when another process (or
// another claim of this one) holds it. The returned file holds the claim until it is closed; it
// is nil, with ok true, when claims cannot be kept on this machine (no writable temporary
// directory), and ports are then chosen as if no other process chose any.
func claimPort(p int) (f *os.File, ok bool) {
	dir := claimDir()
	if err := os.MkdirAll(dir, 0o777); err != nil {
		return nil, true
	}
	f, err := os.OpenFile(filepath.Join(dir, strconv.Itoa(p)), os.O_CREATE|os.O_RDWR, 0o666)
	if err != nil {
		return nil, true
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		_ = f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, false
		}
		return nil, true
	}
	return f, true
}

// portRange is the range ports are chosen from: up to 12,000 ports below the ephemeral range,
// never below 1024; ok is false when there is no room for want ports there.
func portRange(want int) (lo, hi int, ok bool) {
	hi = ephemeralPortsStart()
	lo = max(hi-12000, 1024)
	return lo, hi, hi-lo >= 4*want
}

// portProbe is a port held while it is being chosen: its listener on every address and its
// cross-process claim (nil when claims cannot be kept).
type portProbe struct {
	port  int
	l     net.Listener
	claim *os.File
}

// release gives the port up: it was not chosen.
func (pp portProbe) release() {
	_ = pp.l.Close()
	if pp.claim != nil {
		_ = pp.claim.Close()
	}
}

// probe holds port p if this process has not handed it out, no other process claims it, and
// nothing is bound to it on any address. The caller releases it or hands it out.
func probe(p int) (portProbe, bool) {
	if handedOut.ports[p] {
		return portProbe{}, false
	}
	claim, ok := claimPort(p)
	if !ok {
		return portProbe{}, false
	}
	l, err := net.Listen("tcp", ":"+strconv.Itoa(p))
	if err != nil {
		if claim != nil {
			_ = claim.Close()
		}
		return portProbe{}, false
	}
	return portProbe{port: p, l: l, claim: claim}, true
}

// handOut records the probed ports as handed out, closes their listeners, keeps their claims
// and returns the ports in order.
func handOut(pps []portProbe) []int {
	if handedOut.ports == nil {
		handedOut.ports = make(map[int]bool)
		handedOut.claims = make(map[int]*os.File)
	}
	for _, pp := range pps {
		_ = pp.l.Close()
		handedOut.ports[pp.port] = true
		if pp.claim != nil {
			handedOut.claims[pp.port] = pp.claim
		}
	}
	ports := make([]int, len(pps))
	for i, pp := range pps {
		ports[i] = pp.port
	}
	return ports
}

// freeLoopbackPorts returns n distinct ports that are free now, chosen below the ephemeral
// range. Every probe stays open until all are chosen, so no port is handed out twice.
func freeLoopbackPorts(n int) ([]int, error) {
	handedOut.Lock()
	defer handedOut.Unlock()
	lo, hi, ok := portRange(n)
	if !ok {
		// No room below the ephemeral range: let the kernel choose.
		var pps []portProbe
		for range n {
			l, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				for _, pp := range pps {
					pp.release()
				}
				return nil, fmt.Errorf("free port: %w", err)
			}
			pps = append(pps, portProbe{port: l.Addr().(*net.TCPAddr).Port, l: l})
		}
		return handOut(pps), nil
	}
	var pps []portProbe
	start := mrand.IntN(hi - lo)
	for i := 0; i < hi-lo && len(pps) < n; i++ {
		if pp, free := probe(lo + (start+i)%(hi-lo)); free {
			pps = append(pps, pp)
		}
	}
	if len(pps) < n {
		for _, pp := range pps {
			pp.release()
		}
		return nil, fmt.Errorf("free port: only %d of %d ports free in [%d,%d)", len(pps), n, lo, hi)
	}
	return handOut(pps), nil
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
		var pps []portProbe
		for k := range n {
			pp, free := probe(base + k)
			if !free {
				break
			}
			pps = append(pps, pp)
		}
		if len(pps) == n {
			return handOut(pps)[0], nil
		}
		for _, pp := range pps {
			pp.release()
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
