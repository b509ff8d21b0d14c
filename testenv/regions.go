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
// by testenv/kafka/regions-up.sh, and MirrorMaker 2 in dedicated mode between them
// (testenv/kafka/mirror-up.sh), which runs beside region b and reaches region a only through a
// fault proxy in front of a's WAN listener: the WAN, which a test cuts and heals. `make
// regions-up` and `make regions-down` start and stop the same topology by hand, without the
// proxy. design §8 says what crosses the WAN and how a remote indexer recovers a mirrored lane.

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

// Region is one region's cluster.
type Region struct {
	// Alias is the region's MirrorMaker alias, "a" or "b".
	Alias string
	port  int
	dir   string
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
	// WAN is the fault proxy in front of region a's WAN listener, which a advertises there:
	// every byte MirrorMaker exchanges with region a passes it (a's records to b, and b->a's
	// writes into a).
	WAN *FaultProxy
	// Mirror is the MirrorMaker process.
	Mirror *Mirror
	// Startup is the time from the start of regions-up.sh to MirrorMaker started.
	Startup time.Duration
	env     []string
}

// Mirror is the MirrorMaker 2 process of a Regions.
type Mirror struct {
	r   *Regions
	pid int
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

// StartRegions starts regions a and b on free ports, the WAN proxy and MirrorMaker, and returns
// once MirrorMaker has started its herders. On failure nothing is left running.
func StartRegions(ctx context.Context, cfg RegionsConfig) (*Regions, error) {
	if cfg.RunDir == "" {
		return nil, errors.New("testenv: RegionsConfig.RunDir is required")
	}
	if cfg.Policy == "" {
		cfg.Policy = MirrorDefaultPolicy
	}
	ports, err := freeLoopbackPorts(7)
	if err != nil {
		return nil, err
	}
	r := &Regions{cfg: cfg,
		A: &Region{Alias: "a", port: ports[0], dir: filepath.Join(cfg.RunDir, "a")},
		B: &Region{Alias: "b", port: ports[3], dir: filepath.Join(cfg.RunDir, "b")}}
	wan := "127.0.0.1:" + strconv.Itoa(ports[6])
	p := toxiproxy.NewProxy(newFaultServer(), "wan-a", wan, "127.0.0.1:"+strconv.Itoa(ports[2]))
	if err := p.Start(); err != nil {
		return nil, fmt.Errorf("WAN proxy: %w", err)
	}
	r.WAN = &FaultProxy{p: p}
	r.env = append(os.Environ(),
		"REGIONS_DIR="+cfg.RunDir,
		"REGION_A_PORT="+strconv.Itoa(ports[0]), "REGION_A_CONTROLLER_PORT="+strconv.Itoa(ports[1]),
		"REGION_A_WAN_PORT="+strconv.Itoa(ports[2]), "REGION_A_WAN_ADVERTISED="+wan,
		"REGION_B_PORT="+strconv.Itoa(ports[3]), "REGION_B_CONTROLLER_PORT="+strconv.Itoa(ports[4]),
		"REGION_B_WAN_PORT="+strconv.Itoa(ports[5]),
		"MIRROR_POLICY="+cfg.Policy,
		// Nothing outlives the test binary, even one that dies without its cleanups.
		"REGIONS_OWNER_PID="+strconv.Itoa(os.Getpid()), "MIRROR_OWNER_PID="+strconv.Itoa(os.Getpid()))
	if cfg.Topics != "" {
		r.env = append(r.env, "MIRROR_TOPICS="+cfg.Topics)
	}
	if cfg.FlushInterval > 0 {
		r.env = append(r.env, "MIRROR_FLUSH_MS="+strconv.FormatInt(cfg.FlushInterval.Milliseconds(), 10))
	}
	began := time.Now()
	if _, err := r.script(ctx, "regions-up.sh"); err != nil {
		p.Stop()
		return nil, err
	}
	r.Startup = time.Since(began)
	pid, err := readMirrorPid(r.mirrorDir())
	if err == nil {
		r.Mirror = &Mirror{r: r, pid: pid}
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

// StartRegionsT starts a topology for t under a directory of the test and stops it when the
// test ends. When it cannot be started the test is skipped with one line, or fails under
// RegionsRequireEnv=1.
func StartRegionsT(t testing.TB, cfg RegionsConfig) *Regions {
	t.Helper()
	if cfg.RunDir == "" {
		cfg.RunDir = filepath.Join(t.TempDir(), "regions")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
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
			t.Logf("MirrorMaker log, last lines:\n%s", r.Mirror.LogTail(40))
		}
		r.Close()
	})
	t.Logf("regions a %v and b %v, WAN proxy %s, MirrorMaker pid %d (%s policy), started in %v",
		r.A.Seeds(), r.B.Seeds(), r.WAN.Addr(), r.Mirror.Pid(), r.Policy(), r.Startup.Round(time.Millisecond))
	return r
}

func readMirrorPid(dir string) (int, error) {
	raw, err := os.ReadFile(filepath.Join(dir, "mm2.pid"))
	if err != nil {
		return 0, fmt.Errorf("MirrorMaker pid file: %w", err)
	}
	return strconv.Atoi(strings.TrimSpace(string(raw)))
}

func (r *Regions) mirrorDir() string { return filepath.Join(r.cfg.RunDir, "mm2") }

// Policy is the topology's mirror policy.
func (r *Regions) Policy() string { return r.cfg.Policy }

// RemoteTopic is the name of region a's topic in region b.
func (r *Regions) RemoteTopic(topic string) string { return r.B.Remote(r.A, topic, r.cfg.Policy) }

// Close kills MirrorMaker and both brokers (SIGKILL: the data is thrown away) and stops the WAN
// proxy.
func (r *Regions) Close() {
	if r.Mirror != nil {
		_ = r.Mirror.Kill9()
	}
	for _, reg := range []*Region{r.A, r.B} {
		if pid, err := reg.Pid(); err == nil {
			_ = syscall.Kill(pid, syscall.SIGKILL)
			for ProcessAlive(pid) {
				time.Sleep(20 * time.Millisecond) // the kernel's reaping, not an outcome
			}
		}
	}
	r.WAN.p.Stop()
}

// CutWAN drops every byte between MirrorMaker and region a, both ways, keeping the connections
// open: the silence of a cut link, not a refused connection.
func (r *Regions) CutWAN() error {
	return errors.Join(r.WAN.Add(Blackhole("upstream")), r.WAN.Add(Blackhole("downstream")))
}

// HealWAN ends CutWAN.
func (r *Regions) HealWAN() error {
	return errors.Join(r.WAN.Remove("blackhole-upstream"), r.WAN.Remove("blackhole-downstream"))
}

// Pid is MirrorMaker's JVM pid (of its latest start).
func (m *Mirror) Pid() int { return m.pid }

// Alive reports whether MirrorMaker runs.
func (m *Mirror) Alive() bool { return ProcessAlive(m.pid) }

// Kill9 sends SIGKILL to MirrorMaker (a crash: no flush of its source positions) and waits for
// the JVM to exit.
func (m *Mirror) Kill9() error {
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
	r := m.r
	out, err := r.script(ctx, "mirror-up.sh", "MIRROR_DIR="+r.mirrorDir(), "MIRROR_KEEP_CONFIG=1",
		"MIRROR_A_BOOTSTRAP="+r.WAN.Addr(), "MIRROR_B_BOOTSTRAP="+r.B.Seeds()[0])
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
	raw, err := os.ReadFile(filepath.Join(m.r.mirrorDir(), "mm2.out"))
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
