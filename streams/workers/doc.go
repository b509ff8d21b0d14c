// Package workers is the replicated read model of one DC's worker-level index (ckf/workers,
// docs/spec/workers.md): a Replica reads every partition of the DC's KV-events topic (the records
// the relay reads) by direct assignment, with no consumer group, applies each event to a
// workers.Shared that answers queries concurrently, checkpoints the index's rows with the input
// offsets it reflects to a compacted topic keyed by DC, and on start restores the newest usable
// checkpoint and reads only the records after it. It is ready once it has read the topic up to
// the end offsets listed at its start (streams.EndOfLog). It shares nothing with the relay but
// the input topic and the event conversion (relay.RouterEventOf), so the two fail
// independently. workers.md beside this file gives the design; it knows ckf and schemas, never
// HTTP or fx (app/workers wires it).
package workers
