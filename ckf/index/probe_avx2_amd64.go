//go:build amd64 && !race && !purego

package index

import "golang.org/x/sys/cpu"

// AVX2 kernel of wide rows (consumer §5.3, §16), chosen at run time.
//
// probeSettledAVX2Asm computes the hit mask of a fingerprint over 32-lane
// blocks of rows A and B (64 lanes: two blocks) and, for the decided lanes
// that miss in both, over row A once more (the settled probe,
// transposedTable.probeSettled). probeSettled runs it on the blocks of a row of 32 words or more when probeWideAVX2
// is set (the CPU has AVX2 and the OS saves the ymm registers), and the
// portable SWAR kernel otherwise and on the rest of the row. Race and
// purego builds use probe_avx2_generic.go, as the table's store assembly
// does (table_storecol_amd64.s): the race detector cannot see loads made
// in assembly, so `-race` runs the sync/atomic path and make test-norace
// runs this one.
//
// Memory ordering (consumer §5.5: every word is one atomic 64-bit load).
// Both x86-64 vendors guarantee an indivisible access for an aligned load
// of up to 8 bytes and, on every CPU that reports AVX, for an aligned
// 16-byte VMOVDQA (the VEX.128 form; MOVDQA, VMOVAPS and VMOVAPD too); they
// guarantee nothing for a 32-byte load: a VMOVDQU of 4 words may be carried
// out as several accesses, and there is no promise that each 8-byte
// element is one of them. A 32-byte load therefore does not meet "each word atomically" by
// what is specified, whatever current parts do, and the kernel does not
// use one. It reads every word as half of an aligned 16-byte VMOVDQA: one
// indivisible access of two words, which gives each word the single-copy
// atomicity of a 64-bit load (and more: the pair is read at one instant).
// Rows are 16-byte aligned (the table's first row is 128-byte aligned and
// a wide row is whole lines, consumer §16), which VMOVDQA requires.
//
// Order: x86-TSO does not reorder loads with other loads, so the loads of
// different instructions are seen in program order. The kernel loads each
// group of row A before the same group of row B, and reads row A again
// only after every load of row B, so for every lane the loads are A, then
// B, then A again: the order transposedTable.probeSettled's argument
// needs (producer §7.6). Assembly is also beyond the compiler's reordering.
//
// The cost of the 16-byte loads over 32-byte ones is one VINSERTI128 per 4
// words and row (performance §4.1 gives both, measured).

// probeWideAVX2 is whether probeSettled runs the AVX2 kernel on the 32-lane
// blocks of wide rows: the CPU has AVX2 and the OS saves the ymm registers
// across context switches (x/sys/cpu checks both: CPUID leaf 7 and XCR0 with
// OSXSAVE). Set once at start-up; benchmarks turn it off to measure the
// portable kernel in the same run.
var probeWideAVX2 = cpu.X86.HasAVX2

// probeSettledAVX2Asm is the settled probe of the blocks*32 lanes (blocks
// 1 or 2) of rows ra and rb, all 16-byte aligned: h = the hit mask of fp in
// ra or rb (bit l: word l of either row holds fp in some slot), then, when
// some lane of lanes is not in h, h | (hits of fp in row rc alone) & lanes.
// probeSettled passes row A as rc; tests pass another row to see which
// row the third read loads. See probe_avx2_amd64.s.
//
//go:noescape
func probeSettledAVX2Asm(ra, rb, rc *uint64, blocks int, fp uint16, lanes uint64) uint64

// probeWideKernel names the kernel of wide rows (benchmarks report it).
func probeWideKernel() string {
	if probeWideAVX2 {
		return "avx2"
	}
	return "swar"
}
