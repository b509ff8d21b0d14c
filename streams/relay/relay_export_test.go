package relay

import "sync/atomic"

// testHooks are the relayHooks of a relay built by NewTestRelay: a test sets and removes the
// fault and the gate while the relay runs.
type testHooks struct {
	fault  atomic.Pointer[func(what string) error]
	gate   atomic.Pointer[func()]
	mirror atomic.Pointer[func()]
}

func (h *testHooks) writeFault(what string) error {
	if f := h.fault.Load(); f != nil {
		return (*f)(what)
	}
	return nil
}

func (h *testHooks) commitGate() func() {
	if g := h.gate.Load(); g != nil {
		return *g
	}
	return nil
}

func (h *testHooks) mirrorGate() func() {
	if g := h.mirror.Load(); g != nil {
		return *g
	}
	return nil
}

// NewTestRelay is NewRelay with hooks that SetRelayWriteFault and SetRelayCommitGate set.
func NewTestRelay(p RelayParams) (*Relay, error) {
	r, err := NewRelay(p)
	if err != nil {
		return nil, err
	}
	r.hooks = &testHooks{}
	return r, nil
}

// SetRelayWriteFault makes f decide, before each lane write of r ("deltas", "snapshot" or
// "checkpoint"), whether the write fails (non-nil error) instead of being made. nil removes
// the fault. r must come from NewTestRelay.
func SetRelayWriteFault(r *Relay, f func(what string) error) {
	h := r.hooks.(*testHooks)
	if f == nil {
		h.fault.Store(nil)
		return
	}
	h.fault.Store(&f)
}

// SetRelayCommitGate makes r call gate, on a goroutine of its own, after each lane transaction
// it commits in the background and before its loop learns the outcome; a gate that blocks holds
// the commit in flight. nil removes the gate. r must come from NewTestRelay.
func SetRelayCommitGate(r *Relay, gate func()) {
	h := r.hooks.(*testHooks)
	if gate == nil {
		h.gate.Store(nil)
		return
	}
	h.gate.Store(&gate)
}

// SetRelayMirrorGate makes r's watch for missing mirrored control topics call gate before each
// time it asks whether they exist; a gate that blocks holds the watch. nil removes the gate. r
// must come from NewTestRelay.
func SetRelayMirrorGate(r *Relay, gate func()) {
	h := r.hooks.(*testHooks)
	if gate == nil {
		h.mirror.Store(nil)
		return
	}
	h.mirror.Store(&gate)
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
