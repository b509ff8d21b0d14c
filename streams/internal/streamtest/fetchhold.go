package streamtest

import (
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// fetchHold is a franz-go hook for tests that makes some partitions of one client fetchable
// later than the others, on an event rather than after a sleep: it pauses them when the client
// opens its first connection (before any fetch can be built), and Held closes once the client
// has read the given number of fetch responses while they were held. A test then calls Release.
//
// With nothing else to return, a fetch response comes back only after the client's
// FetchMaxWait (the broker's long poll), so "n responses read while held" means the client has
// spent n long polls without the held partitions: the situation of a slow first fetch, which a
// reader that guesses "caught up" from silence mistakes for the end of the log.
type fetchHold struct {
	topic      string
	partitions []int32
	rounds     int

	cl       atomic.Pointer[kgo.Client]
	pause    sync.Once
	released atomic.Bool
	reads    atomic.Int32
	held     chan struct{}
	heldOnce sync.Once
}

// NewFetchHold holds partitions of topic until Release; Held closes after rounds fetch
// responses (at least 1).
func NewFetchHold(topic string, rounds int, partitions ...int32) *fetchHold {
	return &fetchHold{topic: topic, partitions: partitions, rounds: max(rounds, 1), held: make(chan struct{})}
}

// OnNewClient implements kgo.HookNewClient.
func (h *fetchHold) OnNewClient(cl *kgo.Client) { h.cl.Store(cl) }

// OnBrokerConnect implements kgo.HookBrokerConnect: the first connection pauses the partitions.
// It runs before the connection carries its first request, so before the metadata that any
// fetch needs.
func (h *fetchHold) OnBrokerConnect(kgo.BrokerMetadata, time.Duration, net.Conn, error) {
	h.pause.Do(func() {
		h.cl.Load().PauseFetchPartitions(map[string][]int32{h.topic: h.partitions})
	})
}

// fetchKey is the Kafka API key of Fetch (kmsg.Fetch).
const fetchKey = 1

// OnBrokerRead implements kgo.HookBrokerRead: it counts the fetch responses read while held.
func (h *fetchHold) OnBrokerRead(_ kgo.BrokerMetadata, key int16, _ int, _, _ time.Duration, err error) {
	if key != fetchKey || err != nil || h.released.Load() {
		return
	}
	if int(h.reads.Add(1)) >= h.rounds {
		h.heldOnce.Do(func() { close(h.held) })
	}
}

// Held is closed once the client has read rounds fetch responses while the partitions were held.
func (h *fetchHold) Held() <-chan struct{} { return h.held }

// Release makes the held partitions fetchable (from the client's next fetch on).
func (h *fetchHold) Release() {
	h.released.Store(true)
	h.cl.Load().ResumeFetchPartitions(map[string][]int32{h.topic: h.partitions})
}
