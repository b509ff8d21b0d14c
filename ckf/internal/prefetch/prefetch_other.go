//go:build !amd64 || purego

package prefetch

import "unsafe"

// Line does nothing where no prefetch instruction is wired up: the caller's reads still happen,
// only without the overlap.
func Line(p unsafe.Pointer) {}

// Lines does nothing, as Line.
func Lines(addrs []uintptr) {}
