// Command workersprof applies the windows of the worker-stage apply rows (workers-apply of make
// bench-peer: 16-block prompts over 64 workers, every fourth held by 4, external ids the
// sequence hashes; each window stores the next 256 prompts and removes the oldest 256, leaf
// first) to an index held at N memberships, for counting them under valgrind and for timing
// them by the thread's CPU time on a shared machine (performance §9.1):
//
//	workersprof N WINDOWS
//	valgrind --tool=callgrind --cache-sim=yes --collect-atstart=no \
//	  --toggle-collect=main.applyStores --toggle-collect=main.applyRemovals workersprof 1048576 8
//
// It prints the stores' and removals' thread CPU time per block over the WINDOWS windows after
// four untimed ones (applyStores and applyRemovals apply only those).
package main

import (
	"fmt"
	"os"
	"runtime"
	"strconv"
	"syscall"
	"time"
	"unsafe"

	"github.com/ckf-stream/ckf-stream/ckf"
	"github.com/ckf-stream/ckf-stream/ckf/producer"
	"github.com/ckf-stream/ckf-stream/ckf/workers"
)

const gamma = 0x9E3779B97F4A7C15 // SplitMix64's increment

// mix is SplitMix64's output function.
func mix(z uint64) uint64 {
	z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9
	z = (z ^ (z >> 27)) * 0x94D049BB133111EB
	return z ^ (z >> 31)
}

// events returns prompt p's store events and removals, one per holder: the draws of
// bench/peer's promptLocals (SplitMix64 from its stream) and its holders.
func events(p uint64) (st, rm []producer.RouterEvent) {
	var locals [16]uint64
	s := uint64(0x5045_4552_574B_5052) + 16*p*gamma
	for i := range locals {
		s += gamma
		locals[i] = mix(s)
	}
	seq := ckf.AppendSequenceHashes(nil, locals[:])
	blocks := make([]producer.StoredBlock, 16)
	ids := make([]ckf.ExternalBlockHash, 16)
	for i := range blocks {
		blocks[i] = producer.StoredBlock{BlockHash: ckf.ExternalBlockHash(seq[i]), TokensHash: ckf.LocalBlockHash(locals[i])}
		ids[15-i] = ckf.ExternalBlockHash(seq[i])
	}
	h := 1
	if p%4 == 0 {
		h = 4
	}
	for k := range uint64(h) {
		var a, b producer.RouterEvent
		a.WorkerID = ckf.WorkerID((p + k) % 64)
		a.Event.Kind = producer.KvEventStored
		a.Event.Stored.Blocks = blocks
		b.WorkerID = a.WorkerID
		b.Event.Kind = producer.KvEventRemoved
		b.Event.Removed = ids
		st, rm = append(st, a), append(rm, b)
	}
	return st, rm
}

// applyStores and applyRemovals are the timed windows' applies, apart so that valgrind counts
// them alone.
//
//go:noinline
func applyStores(ix *workers.Index, evs []producer.RouterEvent) {
	for i := range evs {
		if err := ix.Apply(evs[i]); err != nil {
			panic(err)
		}
	}
}

//go:noinline
func applyRemovals(ix *workers.Index, evs []producer.RouterEvent) {
	for i := range evs {
		ix.Apply(evs[i])
	}
}

// threadCPU is this thread's CPU time (CLOCK_THREAD_CPUTIME_ID): time the thread ran, not time
// it waited for one of the shared vCPUs.
func threadCPU() time.Duration {
	var ts syscall.Timespec
	syscall.Syscall(syscall.SYS_CLOCK_GETTIME, 3, uintptr(unsafe.Pointer(&ts)), 0)
	return time.Duration(ts.Nano())
}

func main() {
	runtime.LockOSThread()
	n, _ := strconv.Atoi(os.Args[1])
	windows, _ := strconv.Atoi(os.Args[2])
	ix := workers.New()
	next, members := uint64(0), 0
	for ; members < n; next++ {
		st, _ := events(next)
		for _, ev := range st {
			if err := ix.Apply(ev); err != nil {
				panic(err)
			}
			members += 16
		}
	}
	oldest := uint64(0)
	blocks := [2]int{}
	var ns [2]time.Duration
	for w := range windows + 4 {
		var st, rm []producer.RouterEvent
		for p := next; p < next+256; p++ {
			s, _ := events(p)
			st = append(st, s...)
		}
		for p := oldest; p < oldest+256; p++ {
			_, r := events(p)
			rm = append(rm, r...)
		}
		if w >= 4 {
			blocks[0] += 16 * len(st)
			blocks[1] += 16 * len(rm)
			t0 := threadCPU()
			applyStores(ix, st)
			t1 := threadCPU()
			applyRemovals(ix, rm)
			ns[0] += threadCPU() - t1
			ns[1] += t1 - t0
		} else {
			for i := range st {
				ix.Apply(st[i])
			}
			for i := range rm {
				ix.Apply(rm[i])
			}
		}
		next += 256
		oldest += 256
	}
	fmt.Printf("store %.1f remove %.1f ns/block\n", float64(ns[1])/float64(blocks[0]), float64(ns[0])/float64(blocks[1]))
	fmt.Println("stored-blocks", blocks[0], "removed-blocks", blocks[1], "memberships", ix.Stats().Memberships[0])
}
