// Package streams is ckf-stream's shared Kafka plumbing: what more than one job on Kafka needs.
// It owns the lane log's writer (LaneWriter, the lane-record limits), the end-of-log reader
// (EndOfLog) and the snapshot-index reader built on it, the lag-group committer (LagCommitter),
// the indexer's output topics (Outputs), the conversions between ckf and the wire, the client
// options by role and the configuration checks. The jobs live in subpackages that import this
// one, never the other way round: relay (the DC relay), lanes (the indexer's lane consumers) and
// query (the Kafka query service and client). It knows the ckf algorithms and the schemas codec,
// never HTTP or fx.
package streams
