//go:build !linux

package index

// adviseHugePages is a no-op outside Linux.
func adviseHugePages([]uint64) {}
