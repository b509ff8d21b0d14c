//go:build amd64 && !race && !purego

#include "textflag.h"

// func storeColumnAsm(dst *uint64, src *uint64, n int)
//
// For i in 0..n-1: MOVQ src[i] -> *(dst + 128*i), one plain 8-byte store per
// word, with PREFETCHW of the target 8 rows (1024 bytes) ahead. The rows are
// 128 bytes apart, so every store needs a cache line of its own: the
// prefetch asks for each line's ownership early, and plain stores let many
// of those requests be outstanding at once, where XCHG (what
// atomic.StoreUint64 compiles to) waited for each line in turn. The
// memory-model argument for plain stores is on storeColumn
// (table_storecol_amd64.go). Prefetches past the end of the table are
// harmless (prefetches never fault).
TEXT ·storeColumnAsm(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	TESTQ CX, CX
	JEQ done
loop:
	// PREFETCHW 1024(DI): 0F 0D /1, mod=10 rm=DI, disp32.
	BYTE $0x0F; BYTE $0x0D; BYTE $0x8F; LONG $0x00000400
	MOVQ (SI), AX
	MOVQ AX, (DI)
	ADDQ $8, SI
	ADDQ $128, DI
	DECQ CX
	JNZ loop
done:
	RET
