// Package lanes is the indexer's side of the lane log: the Indexer reads every configured lane
// partition (LaneFeed), decodes and applies its records to the global indexer's lane ingestors,
// restores each lane from its indexed snapshot at start-up, reports lane events, dead letters
// and snapshot requests (through streams.Outputs), checks each lane's freshness, commits its
// applied offsets to a lag group and exposes each lane's status (LaneStatus). It owns the
// indexer's configuration, metrics and lane state machine; fx wiring lives in app/indexer.
package lanes
