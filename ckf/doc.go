// Package ckf implements the cuckoo-filter (CKF) KV-cache index: the exact
// per-DC producer and the global transposed indexer.
package ckf
