package testenv

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
)

// Two regions on Kafka's own replication (issue 38): two single-node clusters, a and b, started
// by testenv/kafka/regions-up.sh, and a MirrorMaker 2 in dedicated mode beside each region
// (testenv/kafka/mirror-up.sh) running only the flows into it, as a deployment runs them (design
// §8): the one beside b mirrors a->b and reaches region a only through a fault proxy in front of
// a's WAN listener, the one beside a mirrors b->a through a proxy in front of b's. The two proxies
// are the WAN, which a test cuts, heals, delays and counts. `make regions-up` and `make
// regions-down` start and stop the same topology by hand, without the proxies. design §8 says
// what crosses the WAN and how a remote indexer recovers a mirrored lane.

// RegionsEnv turns the region tests on (`make test-regions` sets RegionsRequireEnv, which does
// too); without either they skip, naming the target: each starts two brokers and MirrorMaker.
const RegionsEnv = "CKF_REGIONS"

// RegionsRequireEnv makes a topology that cannot be started a failure instead of a skip.
const RegionsRequireEnv = "CKF_REQUIRE_REGIONS"

// RegionsSet skips t unless the region tests were asked for (RegionsEnv=1 or RegionsRequireEnv=1).
func RegionsSet(t testing.TB) {
	t.Helper()
	if os.Getenv(RegionsEnv) != "1" && os.Getenv(RegionsRequireEnv) != "1" {
		t.Skipf("part of the region tests: make test-regions (or %s=1)", RegionsEnv)
	}
}

// Mirror policies: MirrorMaker's replication.policy.class.
const (
	// MirrorDefaultPolicy names a mirrored topic <source alias>.<topic> (a.ckf-lanes in b) and
	// mirrors both ways, a->b and b->a.
	MirrorDefaultPolicy = "default"
	// MirrorIdentityPolicy keeps the topic's name and mirrors a->b only: the policy cannot tell
	// a mirrored record from a local one, so b->a would send every record back.
	MirrorIdentityPolicy = "identity"
)

// RegionsConfig describes the topology StartRegions launches. Zero values take the defaults.
type RegionsConfig struct {
	// RunDir holds a/, b/ and mm2/ (data, configs, logs, pids). Default: a directory of the test.
	RunDir string
	// Policy is MirrorDefaultPolicy (the default) or MirrorIdentityPolicy.
	Policy string
	// Topics are the mirrored topics, comma-separated Java regexes matched whole. Default
	// mirror-up.sh's: ckf-lanes.*, ckf-snapshot-index.*.
	Topics string
	// FlushInterval is MirrorMaker's offset.flush.interval.ms: after a kill -9, what was mirrored
	// since the last flush is mirrored again. Default mirror-up.sh's, 1 s.
	FlushInterval time.Duration
}

// Region is one region's cluster, its WAN route and the MirrorMaker of the flows into it.
type Region struct {
	// Alias is the region's MirrorMaker alias, "a" or "b".
	Alias string
	// WAN is the fault proxy in front of the region's WAN listener, which the region advertises
	// there: every byte the other region's MirrorMaker exchanges with this region passes it (its
	// source consumers' fetches of this region's records). It counts those bytes from before
	// MirrorMaker started (FaultProxy.Bytes).
	WAN *FaultProxy
	// Mirror is the MirrorMaker beside the region (MirrorMaker's --clusters with the region's
	// alias), running the flows into it; nil for region a under MirrorIdentityPolicy, which
	// mirrors a->b only.
	Mirror *Mirror
	port   int
	dir    string
}

// Seeds are the region's own client listener (PLAINTEXT), for the region's processes and the
// test's clients.
func (r *Region) Seeds() []string { return []string{"127.0.0.1:" + strconv.Itoa(r.port)} }

// Cluster returns the region as a Cluster (for NewTopic, Client, Admin, PartitionRecords).
func (r *Region) Cluster() *Cluster { return &Cluster{seeds: r.Seeds()} }

// Pid is the region broker's JVM pid.
func (r *Region) Pid() (int, error) { return readPid(r.dir) }

// Remote is the name a topic of region source has in this region under policy.
func (r *Region) Remote(source *Region, topic, policy string) string {
	if policy == MirrorIdentityPolicy {
		return topic
	}
	return source.Alias + "." + topic
}

// Regions is a running two-region topology.
type Regions struct {
	cfg  RegionsConfig
	A, B *Region
	// Startup is the time from the start of regions-up.sh to every MirrorMaker started.
	Startup time.Duration
	env     []string
}

// Mirror is the MirrorMaker 2 process beside one region.
type Mirror struct {
	r *Regions
	// Target is the alias of the region it runs beside and mirrors into.
	Target string
	dir    string
	// seedA and seedB are the bootstraps it reaches the regions by: its own region's local
	// listener, the other's WAN proxy.
	seedA, seedB string
	pid          int
}

func (r *Regions) script(ctx context.Context, name string, extra ...string) (string, error) {
	cmd := exec.CommandContext(ctx, "bash", filepath.Join(ScriptDir(), name))
	cmd.Env = append(append([]string(nil), r.env...), extra...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("%s: %w\n%s", name, err, strings.TrimSpace(stderr.String()))
	}
	return strings.TrimSpace(stdout.String()), nil
}

// StartRegions starts regions a and b on free ports, the WAN proxies and the MirrorMakers, and
// returns once every MirrorMaker has started its herders. On failure nothing is left running.
func StartRegions(ctx context.Context, cfg RegionsConfig) (*Regions, error) {
	if cfg.RunDir == "" {
		return nil, errors.New("testenv: RegionsConfig.RunDir is required")
	}
	if cfg.Policy == "" {
		cfg.Policy = MirrorDefaultPolicy
	}
	if cfg.Policy != MirrorDefaultPolicy && cfg.Policy != MirrorIdentityPolicy {
		return nil, fmt.Errorf("testenv: RegionsConfig.Policy is %q or %q, not %q", MirrorDefaultPolicy, MirrorIdentityPolicy, cfg.Policy)
	}
	// Per region: its client listener, controller, WAN listener and the WAN proxy in front of it.
	ports, err := freeLoopbackPorts(8)
	if err != nil {
		return nil, err
	}
	r := &Regions{cfg: cfg,
		A: &Region{Alias: "a", port: ports[0], dir: filepath.Join(cfg.RunDir, "a")},
		B: &Region{Alias: "b", port: ports[4], dir: filepath.Join(cfg.RunDir, "b")}}
	for i, reg := range []*Region{r.A, r.B} {
		wan, err := startWANProxy("wan-"+reg.Alias, "127.0.0.1:"+strconv.Itoa(ports[4*i+3]), "127.0.0.1:"+strconv.Itoa(ports[4*i+2]))
		if err != nil {
			r.stopProxies()
			return nil, err
		}
		reg.WAN = wan
	}
	r.env = append(os.Environ(),
		"REGIONS_DIR="+cfg.RunDir,
		"REGION_A_PORT="+strconv.Itoa(ports[0]), "REGION_A_CONTROLLER_PORT="+strconv.Itoa(ports[1]),
		"REGION_A_WAN_PORT="+strconv.Itoa(ports[2]), "REGION_A_WAN_ADVERTISED="+r.A.WAN.Addr(),
		"REGION_B_PORT="+strconv.Itoa(ports[4]), "REGION_B_CONTROLLER_PORT="+strconv.Itoa(ports[5]),
		"REGION_B_WAN_PORT="+strconv.Itoa(ports[6]), "REGION_B_WAN_ADVERTISED="+r.B.WAN.Addr(),
		"MIRROR_POLICY="+cfg.Policy,
		// Nothing outlives the test binary, even one that dies without its cleanups.
		"REGIONS_OWNER_PID="+strconv.Itoa(os.Getpid()), "MIRROR_OWNER_PID="+strconv.Itoa(os.Getpid()))
	if cfg.Topics != "" {
		r.env = append(r.env, "MIRROR_TOPICS="+cfg.Topics)
	}
	if cfg.FlushInterval > 0 {
		r.env = append(r.env, "MIRROR_FLUSH_MS="+strconv.FormatInt(cfg.FlushInterval.Milliseconds(), 10))
	}
	// regions-up.sh's MirrorMakers: the one beside b always, the one beside a where a flow runs
	// into a.
	r.B.Mirror = &Mirror{r: r, Target: "b", dir: filepath.Join(cfg.RunDir, "mm2-b"), seedA: r.A.WAN.Addr(), seedB: r.B.Seeds()[0]}
	if cfg.Policy == MirrorDefaultPolicy {
		r.A.Mirror = &Mirror{r: r, Target: "a", dir: filepath.Join(cfg.RunDir, "mm2-a"), seedA: r.A.Seeds()[0], seedB: r.B.WAN.Addr()}
	}
	began := time.Now()
	if _, err := r.script(ctx, "regions-up.sh"); err != nil {
		r.stopProxies()
		return nil, err
	}
	r.Startup = time.Since(began)
	for _, m := range r.Mirrors() {
		if m.pid, err = readMirrorPid(m.dir); err != nil {
			break
		}
	}
	if err == nil {
		err = Ping(ctx, r.A.Seeds())
	}
	if err == nil {
		err = Ping(ctx, r.B.Seeds())
	}
	if err != nil {
		r.Close()
		return nil, err
	}
	return r, nil
}

// startWANProxy starts the fault proxy of one region's WAN route, counting its bytes from the
// start.
func startWANProxy(name, listen, upstream string) (*FaultProxy, error) {
	p := toxiproxy.NewProxy(newFaultServer(), name, listen, upstream)
	if err := p.Start(); err != nil {
		return nil, fmt.Errorf("WAN proxy %s: %w", name, err)
	}
	f := &FaultProxy{p: p}
	if err := f.CountBytes(); err != nil {
		p.Stop()
		return nil, err
	}
	return f, nil
}

func (r *Regions) stopProxies() {
	for _, reg := range []*Region{r.A, r.B} {
		if reg.WAN != nil {
			reg.WAN.p.Stop()
		}
	}
}

// Mirrors are the topology's MirrorMakers: the one beside b, and the one beside a where a flow
// runs into a.
func (r *Regions) Mirrors() []*Mirror {
	ms := []*Mirror{r.B.Mirror}
	if r.A.Mirror != nil {
		ms = append(ms, r.A.Mirror)
	}
	return ms
}

// StartRegionsT starts a topology for t under a directory of the test and stops it when the
// test ends. When it cannot be started the test is skipped with one line, or fails under
// RegionsRequireEnv=1.
func StartRegionsT(t testing.TB, cfg RegionsConfig) *Regions {
	t.Helper()
	if cfg.RunDir == "" {
		cfg.RunDir = filepath.Join(t.TempDir(), "regions")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute) // four JVMs start on a shared machine
	defer cancel()
	r, err := StartRegions(ctx, cfg)
	if err != nil {
		if os.Getenv(RegionsRequireEnv) == "1" {
			t.Fatalf("two regions and MirrorMaker: %v", err)
		}
		t.Skipf("two regions and MirrorMaker could not be started (%s=1 makes this a failure): %s", RegionsRequireEnv,
			strings.SplitN(err.Error(), "\n", 2)[0])
	}
	t.Cleanup(func() {
		if t.Failed() {
			for _, m := range r.Mirrors() {
				t.Logf("log of the MirrorMaker into %s, last lines:\n%s", m.Target, m.LogTail(40))
			}
		}
		r.Close()
	})
	var ms []string
	for _, m := range r.Mirrors() {
		ms = append(ms, fmt.Sprintf("into %s pid %d", m.Target, m.Pid()))
	}
	t.Logf("regions a %v (WAN proxy %s) and b %v (WAN proxy %s), MirrorMakers %s (%s policy), started in %v",
		r.A.Seeds(), r.A.WAN.Addr(), r.B.Seeds(), r.B.WAN.Addr(), strings.Join(ms, ", "), r.Policy(), r.Startup.Round(time.Millisecond))
	return r
}

func readMirrorPid(dir string) (int, error) {
	raw, err := os.ReadFile(filepath.Join(dir, "mm2.pid"))
	if err != nil {
		return 0, fmt.Errorf("MirrorMaker pid file: %w", err)
	}
	return strconv.Atoi(strings.TrimSpace(string(raw)))
}

// Policy is the topology's mirror policy.
func (r *Regions) Policy() string { return r.cfg.Policy }

// RemoteTopic is the name of region a's topic in region b.
func (r *Regions) RemoteTopic(topic string) string { return r.B.Remote(r.A, topic, r.cfg.Policy) }

// Close kills the MirrorMakers and both brokers (SIGKILL: the data is thrown away) and stops the
// WAN proxies.
func (r *Regions) Close() {
	for _, m := range r.Mirrors() {
		_ = m.Kill9()
	}
	for _, reg := range []*Region{r.A, r.B} {
		if pid, err := reg.Pid(); err == nil {
			_ = syscall.Kill(pid, syscall.SIGKILL)
			for ProcessAlive(pid) {
				time.Sleep(20 * time.Millisecond) // the kernel's reaping, not an outcome
			}
		}
	}
	r.stopProxies()
}

// CutWAN drops every byte between the regions, both ways on both routes, keeping the connections
// open: the silence of a cut link, not a refused connection.
func (r *Regions) CutWAN() error {
	var errs []error
	for _, reg := range []*Region{r.A, r.B} {
		errs = append(errs, reg.WAN.Add(Blackhole("upstream")), reg.WAN.Add(Blackhole("downstream")))
	}
	return errors.Join(errs...)
}

// HealWAN ends CutWAN.
func (r *Regions) HealWAN() error {
	var errs []error
	for _, reg := range []*Region{r.A, r.B} {
		errs = append(errs, reg.WAN.Remove("blackhole-upstream"), reg.WAN.Remove("blackhole-downstream"))
	}
	return errors.Join(errs...)
}

// Pid is MirrorMaker's JVM pid (of its latest start).
func (m *Mirror) Pid() int { return m.pid }

// Alive reports whether MirrorMaker runs.
func (m *Mirror) Alive() bool { return ProcessAlive(m.pid) }

// Kill9 sends SIGKILL to MirrorMaker (a crash: no flush of its source positions) and waits for
// the JVM to exit.
func (m *Mirror) Kill9() error {
	if m.pid == 0 {
		return nil
	}
	if err := syscall.Kill(m.pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
		return err
	}
	for ProcessAlive(m.pid) {
		time.Sleep(20 * time.Millisecond) // the kernel's reaping, not an outcome
	}
	return nil
}

// Start starts MirrorMaker again with the same settings after Kill9, returning once its herders
// have started; it resumes from the source positions it last flushed.
func (m *Mirror) Start(ctx context.Context) error {
	out, err := m.r.script(ctx, "mirror-up.sh", "MIRROR_DIR="+m.dir, "MIRROR_KEEP_CONFIG=1", "MIRROR_CLUSTERS="+m.Target,
		"MIRROR_A_BOOTSTRAP="+m.seedA, "MIRROR_B_BOOTSTRAP="+m.seedB)
	if err != nil {
		return err
	}
	pid, err := strconv.Atoi(out)
	if err != nil {
		return fmt.Errorf("mirror-up.sh printed %q, not a pid", out)
	}
	m.pid = pid
	return nil
}

// LogLines returns MirrorMaker's log (every incarnation's, appended) as lines.
func (m *Mirror) LogLines() []string {
	raw, err := os.ReadFile(filepath.Join(m.dir, "mm2.out"))
	if err != nil {
		return nil
	}
	return strings.Split(strings.TrimRight(string(raw), "\n"), "\n")
}

// LogTail returns the last n lines of MirrorMaker's log.
func (m *Mirror) LogTail(n int) string {
	ls := m.LogLines()
	if len(ls) > n {
		ls = ls[len(ls)-n:]
	}
	return strings.Join(ls, "\n")
}
