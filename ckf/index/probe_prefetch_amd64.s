//go:build amd64 && !purego

#include "textflag.h"

// func prefetch4(a, b unsafe.Pointer)
TEXT ·prefetch4(SB), NOSPLIT|NOFRAME, $0-16
	MOVQ a+0(FP), AX
	MOVQ b+8(FP), BX
	PREFETCHT0 (AX)
	PREFETCHT0 64(AX)
	PREFETCHT0 (BX)
	PREFETCHT0 64(BX)
	RET

// func prefetchW(p unsafe.Pointer)
TEXT ·prefetchW(SB), NOSPLIT|NOFRAME, $0-8
	MOVQ p+0(FP), AX
	// PREFETCHW (AX): 0F 0D /1 (the Go assembler has no mnemonic). It is
	// a NOP hint on CPUs without the feature bit (all x86-64 CPUs decode
	// it; pre-Broadwell Intel treat it as a NOP).
	BYTE $0x0F; BYTE $0x0D; BYTE $0x08
	RET
