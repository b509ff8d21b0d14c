// Package streamtest holds the test helpers that the tests of streams and its job packages
// (relay, lanes, query) share: a test environment of lane topics with producers and running
// indexers (Env, Producer, RunningIndexer), lane-event and record logs, the in-process reference
// indexer, hand-made lane records (RawLane), a fetch hold, configuration-error checks, the
// end-to-end benchmarks' helpers (Perf*), and Kafka: an in-process kfake cluster or the shared
// broker, behind one set of topic and client helpers. Waits use testenv's helpers.
package streamtest
