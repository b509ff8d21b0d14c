package streams

import (
	"errors"
	"fmt"
	"time"
)

// Configuration style, the same for every component built on this package: its LaneWriter,
// and in the packages beside it the indexer and lane feed (streams/lanes), the relay
// (streams/relay), the query service and client (streams/query) and the worker stage
// (streams/workers), each of which checks its configuration with a ConfigCheck:
//
//   - Each configuration type has a constructor of its defaults (DefaultIndexerConfig,
//     DefaultRelayConfig, ...). Callers start from it and change what they need; the zero value
//     of a configuration is not its defaults.
//   - The New… function takes the configuration literally and validates it: an illegal field is
//     a *ConfigError naming it, never replaced by a default. Where zero is a legal value it means
//     zero (no linger, no progress events, no coalescing, seed 0); each field's doc comment says
//     its default, its legal range and what zero means.
//   - The only empty values that are filled in are names with a natural derivation (topic names
//     from the codec, the relay's transactional id from its lane topic and pool) and the relay's
//     first incarnation (from the start time); their doc comments say so, and the component's
//     Config accessor returns the configuration with them derived.

// ErrInvalidConfig is matched (errors.Is) by every configuration error of the New… functions
// that check their configuration with a ConfigCheck.
var ErrInvalidConfig = errors.New("streams: invalid configuration")

// ConfigError reports an invalid field of one of the package's configurations. It matches
// ErrInvalidConfig and, when set, Err.
type ConfigError struct {
	// Config names the configuration: "indexer", "lane feed", "relay", "lane writer",
	// "query service", "query client" or "workers".
	Config string
	// Field is the Go path of the field within the configuration, for example "HeartbeatInterval"
	// or "Feed.ResumeBytes".
	Field string
	// Reason says what is wrong, as a predicate of the field ("must be > 0, got -1s").
	Reason string
	// Err is the underlying cause, if any (for example a ckf build error of the CKF field).
	Err error
}

// Error implements error: "streams: <config> config: <field> <reason>[: <cause>]".
func (e *ConfigError) Error() string {
	s := "streams: " + e.Config + " config: " + e.Field + " " + e.Reason
	if e.Err != nil {
		s += ": " + e.Err.Error()
	}
	return s
}

// Unwrap returns ErrInvalidConfig and the cause.
func (e *ConfigError) Unwrap() []error {
	if e.Err == nil {
		return []error{ErrInvalidConfig}
	}
	return []error{ErrInvalidConfig, e.Err}
}

// ConfigCheck collects the violations of one configuration's rules, in the order the rules are
// checked (field order), so validate methods read as a list of rules. Result returns the first,
// which is what a New… function refuses with; Problems returns them all, for a process
// configuration that reports every broken setting at once.
type ConfigCheck struct {
	Config string
	errs   []*ConfigError
}

// Fail records a violation of field.
func (c *ConfigCheck) Fail(field, format string, args ...any) {
	c.errs = append(c.errs, &ConfigError{Config: c.Config, Field: field, Reason: fmt.Sprintf(format, args...)})
}

// FailWith records a violation of field caused by err.
func (c *ConfigCheck) FailWith(field, reason string, err error) {
	c.errs = append(c.errs, &ConfigError{Config: c.Config, Field: field, Reason: reason, Err: err})
}

// Positive requires d > 0.
func (c *ConfigCheck) Positive(field string, d time.Duration) {
	if d <= 0 {
		c.Fail(field, "must be > 0, got %v", d)
	}
}

// NonNegative requires d >= 0 (zero's meaning is the field's).
func (c *ConfigCheck) NonNegative(field string, d time.Duration) {
	if d < 0 {
		c.Fail(field, "must not be negative, got %v", d)
	}
}

// Named requires a non-empty name.
func (c *ConfigCheck) Named(field, name string) {
	if name == "" {
		c.Fail(field, "must not be empty")
	}
}

// Result returns the first violation, or nil (a typed nil never escapes as a non-nil error).
func (c *ConfigCheck) Result() error {
	if len(c.errs) == 0 {
		return nil
	}
	return c.errs[0]
}

// Problems returns every violation, in the order the rules were checked.
func (c *ConfigCheck) Problems() []*ConfigError { return c.errs }
