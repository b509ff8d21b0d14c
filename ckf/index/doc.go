// Package index is the global side of the CKF index: one GlobalIndexer per
// indexer domain holds a transposed, bucket-major table shared by up to
// sixteen lanes (one per DC pool), answers prefix-match queries over every
// ready lane lock-free, and is written by one LaneIngestor per lane (consumer
// consumer §2–§7).
//
// A lane's ingestor is driven by exactly one goroutine: a worker of the
// IngestionPool (consumer §4), the bounded transport with lane-sticky
// workers, admission epochs and fail-closed limits. The Kafka indexer
// (package streams) feeds the pool from one runner goroutine per lane
// partition (design §1), using SubmitDeltas and Backlog to hand over runs
// of deltas and to pace itself below the pool's limits.
package index
