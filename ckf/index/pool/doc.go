// Package pool is the spec's reference in-process transport in front of a
// GlobalIndexer's lane ingestors: IngestionPool (consumer §4), with lane-sticky
// workers, admission epochs, a lag watchdog and fail-closed outstanding limits,
// for a producer that feeds an indexer in the same process. Its tests and fuzz
// targets check those behaviours of the spec (pool_test.go, consumer_adapter_test.go,
// consumer_prop_test.go).
//
// No product binary imports this package (go list -deps ./cmd/processor does
// not list it): the Kafka indexer drives each lane's ingestor from that lane's
// own goroutine (design §1), so the pool's queues, workers and watchdog would
// only add a hop. It lives apart from package index so that the product's
// index carries none of it; it reaches the ingestors through the seam in
// ckf/index/transport.go.
package pool
