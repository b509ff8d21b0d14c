package bridge

import (
	"errors"
	"strings"
	"testing"
)

// TestConfigCheckRefusesOverlappingRankPorts: the engines add the rank to both the PUB and the
// replay port, so a replay port within ranks-1 of the PUB port makes one port two sockets (the
// README's data-parallel example once had PUB 5557, replay 5558 and two ranks). One engine's
// configuration is refused with the setting named and a port that works suggested.
func TestConfigCheckRefusesOverlappingRankPorts(t *testing.T) {
	base := DefaultConfig()
	base.WorkerID, base.KVTopic, base.DeadLetterTopic = 1, "kv", "dl"
	for _, c := range []struct {
		pub, replay string
		ranks       int
		want        string // the *ConfigError's reason; empty: accepted
	}{
		{"tcp://e:5557", "tcp://e:5558", 1, ""},
		{"tcp://e:5557", "tcp://e:5558", 2, "rank 0's replay endpoint tcp://e:5558 is rank 1's PUB endpoint: each rank adds its number to both ports, " +
			"so with 2 ranks the replay port must be at least 2 away from the PUB port (for example tcp://e:5657, as the engine's replay_endpoint too)"},
		{"tcp://e:5557", "tcp://e:5559", 2, ""},
		{"tcp://e:5557", "tcp://e:5556", 3, "rank 1's replay endpoint tcp://e:5557 is rank 0's PUB endpoint"},
		{"tcp://e:5557", "tcp://e:5554", 3, ""},
		{"tcp://e:5557", "tcp://e:5557", 1, "rank 0's replay endpoint tcp://e:5557 is rank 0's PUB endpoint"},
		{"tcp://e:5557", "tcp://f:5558", 2, ""}, // another host
		{"tcp://e:5557", "tcp://e:5600", 200, "with 200 ranks the replay port must be at least 200 away from the PUB port (for example tcp://e:5757,"},
		{"tcp://e:5557", "", 4, ""},
		{"ipc:///run/kv", "ipc:///run/kv-replay", 2, ""},
	} {
		cfg := base
		cfg.Endpoint, cfg.ReplayEndpoint, cfg.Ranks = c.pub, c.replay, c.ranks
		err := cfg.Check()
		var ce *ConfigError
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%s + %s, %d ranks: %v, want accepted", c.pub, c.replay, c.ranks, err)
		case c.want != "" && (!errors.As(err, &ce) || !errors.Is(err, ErrConfig) || ce.Field != "replay_endpoint" || !strings.Contains(ce.Reason, c.want)):
			t.Errorf("%s + %s, %d ranks: %v, want replay_endpoint: ...%s...", c.pub, c.replay, c.ranks, err, c.want)
		}
	}
}

// TestConfigTakesZeroAsZero: the library reads a zero field as zero, as the project's other
// configurations do; the defaults come from DefaultConfig, and a zero that cannot work is
// refused naming the setting instead of being replaced behind the caller's back.
func TestConfigTakesZeroAsZero(t *testing.T) {
	ok := DefaultConfig()
	ok.Endpoint, ok.WorkerID, ok.KVTopic, ok.DeadLetterTopic = "tcp://e:5557", 1, "kv", "dl"
	if err := ok.Check(); err != nil {
		t.Fatalf("DefaultConfig with an endpoint and topics: %v", err)
	}
	for _, c := range []struct {
		field string
		zero  func(*Config)
	}{
		{"ranks", func(c *Config) { c.Ranks = 0 }},
		{"block_size", func(c *Config) { c.BlockSize = 0 }},
		{"buffer_batches", func(c *Config) { c.BufferBatches = 0 }},
		{"replay_timeout", func(c *Config) { c.ReplayTimeout = 0 }},
		{"lost_history", func(c *Config) { c.LostHistory = "" }},
	} {
		cfg := ok
		c.zero(&cfg)
		var ce *ConfigError
		if err := cfg.Check(); !errors.As(err, &ce) || ce.Field != c.field {
			t.Errorf("%s = 0: %v, want refused naming %s", c.field, err, c.field)
		}
	}
	// Zero is a legal value of these, and means none: no retry, no idle re-check.
	z := ok
	z.ReplayRetries, z.IdleRecheck = 0, 0
	if err := z.Check(); err != nil {
		t.Errorf("no replay retry and no idle re-check: %v", err)
	}
}
