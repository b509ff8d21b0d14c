// Package streamtest holds the test helpers that the tests of streams and its job packages
// (relay, lanes, query) share: a test environment of lane topics with producers and running
// indexers (Env, Producer, RunningIndexer), lane-event and record logs, the in-process reference
// indexer, hand-made lane records (RawLane), a fetch hold, configuration-error checks and cases,
// the record-limit arithmetic, the end-to-end benchmarks' helpers (Perf*), and Kafka: a
// testenv.Cluster (an in-process kfake cluster or the shared broker) with the kfake handle for
// fault injection. Topics, clients and waits are testenv's.
//
// The internal tests of lanes cannot import this package (it imports lanes); what they share with
// the external tests is exported from their own _test files instead.
package streamtest
