// Package testenv runs the real Apache Kafka broker that integration tests use, and gives tests
// uniquely named topics on it.
//
// The broker is a single KRaft node (broker and controller in one JVM) started from jars that
// Maven resolves once from Maven Central into testenv/kafka/libs; see testenv/kafka/kafka-up.sh.
// `make kafka-up` starts it and `make kafka-down` stops it; `make test` does both around the test
// run when no broker is reachable.
//
// Tests find the broker through KAFKA_BROKERS (a comma-separated list of host:port). When it is
// unset, the address written by kafka-up.sh to $TMPDIR/ckf-kafka/bootstrap is used. A test that
// needs the broker (or the registry, or the Kafka jars) and cannot reach it skips with one line
// that names the command that starts one, unless RequireEnv is set (make test sets it): then it
// fails with that message. So `go test ./...` on a machine with no broker runs every in-process
// test, and `make test` cannot pass by skipping.
//
// StartLocalCluster (and StartLocalClusterT) starts a three-node KRaft cluster on loopback from
// the same jars (testenv/kafka/cluster-up.sh; `make cluster-up` and `make cluster-down` for a
// manual one), with helpers to kill -9, stop with SIGSTOP, resume, shut down and restart one
// node and to read a partition's leader and ISR. StartProxiedClusterT puts a TCP fault proxy
// (toxiproxy, in process) in front of each node's two client listeners, which the nodes
// advertise, for latency, bandwidth, blackhole and reset faults per route.
//
// StartSecuredBroker starts a private single node whose second client listener takes SASL_SSL
// only (SCRAM-SHA-512 users created at format time, TLS with a server certificate and optionally
// required client certificates), next to a plaintext listener for the test's own set-up. WritePKI
// makes the CA, server, client and untrusted certificates with Go's crypto packages; Kafka reads
// the server's PEM key and chain inline (ssl.keystore.type=PEM), so no keytool is needed.
//
// Process (BuildProcessor, NewProcess) runs the processor binary as a separate process for the
// multi-process suites (faults, deploy, testenv/engine): start, kill -9 and start again with the
// same settings, one log file per incarnation, readiness and /metrics scrapes (Scrape,
// SumSeries), and a check at the end of the test that no incarnation outlives it.
//
// StartRegions (and StartRegionsT) starts two single-node clusters, regions a and b, and a
// MirrorMaker 2 in dedicated mode beside each for the flows into it (testenv/kafka/regions-up.sh
// and mirror-up.sh; `make regions-up` and `make regions-down` by hand), with each region's WAN
// route behind a fault proxy (CutWAN, HealWAN, latency toxics, FaultProxy.Bytes) and each
// MirrorMaker killed and restarted by Mirror.Kill9 and Mirror.Start. The region tests run under
// `make test-regions`.
package testenv
