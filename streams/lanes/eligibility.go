package lanes

import "sync"

// eligibilitySignal tells waiters that the indexer's eligible lanes (EligibleLanes) changed: the
// channel a waiter holds is closed at the next change and replaced by a fresh one. Eligibility
// changes only on a lane's goroutine (a snapshot installed, a fault, a drain, the freshness
// policy) and when the lanes are released, and each of those places reports the mask it now sees,
// so a waiter learns of every change without sampling.
type eligibilitySignal struct {
	mu      sync.Mutex
	last    uint64
	changed chan struct{}
}

func (s *eligibilitySignal) init(mask uint64) {
	s.last, s.changed = mask, make(chan struct{})
}

// wait returns the channel closed at the next change.
func (s *eligibilitySignal) wait() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.changed
}

// note takes the mask as it is now and wakes the waiters when it differs from the last one.
func (s *eligibilitySignal) note(mask uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if mask == s.last {
		return
	}
	s.last = mask
	close(s.changed)
	s.changed = make(chan struct{})
}
