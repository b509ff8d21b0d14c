package query

import (
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// Hedged resends: why a client resends a request rather than waiting for the group.
//
// A request waits in its partition until the group member that owns the partition reads it. A
// member killed without leaving keeps its partitions until the group's session timeout expires
// (6 s at the least on a broker with the default group.min.session.timeout.ms, which deployments
// do not control) and the group rebalances, so every request sent to those partitions meanwhile
// waits that long. Nothing on the service side can shorten it below the broker's minimum. The
// client can: the service answers whatever reaches any partition it owns, replies go to the
// client's own reply partition keyed by correlation id, and the client keeps the first reply of
// a correlation id. So a request not answered within HedgeAfter is produced again, with the same
// correlation id and bytes, to another partition, one whose requests have been answered since;
// the first reply wins and the late ones are dropped and counted. Having every replica read
// every partition and answer would cost N times the replies and the answering CPU on every
// request to remove a wait that only a dead member causes; a hedge costs one more request and
// reply for the requests that waited, and nothing otherwise (design §5 has the measured costs).

// PartitionRoutes chooses the request partition of each send of a hedging client from what its
// own calls have shown: a partition that left a call unanswered for the hedge delay is
// suspected, and calls whose key falls on it are sent to a partition that has answered since,
// until a probe (a call sent to it, at most once per probe interval) is answered there without
// a resend. Evidence is kept per group (the worker stage: per DC, as each DC's replicas form a
// consumer group of their own on the shared topic); the prefix-match query has one group, 0.
// It is safe for concurrent use.
type PartitionRoutes struct {
	mu     sync.Mutex
	probe  time.Duration
	groups map[uint64][]routeState
	next   int
	// tokens is the hedge budget: each first send earns hedgeTokensPerCall, each resend spends
	// one, at most hedgeTokensMax saved. A slow service (every call past the hedge delay) must
	// not be sent twice its load; a dead member's partitions cost a few resends each.
	tokens float64
}

// routeState is one partition's evidence in one group.
type routeState struct {
	// suspectedAt is when the call that left the partition suspected was sent (zero: not
	// suspected): a partition answered after that was alive while the call waited.
	suspectedAt time.Time
	probedAt    time.Time
	answeredAt  time.Time // last call sent only here and answered
}

const (
	// hedgeTokensPerCall: at most one resend per five calls, sustained.
	hedgeTokensPerCall = 0.2
	// hedgeTokensMax: the burst of resends allowed after a quiet spell, enough for the first
	// call on every partition of a dead member of a group of several.
	hedgeTokensMax = 16
	// DefaultProbeInterval is how often a suspected partition is tried again by a call whose
	// key falls on it.
	DefaultProbeInterval = time.Second
)

// NewPartitionRoutes returns routes with no evidence, a full hedge budget, and suspected
// partitions probed at most once per probe (<= 0: DefaultProbeInterval).
func NewPartitionRoutes(probe time.Duration) *PartitionRoutes {
	if probe <= 0 {
		probe = DefaultProbeInterval
	}
	return &PartitionRoutes{probe: probe, groups: map[uint64][]routeState{}, tokens: hedgeTokensMax}
}

// states returns group g's evidence for n partitions (grown when the topic grew).
func (r *PartitionRoutes) states(g uint64, n int32) []routeState {
	st := r.groups[g]
	if len(st) < int(n) {
		st = append(st, make([]routeState, int(n)-len(st))...)
		r.groups[g] = st
	}
	return st
}

// groupsOf returns groups, or every group with evidence when groups is nil.
func (r *PartitionRoutes) groupsOf(groups []uint64) []uint64 {
	if groups != nil {
		return groups
	}
	out := make([]uint64, 0, len(r.groups))
	for g := range r.groups {
		out = append(out, g)
	}
	return out
}

// suspected reports whether partition p is suspected in any of groups.
func (r *PartitionRoutes) suspected(p, n int32, groups []uint64) bool {
	for _, g := range groups {
		if !r.states(g, n)[p].suspectedAt.IsZero() {
			return true
		}
	}
	return false
}

// First returns the partition of a call's first send among n, for the groups that owe it a
// reply (nil: every group seen). It is key, the key's partition, unless key is suspected in one
// of them and not due a probe; then it is another partition (see pick), redirected true. With no
// other partition to send to it is key.
func (r *PartitionRoutes) First(key, n int32, groups []uint64, now time.Time) (p int32, redirected bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.tokens = min(r.tokens+hedgeTokensPerCall, hedgeTokensMax)
	if n <= 0 || key < 0 || key >= n {
		return key, false
	}
	gs := r.groupsOf(groups)
	if !r.suspected(key, n, gs) {
		return key, false
	}
	due := true
	var since time.Time // when the call that suspected key was sent
	for _, g := range gs {
		st := r.states(g, n)
		if s := st[key]; !s.suspectedAt.IsZero() {
			if now.Sub(s.probedAt) < r.probe {
				due = false
			}
			if since.IsZero() || s.suspectedAt.Before(since) {
				since = s.suspectedAt
			}
		}
	}
	if due {
		for _, g := range gs {
			r.states(g, n)[key].probedAt = now
		}
		return key, false
	}
	if q, ok := r.pick(n, gs, []int32{key}, since); ok {
		return q, true
	}
	return key, false
}

// Answered records that group g answered a call sent only to partition p (of n): p serves g, and
// is no longer suspected there.
func (r *PartitionRoutes) Answered(p, n int32, g uint64, now time.Time) {
	if p < 0 || p >= n {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	st := r.states(g, n)
	st[p].answeredAt = now
	st[p].suspectedAt = time.Time{}
}

// Errors of Hedge: why a call is not resent.
var (
	// ErrNoHedgeBudget: the budget of resends is spent (a slow service, not a dead member,
	// leaves most calls waiting past the hedge delay).
	ErrNoHedgeBudget = errors.New("streams: no hedge budget left")
	// ErrNoHedgePartition: every other partition was tried or is suspected without having
	// answered since the call was sent: another copy would most likely wait as long.
	ErrNoHedgePartition = errors.New("streams: no partition left to resend to")
)

// Hedge records that a call first sent at sent to every partition in tried (of n) is still
// unanswered by groups (nil: every group seen) after the hedge delay, which makes those
// partitions suspected there, and returns the partition to send it to next (see pick), or
// ErrNoHedgeBudget or ErrNoHedgePartition.
func (r *PartitionRoutes) Hedge(tried []int32, n int32, groups []uint64, sent time.Time) (int32, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if n <= 0 {
		return -1, ErrNoHedgePartition
	}
	gs := r.groupsOf(groups)
	if len(gs) == 0 {
		gs = []uint64{0}
	}
	for _, g := range gs {
		st := r.states(g, n)
		for _, t := range tried {
			if t >= 0 && t < n && st[t].suspectedAt.IsZero() {
				st[t].suspectedAt = sent
			}
		}
	}
	if r.tokens < 1 {
		return -1, ErrNoHedgeBudget
	}
	p, ok := r.pick(n, gs, tried, sent)
	if !ok {
		return -1, ErrNoHedgePartition
	}
	r.tokens--
	return p, nil
}

// pick returns a partition outside skip, round robin among the first non-empty of: those
// answered in every group after since (alive while the waiting call waited, suspected or not: a
// slow answer can suspect a live partition, and it must still take resends); those suspected in
// none of groups. ok is false when both are empty.
func (r *PartitionRoutes) pick(n int32, groups []uint64, skip []int32, since time.Time) (int32, bool) {
	var alive, unsuspected []int32
	for q := int32(0); q < n; q++ {
		if slices.Contains(skip, q) {
			continue
		}
		answered := len(groups) > 0
		for _, g := range groups {
			if a := r.states(g, n)[q].answeredAt; a.IsZero() || !a.After(since) {
				answered = false
			}
		}
		switch {
		case answered:
			alive = append(alive, q)
		case !r.suspected(q, n, groups):
			unsuspected = append(unsuspected, q)
		}
	}
	from := alive
	if len(from) == 0 {
		from = unsuspected
	}
	if len(from) == 0 {
		return -1, false
	}
	r.next++
	return from[r.next%len(from)], true
}

// RequestPartitioner partitions a hedging client's requests: a record whose Partition is set
// (>= 0) goes to that partition, any other by key as Kafka's default partitioner does. Each time
// it partitions a record it stores the topic's partition count in n, which is how the client
// learns the count without a metadata request of its own.
func RequestPartitioner(n *atomic.Int32) kgo.Partitioner { return requestPartitioner{n: n} }

type requestPartitioner struct{ n *atomic.Int32 }

func (p requestPartitioner) ForTopic(string) kgo.TopicPartitioner { return p }

func (requestPartitioner) RequiresConsistency(*kgo.Record) bool { return true }

func (p requestPartitioner) Partition(r *kgo.Record, n int) int {
	p.n.Store(int32(n))
	if r.Partition >= 0 && int(r.Partition) < n {
		return int(r.Partition)
	}
	return int(KeyPartition(r.Key, int32(n)))
}

// keyHasher is Kafka's default partitioner for keyed records (murmur2); it keeps no state for
// them, so one serves every goroutine.
var keyHasher = kgo.StickyKeyPartitioner(nil).ForTopic("")

// KeyPartition returns the partition of n that Kafka's default partitioner gives key.
func KeyPartition(key []byte, n int32) int32 {
	if n <= 0 {
		return -1
	}
	return int32(keyHasher.Partition(&kgo.Record{Key: key}, int(n)))
}
