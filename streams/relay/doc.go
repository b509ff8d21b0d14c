// Package relay is the DC relay on Kafka: one relay per DC pool reads the DC's KV-events topic,
// keeps the pool's exact state (ckf.DcState) and publishes the pool's lane (deltas, chunked
// snapshots, heartbeats, a drain marker) transactionally. It owns the relay's configuration,
// loop, replay and stop (relay.go, relay_run.go), the KV-event conversion and dead letters
// (relay_events.go), the delta path and its transactions (relay_deltas.go), snapshots and
// heartbeats (relay_snapshot.go), recovery (relay_recover.go), the record limit (relay_limit.go),
// its state checkpoints (relay_checkpoint.go, checkpoint_record.go, checkpoint_read.go) and
// metrics (relay_metrics.go). relay.md describes its behaviour on Kafka. It writes the lane
// through streams.LaneWriter; fx wiring lives in app/relay.
package relay
