// Package faults is ckf-stream's multi-process fault suite. Its tests build bin/processor once
// per test binary, run real relays and indexer replicas as separate processes against the real
// broker (each test under its own topic prefix, domain and consumer group), and inject faults
// from outside: kill -9 of an indexer replica or a relay at seeded random moments, a broker
// restart on a private broker, hostile records on the KV-events, lane and query topics, and
// damaged records on a relay's checkpoint partition. The relays checkpoint their state about
// once a second at the suite's load, so kills and broker faults land around checkpoint
// transactions and relay restarts restore checkpoints.
//
// The oracle is twofold. A reference indexer replica that is never touched must answer exactly
// as the victim replica once both have installed the same sequences; and an in-process model
// (one ckf.DcState per DC, fed every KV event the broker acknowledged, in acknowledgement order)
// gives, for every query, the depth that the exact state guarantees: neither replica may answer
// less (no acknowledged KV event is lost), and each relay's resident block count must equal the
// model's, with every record of its KV-events topic applied exactly once across its restarts.
//
// The cluster scenarios (cluster_test.go, cluster_net_test.go) run the same deployment and
// oracle on a three-node cluster of their own (testenv.StartLocalClusterT): kill -9, controlled
// shutdown and SIGSTOP of the node that leads a lane partition, an ISR below
// min.insync.replicas, network faults through fault proxies in front of each node (latency,
// bandwidth, blackhole, resets, a one-way partition, each against one route alone: the relays',
// the indexer replicas' lanes, their query service's), and an indexer replica
// killed while queries flow over Kafka. They also read every lane partition and check that the
// relays' transactional sequences have no gap and no duplicate. `make test` runs
// TestClusterKillLeader; the others run with CKF_CLUSTER_FULL=1 (`make test-cluster`).
//
// Knobs: FAULTS_SEED (default 1) seeds the victims, the moments and the workload; FAULTS_ITERATIONS
// (default 20) is the number of kill -9 iterations; -long (go test ./faults/ -args -long, or
// make test-faults FAULTS_FLAGS=-long) multiplies the iterations by five and holds the load
// longer between kills. docs/RELIABILITY.md lists what the suite promises and the figures of a run.
//
// The tests are Linux-only: they read /proc and tie each child's life to the test binary's.
package faults
