//go:build amd64 && !race && !purego

#include "textflag.h"

// func storeColumnAsm(dst *uint64, src *uint64, n int)
//
// For i in 0..n-1: XCHGQ src[i] -> *(dst + 128*i), with PREFETCHW of the
// target 8 rows (1024 bytes) ahead (measured best of 2..64 rows on the
// project VM: 12.8 ms vs 18 ms at 32 rows for 2^20 buckets). XCHG is
// exactly what Go's
// atomic.StoreUint64 compiles to on amd64, so every word is stored with a
// sequentially consistent atomic 64-bit store. Prefetches past the end of
// the table are harmless (prefetches never fault).
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
	XCHGQ AX, (DI)
	ADDQ $8, SI
	ADDQ $128, DI
	DECQ CX
	JNZ loop
done:
	RET
