package bridge_test

import "github.com/ckf-stream/ckf-stream/bridge"

// defaulted is c with bridge.DefaultConfig's value in every field that c leaves at its zero
// value: the tests' shorthand for "the defaults, with these fields". The library itself takes a
// zero as a zero.
func defaulted(c bridge.Config) bridge.Config {
	d := bridge.DefaultConfig()
	if c.Ranks == 0 {
		c.Ranks = d.Ranks
	}
	if c.BlockSize == 0 {
		c.BlockSize = d.BlockSize
	}
	if c.BufferBatches == 0 {
		c.BufferBatches = d.BufferBatches
	}
	if c.ReplayTimeout == 0 {
		c.ReplayTimeout = d.ReplayTimeout
	}
	if c.LostHistory == "" {
		c.LostHistory = d.LostHistory
	}
	return c
}
