package workers

import (
	"sync"

	"github.com/ckf-stream/ckf-stream/ckf"
	"github.com/ckf-stream/ckf-stream/ckf/producer"
)

// Shared is an Index that readers query while one writer applies events (workers §7).
//
// Contract: Apply, Clear and RemoveWorker take the write lock, Match and MatchLocal the read
// lock, so every query sees the index between two events, never inside one; any number of
// goroutines may query at once, each with its own *Result. Writers should come from one
// goroutine, in event order (the index itself does not reorder or deduplicate concurrent
// writers).
//
// Why a lock and not a lock-free read path: a reader's work is a few hash lookups per query
// block, so the read lock is held for about a microsecond; a writer waits at most that long,
// and Go's RWMutex lets a waiting writer in ahead of new readers, so a stream of queries cannot
// starve the event stream.
type Shared struct {
	mu sync.RWMutex
	ix *Index
}

// NewShared wraps ix, which the caller must not use directly afterwards.
func NewShared(ix *Index) *Shared { return &Shared{ix: ix} }

// Apply is Index.Apply under the write lock.
func (s *Shared) Apply(ev producer.RouterEvent) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ix.Apply(ev)
}

// Clear is Index.Clear under the write lock.
func (s *Shared) Clear(src ckf.SourceKey) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ix.Clear(src)
}

// RemoveWorker is Index.RemoveWorker under the write lock.
func (s *Shared) RemoveWorker(w ckf.WorkerID) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ix.RemoveWorker(w)
}

// Match is Index.Match under the read lock.
func (s *Shared) Match(query []ckf.CanonicalHash, opt Options, r *Result) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	s.ix.Match(query, opt, r)
}

// MatchLocal is Index.MatchLocal under the read lock.
func (s *Shared) MatchLocal(local []ckf.LocalBlockHash, opt Options, r *Result, chain *[]ckf.CanonicalHash) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	s.ix.MatchLocal(local, opt, r, chain)
}

// SnapshotLineage is Index.SnapshotLineage under the write lock (it marks the index's lineage
// tables as shared; O(sources), so queries wait about as long as for one event): the snapshot
// is one state of the index, between two events.
func (s *Shared) SnapshotLineage() *LineageSnapshot {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ix.SnapshotLineage()
}

// LineageSize is Index.LineageSize under the read lock.
func (s *Shared) LineageSize() (sources, rows int) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.ix.LineageSize()
}

// Telemetry is Index.Telemetry under the read lock.
func (s *Shared) Telemetry() Telemetry {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.ix.Telemetry()
}
