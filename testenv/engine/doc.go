// Package engine holds the Python engine emulator (engine_emulator.py, installed by venv.sh
// into a virtual environment with the pinned requirements.txt) and the tests that drive it: the
// byte-for-byte parity of its msgspec payloads with the Go emulator's encoder (bridge/engineemu),
// and the end-to-end test of the bridge on the real broker — emulator, `processor bridge`
// (the built binary), relay and indexer processes — whose oracle is the emulator's exact model.
package engine
