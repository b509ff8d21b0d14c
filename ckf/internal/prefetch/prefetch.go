// Package prefetch asks the CPU to start loading a cache line that the caller will read soon.
//
// The producer's exact state is bound by cache misses: each block of a KV event reads a lineage
// slot, an ownership slot and one or two filter buckets at random places in tables far larger
// than the caches. The reads of one event's blocks are independent of each other, so issuing
// all their prefetches first lets the misses overlap instead of queueing one after another.
//
// A prefetch is a hint: it never faults (any address may be passed, even an invalid one), it
// has no effect a program can observe other than timing, and the race detector does not see it.
// On amd64 it is one PREFETCHT0 instruction behind a function call that takes ~1 ns; elsewhere,
// and with the purego build tag, it does nothing.
package prefetch
