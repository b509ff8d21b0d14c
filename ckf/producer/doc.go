// Package producer is the DC side of the CKF index: the exact ownership model
// of one DC pool's KV cache (DcState) with its packed cuckoo filter, and the
// Publisher that turns the filter's changes into sequenced deltas of absolute
// bucket images and barrier snapshots (producer §6–§8).
//
// DcState is an actor: one goroutine applies events in order. Every event is
// validated before its first mutation, so an error means nothing of that event
// was committed, except a capacity omission, which commits lineage and
// ownership and only omits the fingerprint (producer §7.3). A publication is
// cut only after a complete event, never empty, with unique buckets, and
// lists its images in publication order rather than first-touch order: a
// bucket that received a relocated fingerprint before the bucket it left,
// so a consumer applying the images one by one under concurrent queries
// never loses a block that is resident before and after the batch
// (DcState.drain, publicationOrder).
package producer
