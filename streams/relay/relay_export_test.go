package relay

// SetRelayWriteFault makes f decide, before each lane write of r ("deltas" or "snapshot"),
// whether the write fails (non-nil error) instead of being made. nil removes the fault.
func SetRelayWriteFault(r *Relay, f func(what string) error) {
	if f == nil {
		r.writeFault.Store(nil)
		return
	}
	r.writeFault.Store(&f)
}

// SetRelayCommitGate makes r call gate, on a goroutine of its own, after each lane transaction
// it commits in the background and before its loop learns the outcome; a gate that blocks holds
// the commit in flight. nil removes the gate.
func SetRelayCommitGate(r *Relay, gate func()) {
	if gate == nil {
		r.commitGate.Store(nil)
		return
	}
	r.commitGate.Store(&gate)
}

// CheckpointRecordValues returns the values of a relay checkpoint of payload under id (its
// chunks, chunkBytes each, and a function building its manifest once the first chunk's offset
// is known), so tests can write damaged or foreign checkpoints.
func CheckpointRecordValues(id uint64, pool string, lane uint8, inputTopic string, payload []byte, chunkBytes int) (chunks [][]byte, manifest func(firstChunkOffset int64) []byte) {
	chunks = splitCheckpoint(id, payload, chunkBytes)
	return chunks, func(first int64) []byte {
		return appendCheckpointManifest(nil, &checkpointManifest{ID: id, Pool: pool, Lane: lane, Chunks: uint32(len(chunks)),
			FirstChunkOffset: first, PayloadLen: uint64(len(payload)), PayloadHash: hashPayload(payload), InputTopic: inputTopic})
	}
}
