package bridge

import (
	"errors"
	"fmt"
	"time"
)

// Defaults of Config (DefaultConfig). ReplayRetries, IdleRecheck and Resume default to their
// zero values (no retry, no re-check, no read-back); processor bridge sets them from
// bridge.replay_retries (3), bridge.idle_recheck (5s) and bridge.resume (true).
const (
	DefaultBlockSize     = 16
	DefaultBufferBatches = 1024
	DefaultReplayTimeout = 2 * time.Second
)

// ErrConfig is wrapped by every configuration error of New.
var ErrConfig = errors.New("bridge: invalid configuration")

// Config configures a Bridge for one engine worker. Start from DefaultConfig: New and Check
// take every field as it is, as the rest of the project's configurations do (streams/config.go's
// configuration style): a zero is a zero, never "the default", and a zero that cannot work is
// refused naming the field.
type Config struct {
	// Endpoint is the engine's PUB endpoint of rank 0 (tcp://host:5557); rank r uses
	// RankEndpoint(Endpoint, r).
	Endpoint string
	// ReplayEndpoint is the engine's ROUTER replay endpoint of rank 0; empty: no gap filling
	// (gaps are reported as lost).
	ReplayEndpoint string
	// Topic is the ZeroMQ topic filter; empty receives every topic.
	Topic string
	// Bind binds the SUB sockets instead of dialling (for engines configured with a
	// non-wildcard endpoint, which connect).
	Bind bool
	// Ranks is the number of data-parallel ranks of the engine; default 1; >= 1.
	Ranks int
	// WorkerID is the worker id of every record (and the record key).
	WorkerID uint64
	// BlockSize is the only engine block size accepted; default 16 (DefaultBlockSize); >= 1.
	BlockSize int
	// LoraNames maps numeric LoRA ids to adapter names for engines that send no lora_name.
	LoraNames map[int64]string
	// KVTopic and DeadLetterTopic are the topics written.
	KVTopic, DeadLetterTopic string
	// BufferBatches bounds the batches received and not yet handled, per rank; default 1024
	// (DefaultBufferBatches); >= 1.
	BufferBatches int
	// ReplayTimeout bounds the wait for each replay reply; default 2s (DefaultReplayTimeout);
	// > 0.
	ReplayTimeout time.Duration
	// ReplayRetries is how many replays in a row may bring nothing new before the missing
	// batches are reported lost (0: the first replay is the only one).
	ReplayRetries int
	// IdleRecheck is how long a rank may be silent before the replay socket is asked for
	// batches after the last one handled; 0 disables the re-check.
	IdleRecheck time.Duration
	// Resume reads the worker's records back from KVTopic at start to continue where a
	// previous bridge stopped (ReadBack); it needs Params.ConsumerOpts.
	Resume bool
	// LostHistory is the policy for a rank's blocks when engine batches are lost:
	// LostHistoryClear (the default) or LostHistoryKeep.
	LostHistory LostHistory
}

// DefaultConfig returns the defaults: one rank, blocks of DefaultBlockSize tokens,
// DefaultBufferBatches per rank, replays bounded by DefaultReplayTimeout and not retried, no idle
// re-check, no read-back, lost history cleared. The endpoints, the worker id and the topics are
// the caller's.
func DefaultConfig() Config {
	return Config{
		Ranks:         1,
		BlockSize:     DefaultBlockSize,
		BufferBatches: DefaultBufferBatches,
		ReplayTimeout: DefaultReplayTimeout,
		LostHistory:   LostHistoryClear,
	}
}

// ConfigError is a configuration New, NewFleet or Check refuses. Field names the setting as
// processor bridge and bridge.engines_file spell it (endpoint, replay_endpoint, ranks,
// block_size, ...), empty for what no bridge.* setting holds (the topics). It matches ErrConfig.
type ConfigError struct {
	Field  string
	Reason string
}

func (e *ConfigError) Error() string {
	if e.Field == "" {
		return ErrConfig.Error() + ": " + e.Reason
	}
	return ErrConfig.Error() + ": " + e.Field + ": " + e.Reason
}

func (e *ConfigError) Unwrap() error { return ErrConfig }

// Check reports the first rule c breaks, as New does, without building anything: a
// *ConfigError.
func (c Config) Check() error { return c.validate() }

func (c *Config) validate() error {
	bad := func(field, f string, a ...any) error { return &ConfigError{Field: field, Reason: fmt.Sprintf(f, a...)} }
	switch {
	case c.Endpoint == "":
		return bad("endpoint", "no engine endpoint")
	case c.Ranks < 1:
		return bad("ranks", "%d is not positive", c.Ranks)
	case c.BlockSize < 1:
		return bad("block_size", "%d is not positive", c.BlockSize)
	case c.KVTopic == "" || c.DeadLetterTopic == "":
		return bad("", "no KV-events or dead-letter topic")
	case c.BufferBatches < 1:
		return bad("buffer_batches", "%d is not positive", c.BufferBatches)
	case c.ReplayTimeout <= 0:
		return bad("replay_timeout", "%v is not positive", c.ReplayTimeout)
	case c.ReplayRetries < 0:
		return bad("replay_retries", "%d is negative", c.ReplayRetries)
	case c.IdleRecheck < 0:
		return bad("idle_recheck", "%v is negative", c.IdleRecheck)
	case c.LostHistory != LostHistoryClear && c.LostHistory != LostHistoryKeep:
		return bad("lost_history", "%q (want %q or %q)", c.LostHistory, LostHistoryClear, LostHistoryKeep)
	}
	pubs := make(map[string]int, c.Ranks)
	for r := 0; r < c.Ranks; r++ {
		ep, err := RankEndpoint(c.Endpoint, r)
		if err != nil {
			return bad("endpoint", "%v", err)
		}
		pubs[ep] = r
	}
	for r := 0; r < c.Ranks; r++ {
		rep, err := RankEndpoint(c.ReplayEndpoint, r)
		if err != nil {
			return bad("replay_endpoint", "%v", err)
		}
		// The engines add the rank to both ports, so N ranks take the PUB ports [p, p+N) and the
		// replay ports [q, q+N): where the ranges meet, one port would be two sockets, which
		// neither the engine (it fails to bind) nor the bridge can serve.
		if pr, clash := pubs[rep]; clash && rep != "" {
			away, _ := RankEndpoint(c.Endpoint, max(100, c.Ranks))
			return bad("replay_endpoint", "rank %d's replay endpoint %s is rank %d's PUB endpoint: each rank adds its number to both "+
				"ports, so with %d ranks the replay port must be at least %d away from the PUB port (for example %s, as the engine's "+
				"replay_endpoint too)", r, rep, pr, c.Ranks, c.Ranks, away)
		}
	}
	return nil
}
