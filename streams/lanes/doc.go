// Package lanes is the indexer's side of the lane log: the Indexer reads every configured lane
// partition (LaneFeed), decodes and applies its records to the global indexer's lane ingestors,
// restores each lane from its indexed snapshot at start-up, reports lane events, dead letters
// and snapshot requests (through streams.Outputs), checks each lane's freshness, commits its
// applied offsets to a lag group and exposes each lane's status (LaneStatus). It owns the
// indexer's configuration, metrics and lane state machine; fx wiring lives in app/indexer.
//
// A lane's status and its ckf_indexer_lane_* metrics are one ledger (lane_ledger.go): each
// figure is written once, into the status, and the same call reports the metrics from it, so
// the lane table and the metrics cannot disagree.
package lanes
