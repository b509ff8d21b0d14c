//go:build amd64 && !race && !purego

#include "textflag.h"

// func storeColumnAsm(dst *uint64, src *uint64, n int, rowBytes uint64, ahead uint64)
//
// For i in 0..n-1: MOVQ src[i] -> *(dst + rowBytes*i), one plain 8-byte
// store per word, with PREFETCHW of the target ahead bytes (8 rows, at least
// 1024 bytes) further on. Rows of 16 lanes are 128 bytes apart, so every
// store needs a cache line of its own: the
// prefetch asks for each line's ownership early, and plain stores let many
// of those requests be outstanding at once, where XCHG (what
// atomic.StoreUint64 compiles to) waited for each line in turn. The
// memory-model argument for plain stores is on storeColumn
// (table_storecol_amd64.go). Prefetches past the end of the table are
// harmless (prefetches never fault).
TEXT ·storeColumnAsm(SB), NOSPLIT, $0-40
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	MOVQ rowBytes+24(FP), R9
	MOVQ ahead+32(FP), BX
	TESTQ CX, CX
	JEQ done
loop:
	// PREFETCHW (DI)(BX*1): 0F 0D /1 with a SIB byte (mod=00 reg=1 rm=100;
	// scale=1 index=BX base=DI).
	BYTE $0x0F; BYTE $0x0D; BYTE $0x0C; BYTE $0x1F
	MOVQ (SI), AX
	MOVQ AX, (DI)
	ADDQ $8, SI
	ADDQ R9, DI
	DECQ CX
	JNZ loop
done:
	RET
