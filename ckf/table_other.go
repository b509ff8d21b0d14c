//go:build !linux

package ckf

// adviseHugePages is a no-op outside Linux.
func adviseHugePages([]uint64) {}
