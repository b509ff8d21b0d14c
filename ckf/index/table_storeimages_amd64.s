//go:build amd64 && !race && !purego

#include "textflag.h"

// func storeImagesAsm(col *uint64, images *ckf.BucketImage, n int, buckets uint64, rowBytes uint64) int
//
// images points at n 16-byte {Bucket, Value} pairs. For i in 0..n-1, in
// order: stop if images[i].Bucket >= buckets; else store images[i].Value
// into col + rowBytes*Bucket (one row is stride lanes × 8 bytes; Bucket <
// buckets, so the product stays inside the table) with one plain 8-byte
// MOV. Returns the number of images stored. The memory-model
// argument for plain stores is on storeImages (table_storeimages_amd64.go).
TEXT ·storeImagesAsm(SB), NOSPLIT|NOFRAME, $0-48
	MOVQ col+0(FP), DI
	MOVQ images+8(FP), SI
	MOVQ n+16(FP), CX
	MOVQ buckets+24(FP), R8
	MOVQ rowBytes+32(FP), R9
	XORQ AX, AX
	TESTQ CX, CX
	JLE done
loop:
	MOVQ 0(SI), DX
	CMPQ DX, R8
	JAE done
	MOVQ 8(SI), BX
	IMULQ R9, DX
	MOVQ BX, (DI)(DX*1)
	ADDQ $16, SI
	INCQ AX
	CMPQ AX, CX
	JLT loop
done:
	MOVQ AX, ret+40(FP)
	RET
