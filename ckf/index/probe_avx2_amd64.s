//go:build amd64 && !race && !purego

#include "textflag.h"

// AVX2 probe of 32-lane blocks of wide rows (consumer §5.3, §16; the Go side
// and the memory-ordering argument are in probe_avx2_amd64.go).
//
// A block is 32 consecutive words (256 bytes, four cache lines) of a row.
// Every word is read by a VMOVDQA of 16 bytes (two words) from a 16-byte
// aligned address, a load that CPUs with AVX carry out as one indivisible
// access; no wider load is used. Group k (k = 0..7) of a block is the ymm
// register [words 2k, 2k+1 | words 16+2k, 17+2k], built from two such loads
// and a VINSERTI128, so that the in-lane packs below leave lanes 0..15 in
// the low half and 16..31 in the high half, in order, and one VPMOVMSKB
// gives the block's 32 lane bits with no permutation:
//
//	VPCMPEQW       slot == fp                     0xFFFF per matching slot
//	VPOR           row A | row B                  (the two-row kernel)
//	VPACKSSWB g,g' slots to bytes                 one dword per lane
//	VPCMPEQD 0     lane has no matching slot      -1 per lane without a hit
//	VPACKSSDW      dwords to words (lanes 0..7 of each half, then 8..15)
//	VPACKSSWB      words to bytes (16 lanes per half)
//	VPMOVMSKB      32 "no hit" bits, inverted into the hit mask
//
// Y15 holds the fingerprint broadcast to 16 words, Y14 zero.

// HITS2 leaves in dst the slot-equality words of group k of rows SI and DI,
// ORed. It loads row SI's two chunks before row DI's (the per-lane order
// A before B of the settled probe).
#define HITS2(k, dst) \
	VMOVDQA (16*k)(SI), X0; \
	VMOVDQA (128+16*k)(SI), X1; \
	VINSERTI128 $1, X1, Y0, Y0; \
	VMOVDQA (16*k)(DI), X2; \
	VMOVDQA (128+16*k)(DI), X3; \
	VINSERTI128 $1, X3, Y2, Y2; \
	VPCMPEQW Y15, Y0, Y0; \
	VPCMPEQW Y15, Y2, Y2; \
	VPOR Y2, Y0, dst

// HITS1 is HITS2 over row SI alone (the re-probe of row A).
#define HITS1(k, dst) \
	VMOVDQA (16*k)(SI), X0; \
	VMOVDQA (128+16*k)(SI), X1; \
	VINSERTI128 $1, X1, Y0, Y0; \
	VPCMPEQW Y15, Y0, dst

// PAIR packs the slot words of two groups into one dword per lane and turns
// each into -1 (no hit) or 0.
#define PAIR(a, b) \
	VPACKSSWB b, a, a; \
	VPCMPEQD Y14, a, a

// BLOCK computes the 32 no-hit bits of the block at SI (and DI) into AX with
// the group macro H.
#define BLOCK(H) \
	H(0, Y4); \
	H(1, Y5); \
	PAIR(Y4, Y5); \
	H(2, Y5); \
	H(3, Y6); \
	PAIR(Y5, Y6); \
	VPACKSSDW Y5, Y4, Y4; \
	H(4, Y5); \
	H(5, Y6); \
	PAIR(Y5, Y6); \
	H(6, Y6); \
	H(7, Y7); \
	PAIR(Y6, Y7); \
	VPACKSSDW Y6, Y5, Y5; \
	VPACKSSWB Y5, Y4, Y4; \
	VPMOVMSKB Y4, AX

// func probeSettledAVX2Asm(ra, rb, rc *uint64, blocks int, fp uint16, lanes uint64) uint64
//
// The settled probe of blocks*32 lanes (blocks 1 or 2; rows 16-byte
// aligned): h = the hit mask of fp in rows ra and rb (bit l set iff word l
// of ra or of rb holds fp in some slot); then, if some lane of lanes is not
// in h, row rc (row A again in production; another row in tests) is probed
// alone and its hits among those lanes are added: h | (hits(rc) & lanes &^ h).
TEXT ·probeSettledAVX2Asm(SB), NOSPLIT, $0-56
	MOVQ ra+0(FP), SI
	MOVQ rb+8(FP), DI
	MOVQ blocks+24(FP), DX
	MOVWLZX fp+32(FP), AX
	MOVQ AX, X15
	VPBROADCASTW X15, Y15
	VPXOR Y14, Y14, Y14
	XORQ R8, R8
	XORL CX, CX

rowsloop:
	BLOCK(HITS2)
	NOTL AX
	SHLQ CX, AX
	ORQ AX, R8
	ADDQ $256, SI
	ADDQ $256, DI
	ADDL $32, CX
	DECQ DX
	JNZ rowsloop

	// R10 = lanes &^ h: the lanes to read once more in row rc.
	MOVQ R8, R10
	NOTQ R10
	ANDQ lanes+40(FP), R10
	JZ done

	MOVQ rc+16(FP), SI
	MOVQ blocks+24(FP), DX
	XORQ R11, R11
	XORL CX, CX

againloop:
	BLOCK(HITS1)
	NOTL AX
	SHLQ CX, AX
	ORQ AX, R11
	ADDQ $256, SI
	ADDL $32, CX
	DECQ DX
	JNZ againloop

	ANDQ R10, R11
	ORQ R11, R8

done:
	VZEROUPPER
	MOVQ R8, ret+48(FP)
	RET
