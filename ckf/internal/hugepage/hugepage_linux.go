//go:build linux

package hugepage

import "syscall"

// madviseHugePage is MADV_HUGEPAGE (linux/mman.h); the syscall package does not name it.
const madviseHugePage = 14

func advise(region []byte) { _ = syscall.Madvise(region, madviseHugePage) }
