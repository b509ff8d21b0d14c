package ckf

import "math/bits"

// Configuration constants (producer §5, consumer §1.2).
// DefaultVerificationWindow (2) and MaxVerificationWindow (8) are declared by
// the consumer half in search.go and shared.
const (
	// DefaultSeed is the default addressing seed.
	DefaultSeed uint64 = 0x5DEECE66D1B54A33
	// DefaultMaxKicks is the default relocation bound of an insertion.
	DefaultMaxKicks = 500
	// MaxKicks is the largest allowed max_kicks.
	MaxKicks = 4096
	// DefaultExpectedBlocksPerDC is the default capacity (callers override).
	DefaultExpectedBlocksPerDC = 1
	// DefaultPublishEveryNEvents is the default publication cadence.
	DefaultPublishEveryNEvents = 1
	// MaxWireBucketCount is the WAN layer's cap on bucket_count (2^24). The
	// producer config itself does not apply it.
	MaxWireBucketCount = 1 << 24
)

// CkfConfig is the producer configuration. Build it with DefaultCkfConfig
// or NewCkfConfig; the zero value is invalid (ExpectedBlocksPerDC == 0).
type CkfConfig struct {
	// ExpectedBlocksPerDC sizes the filter (producer §5.2). Must be > 0. Default 1.
	ExpectedBlocksPerDC uint64
	// Seed is the addressing seed; any value. Default DefaultSeed.
	Seed uint64
	// MaxKicks bounds relocations of one insertion: 1..=MaxKicks.
	// Default 500. A larger value raises reachable occupancy at the cost
	// of worst-case insertion time (and dirty-window reservation).
	MaxKicks uint64
	// VerificationWindow is the consumer search parameter
	// (search.verification_window): 1..=MaxVerificationWindow. Default 2.
	VerificationWindow uint64
	// PublishEveryNEvents is the publication cadence in primary events:
	// > 0. Default 1 (every primary event is a publication boundary).
	PublishEveryNEvents uint64
}

// DefaultCkfConfig returns the defaults of producer §5.1.
func DefaultCkfConfig() CkfConfig {
	return CkfConfig{
		ExpectedBlocksPerDC: DefaultExpectedBlocksPerDC,
		Seed:                DefaultSeed,
		MaxKicks:            DefaultMaxKicks,
		VerificationWindow:  DefaultVerificationWindow,
		PublishEveryNEvents: DefaultPublishEveryNEvents,
	}
}

// NewCkfConfig returns the defaults with ExpectedBlocksPerDC = n.
func NewCkfConfig(n uint64) CkfConfig {
	c := DefaultCkfConfig()
	c.ExpectedBlocksPerDC = n
	return c
}

// Validate checks the fields in row order (expected capacity, max kicks,
// verification window, publication cadence) and returns the first
// violation as a *BuildError.
func (c CkfConfig) Validate() error {
	if c.ExpectedBlocksPerDC == 0 {
		return &BuildError{Kind: BuildExpectedCapacityZero}
	}
	if c.MaxKicks < 1 || c.MaxKicks > MaxKicks {
		return &BuildError{Kind: BuildInvalidMaxKicks, Value: c.MaxKicks, Maximum: MaxKicks}
	}
	if c.VerificationWindow < 1 || c.VerificationWindow > MaxVerificationWindow {
		return &BuildError{Kind: BuildInvalidVerificationWindow, Value: c.VerificationWindow}
	}
	if c.PublishEveryNEvents == 0 {
		return &BuildError{Kind: BuildInvalidPublishEveryNEvents}
	}
	return nil
}

// BucketCount validates the config and returns its bucket count (producer §5.2)
// without allocating anything.
func (c CkfConfig) BucketCount() (uint64, error) {
	if err := c.Validate(); err != nil {
		return 0, err
	}
	return BucketCountFor(c.ExpectedBlocksPerDC)
}

// Format validates the config and returns its FormatIdentity.
func (c CkfConfig) Format() (FormatIdentity, error) {
	n, err := c.BucketCount()
	if err != nil {
		return FormatIdentity{}, err
	}
	return NewFormatIdentity(c.Seed, n), nil
}

// BucketCountFor returns next_power_of_two(max(floor((5n+15)/16), 2)), i.e.
// ceil(5n/16) rounded up to a power of two and at least 2: four slots per
// bucket at an 80 % target load, so the actual load at n lands between 40 %
// and 80 %. n == 0 is ErrExpectedCapacityZero; any overflow of the checked
// arithmetic is ErrCapacityOverflow. Examples: 1 -> 2, 32 -> 16, 64 -> 32,
// 2048 -> 1024, 1,048,576 -> 524,288.
func BucketCountFor(expectedBlocks uint64) (uint64, error) {
	if expectedBlocks == 0 {
		return 0, &BuildError{Kind: BuildExpectedCapacityZero}
	}
	hi, times5 := bits.Mul64(expectedBlocks, 5)
	if hi != 0 {
		return 0, &BuildError{Kind: BuildCapacityOverflow}
	}
	sum, carry := bits.Add64(times5, 15, 0)
	if carry != 0 {
		return 0, &BuildError{Kind: BuildCapacityOverflow}
	}
	required := max(sum/16, 2)
	if required > 1<<63 {
		return 0, &BuildError{Kind: BuildCapacityOverflow}
	}
	return uint64(1) << (64 - bits.LeadingZeros64(required-1)), nil
}
