//go:build linux

package hugepage

import "syscall"

// The advice values of linux/mman.h; the syscall package names neither.
const (
	madviseHugePage = 14 // MADV_HUGEPAGE
	madviseCollapse = 25 // MADV_COLLAPSE, Linux 6.1 and later
)

// advise marks region for huge pages and collapses what is already backed by small ones.
//
// MADV_HUGEPAGE only governs later page faults: memory the Go heap reuses (freed by an earlier
// table, a rehash, a released fixture) is already backed by 4 KiB pages, which khugepaged would
// merge later, slowly, or never. MADV_COLLAPSE merges them now, synchronously. Both are best
// effort: on an older kernel, or when no huge page can be had, the small pages stay.
func advise(region []byte) {
	_ = syscall.Madvise(region, madviseHugePage)
	_ = syscall.Madvise(region, madviseCollapse)
}
