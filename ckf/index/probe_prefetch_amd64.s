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

// func prefetchLines(a, b unsafe.Pointer, n int)
//
// PREFETCHT0 a + 64*i and b + 64*i for i in 0..n-1 (n >= 1).
TEXT ·prefetchLines(SB), NOSPLIT|NOFRAME, $0-24
	MOVQ a+0(FP), AX
	MOVQ b+8(FP), BX
	MOVQ n+16(FP), CX
lloop:
	PREFETCHT0 (AX)
	PREFETCHT0 (BX)
	ADDQ $64, AX
	ADDQ $64, BX
	DECQ CX
	JNZ lloop
	RET

// func prefetchImagesW(col unsafe.Pointer, images unsafe.Pointer, n int, rowBytes uint64)
//
// PREFETCHW col + rowBytes*images[i].Bucket for i in 0..n-1 (images points
// at n 16-byte {Bucket, Value} pairs). Prefetches never fault.
TEXT ·prefetchImagesW(SB), NOSPLIT|NOFRAME, $0-32
	MOVQ col+0(FP), DI
	MOVQ images+8(FP), SI
	MOVQ n+16(FP), CX
	MOVQ rowBytes+24(FP), R8
	TESTQ CX, CX
	JLE pdone
ploop:
	MOVQ 0(SI), DX
	IMULQ R8, DX
	// PREFETCHW (DI)(DX*1): 0F 0D /1 with a SIB byte (mod=00 reg=1 rm=100;
	// scale=1 index=DX base=DI).
	BYTE $0x0F; BYTE $0x0D; BYTE $0x0C; BYTE $0x17
	ADDQ $16, SI
	DECQ CX
	JNZ ploop
pdone:
	RET
