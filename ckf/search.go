package ckf

import "github.com/ckf-stream/ckf-stream/ckf/internal/search"

const (
	// DefaultVerificationWindow is the verification window of the default
	// search configuration (consumer §1.4): two positions below the tentative depth.
	DefaultVerificationWindow = 2
	// MaxVerificationWindow is the largest accepted verification window.
	MaxVerificationWindow = search.MaxWindow
)

// SearchConfig is the consumer's prefix-search configuration (consumer §1.4).
type SearchConfig struct {
	// VerificationWindow is the number of positions directly below the
	// tentative depth that are re-checked one by one. Valid range 1..8;
	// DefaultSearchConfig uses 2. The zero value is NOT silently replaced by
	// the default: NewGlobalIndexer rejects it, exactly as the reference
	// rejects any value outside 1..=8.
	VerificationWindow int
}

// DefaultSearchConfig returns the production search configuration
// (verification window 2).
func DefaultSearchConfig() SearchConfig {
	return SearchConfig{VerificationWindow: DefaultVerificationWindow}
}

// Validate reports a *BuildError of kind BuildInvalidVerificationWindow
// (errors.Is(err, ErrBuildInvalidVerificationWindow)) when the window is
// outside 1..8. A negative window is reported with Value 0.
func (c SearchConfig) Validate() error {
	if c.VerificationWindow < 1 || c.VerificationWindow > MaxVerificationWindow {
		v := uint64(0)
		if c.VerificationWindow > 0 {
			v = uint64(c.VerificationWindow)
		}
		return &BuildError{Kind: BuildInvalidVerificationWindow, Value: v}
	}
	return nil
}

// FindPrefixDepths runs the production prefix search (consumer §7, with tail
// verification and provenance fallback) for n positions over the lanes in
// ready, with the given verification window, and returns one depth per lane
// (lanes outside ready are 0). probe(pos) must return the 16-lane hit mask of
// position pos (0 <= pos < n); it is called at most once per distinct
// position per phase and never for pos >= n.
//
// window is clamped into 1..MaxVerificationWindow (the indexer validates its
// configuration up front; the pure function never fails). Depths saturate at
// math.MaxUint32. It does not allocate.
func FindPrefixDepths(n int, ready uint16, window int, probe func(pos int) uint16) [LaneCount]uint32 {
	return search.Find(n, ready, window, probe)
}

// FindPrefixDepths64 is FindPrefixDepths over up to MaxLanes lanes (consumer
// §16): ready and probe's result are uint64 lane masks and the result has
// one depth per lane of MaxLanes. It does not allocate.
func FindPrefixDepths64(n int, ready uint64, window int, probe func(pos int) uint64) [MaxLanes]uint32 {
	var d [MaxLanes]uint32
	search.FindWide(&d, n, ready, window, func(pos int, _ uint64) uint64 { return probe(pos) }, nil, nil)
	return d
}

// LinearPrefixDepths64 is LinearPrefixDepths over up to MaxLanes lanes.
// Tests and benchmarks only.
func LinearPrefixDepths64(n int, ready uint64, probe func(pos int) uint64) [MaxLanes]uint32 {
	return search.LinearWide(n, ready, probe)
}

// LinearPrefixDepths is the exact linear reference (consumer §7.6) the galloping
// search approximates: a lane's depth is the length of its leading run of
// hits. Tests and benchmarks only.
func LinearPrefixDepths(n int, ready uint16, probe func(pos int) uint16) [LaneCount]uint32 {
	return search.Linear(n, ready, probe)
}
