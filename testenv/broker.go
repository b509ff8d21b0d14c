package testenv

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// BrokerConfig describes a broker that StartBroker launches. Zero values take kafka-up.sh's
// defaults: a run directory under $TMPDIR, free ports, a 512 MiB heap, a 90 s start timeout.
type BrokerConfig struct {
	// RunDir holds the broker's data, config, log and pid. It is wiped at every start, so two
	// brokers must never share one. Default: $TMPDIR/ckf-kafka.
	RunDir string
	// Port is the client port; 0 picks 9092 or, when that is busy, the first free port from 19092.
	Port int
	// ControllerPort is the KRaft controller port; 0 picks a free port after Port.
	ControllerPort int
	// StartTimeout bounds the wait for readiness. Default 90 s.
	StartTimeout time.Duration
	// StopTimeout bounds the controlled shutdown before the JVM is killed. Default 30 s.
	StopTimeout time.Duration
	// KeepData restarts on the run directory's existing data instead of formatting a fresh one.
	// It needs the same ports as before (the KRaft quorum is bound to the controller port).
	KeepData bool
	// ExtraConfig is a file of server properties appended to the broker's server.properties (a
	// key set again there wins): StartSecuredBroker's listeners.
	ExtraConfig string
	// ScramUsers are SCRAM credentials created when the storage is formatted, each as kafka-storage
	// format's --add-scram takes it: SCRAM-SHA-512=[name=alice,password=secret].
	ScramUsers []string
}

// Broker is a running single-node Kafka broker started by StartBroker.
type Broker struct {
	cfg     BrokerConfig
	addr    string
	pid     int
	Startup time.Duration // from the start of kafka-up.sh to a serving client port
}

// ScriptDir returns the folder that holds kafka-up.sh, kafka-down.sh and the broker's config.
func ScriptDir() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "kafka")
}

func (c BrokerConfig) env() []string {
	env := os.Environ()
	if c.RunDir != "" {
		env = append(env, "KAFKA_RUN_DIR="+c.RunDir)
	}
	if c.Port != 0 {
		env = append(env, "KAFKA_PORT="+strconv.Itoa(c.Port))
	}
	if c.ControllerPort != 0 {
		env = append(env, "KAFKA_CONTROLLER_PORT="+strconv.Itoa(c.ControllerPort))
	}
	if c.StartTimeout > 0 {
		env = append(env, "KAFKA_START_TIMEOUT="+strconv.Itoa(int(c.StartTimeout.Seconds()+0.5)))
	}
	if c.KeepData {
		env = append(env, "KAFKA_KEEP_DATA=1")
	}
	if c.ExtraConfig != "" {
		env = append(env, "KAFKA_EXTRA_CONFIG="+c.ExtraConfig)
	}
	if len(c.ScramUsers) > 0 {
		env = append(env, "KAFKA_SCRAM_USERS="+strings.Join(c.ScramUsers, "\n"))
	}
	if c.StopTimeout > 0 {
		env = append(env, "KAFKA_STOP_TIMEOUT="+strconv.Itoa(int(c.StopTimeout.Seconds()+0.5)))
	}
	return env
}

func (c BrokerConfig) runDir() string {
	if c.RunDir != "" {
		return c.RunDir
	}
	return DefaultRunDir()
}

// StartBroker formats a fresh data directory and starts a broker, returning once its client
// port serves requests. On failure the error carries the tail of the broker log. If a broker of
// the same run directory is already up, StartBroker returns it as is.
func StartBroker(ctx context.Context, cfg BrokerConfig) (*Broker, error) {
	// Fix both ports now, so a Restart binds the same ones (the KRaft quorum names the
	// controller's address).
	for _, port := range []*int{&cfg.Port, &cfg.ControllerPort} {
		if *port == 0 {
			ps, err := freeLoopbackPorts(1)
			if err != nil {
				return nil, err
			}
			*port = ps[0]
		}
	}
	began := time.Now()
	cmd := exec.CommandContext(ctx, "bash", filepath.Join(ScriptDir(), "kafka-up.sh"))
	cmd.Env = cfg.env()
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("kafka-up.sh: %w\n%s", err, strings.TrimSpace(stderr.String()))
	}
	b := &Broker{cfg: cfg, addr: strings.TrimSpace(stdout.String()), Startup: time.Since(began)}
	pid, err := readPid(cfg.runDir())
	if err != nil {
		return nil, err
	}
	b.pid = pid
	if err := Ping(ctx, []string{b.addr}); err != nil {
		return nil, fmt.Errorf("broker started but does not answer: %w\n%s", err, b.LogTail(40))
	}
	return b, nil
}

func readPid(runDir string) (int, error) {
	raw, err := os.ReadFile(filepath.Join(runDir, "kafka.pid"))
	if err != nil {
		return 0, fmt.Errorf("broker pid file: %w", err)
	}
	return strconv.Atoi(strings.TrimSpace(string(raw)))
}

// Addr is the broker's bootstrap address (host:port).
func (b *Broker) Addr() string { return b.addr }

// Pid is the broker JVM's process id.
func (b *Broker) Pid() int { return b.pid }

// LogTail returns the last n lines of the broker's log.
func (b *Broker) LogTail(n int) string {
	raw, err := os.ReadFile(filepath.Join(b.cfg.runDir(), "kafka.out"))
	if err != nil {
		return "(no broker log: " + err.Error() + ")"
	}
	lines := strings.Split(strings.TrimRight(string(raw), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// Stop shuts the broker down (controlled shutdown, then SIGKILL after the stop timeout) and
// returns once the JVM has exited.
func (b *Broker) Stop(ctx context.Context) error {
	cmd := exec.CommandContext(ctx, "bash", filepath.Join(ScriptDir(), "kafka-down.sh"))
	cmd.Env = b.cfg.env()
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("kafka-down.sh: %w\n%s", err, out)
	}
	if ProcessAlive(b.pid) {
		return fmt.Errorf("broker pid %d still alive after kafka-down.sh", b.pid)
	}
	return nil
}

// Kill sends SIGKILL to the broker JVM (a crash, for fault tests) and waits for it to exit.
func (b *Broker) Kill() error {
	if err := syscall.Kill(b.pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
		return err
	}
	for ProcessAlive(b.pid) {
		time.Sleep(20 * time.Millisecond)
	}
	return nil
}

// ResidentBytes reports the broker JVM's resident set size from /proc (Linux only).
func (b *Broker) ResidentBytes() (int64, error) { return ResidentBytesOf(b.pid) }

// ResidentBytesOf reports the resident set size of process pid from /proc (Linux only).
func ResidentBytesOf(pid int) (int64, error) {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(raw), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "VmRSS:" {
			kb, err := strconv.ParseInt(f[1], 10, 64)
			return kb * 1024, err
		}
	}
	return 0, errors.New("VmRSS not found")
}

// CPUSeconds reports the user plus system CPU time process pid has used, from /proc (Linux
// only, at the kernel's usual 100 ticks a second).
func CPUSeconds(pid int) (float64, error) {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The command name, in parentheses, may hold spaces: the fields after it are counted from
	// its closing parenthesis (utime and stime are fields 14 and 15 of the line).
	f := strings.Fields(string(raw[bytes.LastIndexByte(raw, ')')+1:]))
	if len(f) < 13 {
		return 0, errors.New("short /proc stat line")
	}
	ut, err1 := strconv.ParseFloat(f[11], 64)
	st, err2 := strconv.ParseFloat(f[12], 64)
	if err := errors.Join(err1, err2); err != nil {
		return 0, err
	}
	return (ut + st) / 100, nil
}

// ProcessAlive reports whether pid names a live (non-zombie) process.
func ProcessAlive(pid int) bool {
	if err := syscall.Kill(pid, 0); err != nil {
		return false
	}
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// The state letter follows the parenthesised command name.
	if i := bytes.LastIndexByte(raw, ')'); i >= 0 && i+2 < len(raw) && raw[i+2] == 'Z' {
		return false
	}
	return true
}

// Restart stops the broker (controlled shutdown) and starts it again on the same data and ports,
// as an operator's rolling restart would. The Broker's pid and Startup are updated.
func (b *Broker) Restart(ctx context.Context) error {
	if err := b.Stop(ctx); err != nil {
		return err
	}
	cfg := b.cfg
	cfg.KeepData = true
	nb, err := StartBroker(ctx, cfg)
	if err != nil {
		return err
	}
	b.pid, b.Startup, b.addr = nb.pid, nb.Startup, nb.addr
	return nil
}
