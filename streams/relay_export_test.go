package streams

// SetRelayWriteFault makes f decide, before each lane write of r ("deltas" or "snapshot"),
// whether the write fails (non-nil error) instead of being made. nil removes the fault.
func SetRelayWriteFault(r *Relay, f func(what string) error) {
	if f == nil {
		r.writeFault.Store(nil)
		return
	}
	r.writeFault.Store(&f)
}
