package index

// LanesHolding returns the lanes among lanes, of those ready at the call, whose filter holds the
// block whose sequence (canonical) hash is seq: one membership probe, no prefix search. A lane
// that holds the block is always in the result (no false negatives against a settled table); a
// lane that does not may be, at the filter's false-positive rate (two buckets of four 16-bit
// fingerprints: about 8 in 65,536). Lanes outside the manifest are never in the result.
//
// It serves diagnosis rather than answers: the query service asks whether a router's hash, taken
// as it came, names a stored block where the router meant it as something else (sequence hashes
// sent as local hashes, consumer §6.6). Like the search it reads every word with a single 64-bit
// atomic load and may observe a probe concurrent with ingestion as any mix of old and new words
// (consumer §5.5), including the re-probe of row A that keeps a relocated fingerprint visible.
// It does not allocate.
func (g *GlobalIndexer) LanesHolding(seq uint64, lanes uint64) uint64 {
	lanes &= g.ready.Load() & g.manifest.configured
	if lanes == 0 {
		return 0
	}
	p := g.addr.Probe(seq)
	return g.table.probeSettled(p.Fingerprint, p.BucketA, p.BucketB, lanes) & lanes
}
