// Package ckf is the shared core of the cuckoo-filter (CKF) KV-cache index:
// the identities (pools, producer generations, lane leases, formats), the
// hash chain and token hashing, the addressing that turns a sequence hash
// into a fingerprint and two candidate buckets, the packed four-slot bucket
// word, the envelopes a producer publishes and an indexer applies (snapshot,
// delta, drain marker), the failure dispositions and the typed errors both
// sides share.
//
// The two processes that use it live in their own packages and never import
// each other:
//
//   - ckf/producer: the exact per-DC producer (DcState, the cuckoo mutator,
//     the publication window) and the sequenced Publisher; run by a DC relay.
//   - ckf/index: the global indexer (manifest, transposed table, lane
//     ingestors, prefix search over all lanes, the in-process ingestion pool);
//     run by the indexer service.
//
// The prefix-search algorithm itself is pure and lives in ckf/internal/search;
// FindPrefixDepths and LinearPrefixDepths re-export it here, next to Probe,
// NewAddressing, SequenceHashes and BucketCountFor, because conformance tests
// outside this module import them from ckf.
//
// Nothing here knows Kafka, Avro or fx. Section references
// name their document (producer §7.3, consumer §3.3, design §3);
// docs/spec/README.md states the convention.
package ckf
