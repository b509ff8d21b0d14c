// Package engineemu is an inference engine's KV-event publisher in Go: the wire protocol of
// vLLM's ZmqEventPublisher (vllm/distributed/kv_events.py), which SGLang shares, driven by a
// seeded block-pool workload whose exact state it can report. `processor demo` runs it to feed
// bridges on a machine without an engine; the bridge's tests run it and its Python twin,
// testenv/engine/engine_emulator.py, which writes the same model.
//
// Per data-parallel rank r the engine has a PUB socket on the base endpoint's port plus r,
// sending [topic, sequence (8 bytes, big-endian), msgpack batch], and optionally a ROUTER replay
// socket (port plus r) that answers [identity, "", start sequence] with one [identity, "",
// sequence, batch] per buffered batch at or after the start and then the end marker [identity,
// "", -1, ""]. Sequences count batches from 0 and start again at 0 when the engine restarts,
// with no clear event. The buffer keeps the last 10,000 batches unless BufferSteps says
// otherwise. The PUB socket binds for wildcard endpoints and connects otherwise (Mode).
//
// Payloads come in the shapes of Wire (vLLM's current maps, the array_like structs, and the
// five-field BlockStored of SGLang and early vLLM) with hashes as in HashFormat (unsigned or
// signed 64-bit integers, or 32-byte digests), encoded as msgspec encodes them.
//
// The workload: each rank's pool holds at most Capacity GPU blocks, stores chains of full
// blocks (new roots and branches off resident blocks), evicts leaves when full (so the resident
// set is prefix-closed), stores some resident blocks a second time (removed twice), keeps a
// share of chains under a LoRA adapter, copies blocks to a CPU tier (medium "CPU": never device
// residency) and, with Hybrid, stores sliding-window group chains (group_idx 1) that a bridge
// must filter out. Model returns the resident chains of every rank and a sample of chains that
// are not resident on GPU; a bridge fed by the engine must make the index answer exactly the
// resident prefixes (up to the filter's false positives).
//
// Failure behaviour: a PUB send that fails is counted (Stats.SendErrors) and the batch stays in
// the replay buffer, as in the engines; calls after Close return ErrClosed; options are checked
// by New (ErrInvalidConfig).
package engineemu
