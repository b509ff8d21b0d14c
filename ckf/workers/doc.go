// Package workers is the worker-level index of one DC: for a prompt, how many leading blocks
// each source (worker, dp rank) holds on the device tier, and how far the chain continues on
// the lower tiers (host pinned, disk, external). It is the second routing stage beside the
// relay's per-DC answer, fed by the same KV events (ckf/producer's event model) and answering
// with the meaning of dynamo-kv-router's OverlapScores and its lower-tier continuation; the
// rules are docs/spec/workers.md, cited by its section numbers.
//
// Model (workers §2): a membership is a (source, tier, canonical hash) triple. The canonical
// hash of a stored block is computed from its parent's canonical in the same source's lineage
// and its token hash, exactly as the relay computes it (producer §2, ckf.CanonicalChild), so a
// query is a list of canonical sequence hashes (ckf.SequenceHashes of the prompt's local block
// hashes). A source's device depth for a query is the length of the longest prefix of the query
// whose every block the source holds on the device tier; its continuation on a lower tier starts
// where the previous tier stopped (workers §5).
//
// Layout (workers §8): the slab keeps every held block once, with its local hash and its device
// holder value (one holder inline, two or more an interned, reference-counted set of dense source
// indexes in source-key order, shared by every block with the same holders), in store order: in
// runs whose heads a small head map lists and whose other blocks are each the child of the block
// before. Per lower tier, an open-addressing table from canonical hash to a holder value
// (holderTable). Per source, one lineage table (lineageTable: a cuckoo table of cache-line
// buckets, an id in one of two) from external id to the block's slab position plus the tiers the
// id is held on. A store follows its parent's run or appends its new blocks as a run; a removal
// changes holder values where the lineage says the blocks are. A query follows the slab from its
// first block, comparing the next slot's canonical (Match) or local hash (MatchLocal, which then
// hashes nothing), and compares holder values: only where the value changes does it intersect
// sets, so a prompt held by the same workers all along costs a comparison or two per block
// whatever the number of workers (workers §5.4).
//
// Concurrency (workers §7): an Index has no internal synchronisation; one goroutine owns it and
// both applies events and answers queries. Shared wraps an Index in a sync.RWMutex so that any
// number of readers answer queries concurrently with each other while one writer applies events
// between them: a reader sees the index before or after an event, never part of one. Every
// query writes only its own *Result.
package workers
