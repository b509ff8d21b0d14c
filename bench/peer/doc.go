// Package peer holds the Go half of make bench-peer: benchmarks of this
// module's public APIs (ckf, ckf/index, ckf/producer) that pair, row by row,
// with the Rust program in bench/peer-dynamo, which measures the same
// operations on the published dynamo-kv-router crate (the reference
// implementation that docs/spec restates).
//
// The package has no non-test code. Its test files build the fixtures both
// sides share (a 16-lane query table, a snapshot, a delta ring, producer key
// streams), each from a SplitMix64 stream (producer §6.1) so that the two
// programs hold equal words, chains and keys; every benchmark that uses a
// fixture reports its checksum as the "fixture-sum" metric, and
// tools/peerreport refuses to compare a row whose checksums differ.
//
// The benchmarks are BenchmarkPeer<Row>, with the Rust row name's
// sub-benchmarks (BenchmarkPeerQuery128/divergent is the row
// query128/divergent). TestPeerFixtures checks that the fixtures reach the
// stated fill levels and prefix lengths. make bench-peer runs both sides in
// alternating rounds and writes docs/perf/peer-report.md; the pairing rules
// of each row are in that report's "Where the pairing cannot be equal".
package peer
