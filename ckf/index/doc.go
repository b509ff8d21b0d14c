// Package index is the global side of the CKF index: one GlobalIndexer per
// indexer domain holds a transposed, bucket-major table shared by up to
// sixteen lanes (one per DC pool), answers prefix-match queries over every
// ready lane lock-free, and is written by one LaneIngestor per lane (consumer
// §2–§7).
//
// A lane's ingestor is driven by exactly one goroutine. The Kafka indexer
// (package streams) drives each ingestor from its lane's own goroutine
// (design §1). IngestionPool (consumer §4) is the spec's in-process
// transport, with lane-sticky workers, admission epochs and fail-closed
// limits, for a producer that feeds an indexer in the same process; its
// behaviours are the spec's and are tested as such.
package index
