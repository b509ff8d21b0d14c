// Package index is the global side of the CKF index: one GlobalIndexer per
// indexer domain holds a transposed, bucket-major table shared by its lanes
// (one per DC pool: the reference's sixteen, or 1..64 with rows as wide as
// the lane count, consumer §16), answers prefix-match queries over every
// ready lane lock-free, and is written by one LaneIngestor per lane (consumer
// §2–§7).
//
// A lane's ingestor is driven by exactly one goroutine. The Kafka indexer
// (package streams) drives each ingestor from its lane's own goroutine
// (design §1). The spec's in-process transport, IngestionPool (consumer §4),
// lives in package ckf/index/pool, which no product binary imports; the
// methods in transport.go are its seam.
package index
