// Package streamtest holds the test helpers that the tests of streams and its job packages
// (relay, lanes, query) share: a test environment of lane topics with producers and running
// indexers (Env, Producer, RunningIndexer), lane-event and record logs, the in-process reference
// indexer, hand-made lane records (RawLane), a fetch hold, configuration-error checks, and the
// end-to-end benchmarks' helpers (Perf*). Waits use testenv's helpers.
package streamtest
