// Package streams is ckf-stream's Kafka plumbing: lane consumers that feed the global indexer,
// the relay publisher, the query service and the output topics. It knows the ckf algorithms and
// the schemas codec, never HTTP or fx.
package streams
