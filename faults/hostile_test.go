//go:build linux

package faults

import (
	"context"
	"encoding/binary"
	"fmt"
	mrand "math/rand/v2"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ckf-stream/ckf-stream/ckf"
	"github.com/ckf-stream/ckf-stream/schemas"
	"github.com/ckf-stream/ckf-stream/streams"
	"github.com/ckf-stream/ckf-stream/testenv"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// rssBound is how much a process's resident set may grow while it rejects the hostile records.
// Every hostile record is at most a few KiB, and the largest declared length (2^40 bytes) must
// be refused before anything is allocated for it; a decoder that trusted it would fail the
// bound by orders of magnitude (or die). 48 MiB leaves room for the Go heap's growth under the
// good load that runs meanwhile (the processes sit at 30-60 MiB) and for the recovery's
// snapshot buffers (32 KiB per lane here).
const rssBound = 48 << 20

// hostile is one injected record and where it landed.
type hostile struct {
	kind      string
	topic     string
	partition int32
	offset    int64
}

// injector writes hand-made records, bypassing every producer-side check.
type injector struct {
	t     *testing.T
	s     *system
	cl    *kgo.Client
	rng   *mrand.Rand
	sent  []hostile
	codec *schemas.Codec
}

func (in *injector) put(kind, topic string, partition int32, key, value []byte) {
	in.t.Helper()
	rec := &kgo.Record{Topic: topic, Partition: partition, Key: key, Value: value}
	r, err := in.cl.ProduceSync(context.Background(), rec).First()
	if err != nil {
		in.t.Fatalf("%s: %v", kind, err)
	}
	in.sent = append(in.sent, hostile{kind: kind, topic: topic, partition: partition, offset: r.Offset})
}

func (in *injector) random(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(in.rng.UintN(256))
	}
	return b
}

// withSchemaID returns a copy of a Confluent-framed record with another schema id.
func withSchemaID(b []byte, id uint32) []byte {
	out := slices.Clone(b)
	binary.BigEndian.PutUint32(out[1:5], id)
	return out
}

// zigzag appends Avro's zig-zag varint of v.
func zigzag(b []byte, v int64) []byte {
	return binary.AppendUvarint(b, uint64((v<<1)^(v>>63)))
}

// TestHostileInput runs two relays and two replicas with good load, then writes hostile records
// to the lane topic (lane 1 only), to DC 0's KV-events topic and to the query topic: random
// bytes, truncated Avro, unknown and wrong schema ids, a declared length of 2^40 bytes, a
// snapshot chunk of another lane's pool, and deltas of a foreign pool. Every process must stay
// up, every hostile record must be dead-lettered with a reason, the counters must move, lane 0
// must stay in service with no fault, lane 1 must recover, both replicas must answer alike and
// no less than the model, and no process's RSS may grow by more than rssBound.
func TestHostileInput(t *testing.T) {
	seeds := testenv.Brokers(t)
	seed := uint64(envInt(t, "FAULTS_SEED", 1))
	s := newSystem(t, seeds, 2, 2)
	s.startAll()
	w := s.newWriter(seed+100, 150)
	w.run()
	w.waitAcked(300, time.Minute) // good load first: two seconds' worth at 150 events/s
	w.pause()
	seqs := s.relaySettled(w, time.Minute)
	pagesBefore := s.replicasCaughtUp(seqs, time.Minute)
	procs := append(slices.Clone(s.relays), s.indexes...)
	rssBefore := map[string]int64{}
	pids := map[string]int{}
	for _, p := range procs {
		rssBefore[p.Name], pids[p.Name] = p.RSS(), p.Pid()
	}
	before := map[string]map[string]float64{}
	for _, p := range procs {
		m, err := p.Metrics()
		if err != nil {
			t.Fatal(err)
		}
		before[p.Name] = m
	}

	// Watch lane 0 on both replicas while the hostile records go in: it must stay serving. The
	// watcher samples the lane pages (every 100 ms) to catch a lane that leaves service and comes
	// back; the proof that lane 0 was untouched is its counters at the end (no fault, no
	// rejection, no recovery, the same producer identity).
	var lane0Left atomic.Int64
	watchCtx, stopWatch := context.WithCancel(context.Background())
	var watch sync.WaitGroup
	watch.Add(1)
	go func() {
		defer watch.Done()
		sample := time.NewTicker(100 * time.Millisecond)
		defer sample.Stop()
		for {
			for _, ix := range s.indexes {
				if page, err := ix.lanes(); err == nil && len(page.Lanes) > 0 && page.Lanes[0].State != "serving" {
					lane0Left.Add(1)
				}
			}
			select {
			case <-watchCtx.Done():
				return
			case <-sample.C:
			}
		}
	}()
	w.resume()

	in := &injector{t: t, s: s, cl: s.client(kgo.RecordPartitioner(kgo.ManualPartitioner())), rng: mrand.New(mrand.NewPCG(seed, 0x686f7374)), codec: s.codec}
	domain, err := ckf.ParseIndexerDomainID(s.domain, ckf.IdentityExplicit)
	if err != nil {
		t.Fatal(err)
	}
	buckets, err := ckf.BucketCountFor(expectedBlocks)
	if err != nil {
		t.Fatal(err)
	}
	identity := func(dc uint64) ckf.ProducerIdentity {
		return ckf.ProducerIdentity{Pool: ckf.PoolID{Domain: domain, Dc: ckf.DcID(dc)}, Incarnation: 7,
			LayoutGeneration: 1, Format: ckf.NewFormatIdentity(ckf.DefaultSeed, buckets)}
	}
	encLane := func(rec schemas.LaneRecord) []byte {
		b, err := s.codec.EncodeLaneRecord(rec)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	delta := func(id ckf.ProducerIdentity) []byte {
		return encLane(schemas.LaneRecord{Identity: streams.WireIdentity(id), Kind: schemas.LaneDelta,
			Delta: schemas.Delta{BaseSequence: 1 << 20, Sequence: 1<<20 + 1, Images: schemas.AppendImage(nil, 3, 0x1234)}})
	}
	const lane = 1
	lanes := s.topics.Lanes
	laneID := s.codec.SchemaID(schemas.TypeLaneRecord)
	kvID := s.codec.SchemaID(schemas.TypeKvEvent)

	// The lane topic, lane 1.
	good := delta(identity(s.dcs[lane]))
	for _, n := range []int{1, 7, 64, 4096} {
		in.put(fmt.Sprintf("lane/random-%dB", n), lanes, lane, nil, in.random(n))
	}
	in.put("lane/random-framed", lanes, lane, nil, append([]byte{0, 0, 0, 0, byte(laneID)}, in.random(200)...))
	// The last three bytes are the nulls of the fields appended within v1 (capacity, sources,
	// as_of): a body cut there is an earlier revision's, and valid. Cut into the images instead.
	for _, cut := range []int{6, len(good) / 2, len(good) - 5} {
		in.put(fmt.Sprintf("lane/truncated-%d-of-%d", cut, len(good)), lanes, lane, nil, good[:cut])
	}
	in.put("lane/unknown-schema-id", lanes, lane, nil, withSchemaID(good, 9999))
	in.put("lane/kv-event-schema-id", lanes, lane, nil, withSchemaID(good, uint32(kvID)))
	// The images travel last: replace them (a one-byte length and 16 bytes) by a declared length
	// of 2^40 bytes followed by eight.
	huge := zigzag(slices.Clone(good[:len(good)-1-schemas.ImageSize]), 1<<40)
	in.put("lane/huge-declared-length", lanes, lane, nil, append(huge, in.random(8)...))
	words := make([]uint64, buckets)
	in.put("lane/chunk-of-lane-0-pool", lanes, lane, nil, encLane(schemas.LaneRecord{Identity: streams.WireIdentity(identity(s.dcs[0])),
		Kind: schemas.LaneSnapshotChunk, Snapshot: schemas.SnapshotChunk{Sequence: 0, ChunkIndex: 0, ChunkCount: 1,
			FirstBucket: 0, TotalBuckets: buckets, Words: schemas.AppendU64s(nil, words)}}))
	in.put("lane/foreign-pool-delta", lanes, lane, nil, delta(identity(0x999)))

	// DC 0's KV-events topic (relay 0).
	goodKV, err := s.codec.EncodeKvEvent(schemas.KvEvent{WorkerID: 0xbad, EventID: 1, Kind: schemas.KvStoredEvent,
		Stored: schemas.KvStored{Blocks: []schemas.KvBlock{{BlockHash: 1, TokensHash: 2}}}})
	if err != nil {
		t.Fatal(err)
	}
	kv := s.kv[0]
	key := []byte("3005")
	for _, n := range []int{1, 9, 300} {
		in.put(fmt.Sprintf("kv/random-%dB", n), kv, 5, key, in.random(n))
	}
	in.put("kv/truncated", kv, 5, key, goodKV[:len(goodKV)-2])
	in.put("kv/unknown-schema-id", kv, 5, key, withSchemaID(goodKV, 4242))
	in.put("kv/lane-record-schema-id", kv, 5, key, withSchemaID(goodKV, uint32(laneID)))
	in.put("kv/huge-declared-length", kv, 5, key, zigzag(slices.Clone(goodKV[:5]), 1<<40))

	// The query topic (whichever replica owns partition 2 in the query group).
	goodQ, err := s.codec.EncodeQueryRequest(schemas.QueryRequest{CorrelationID: "hostile", Input: schemas.InputLocalBlockHashes,
		Hashes: schemas.PackedU64(schemas.AppendU64s(nil, []uint64{1, 2, 3}))})
	if err != nil {
		t.Fatal(err)
	}
	qt := s.topics.Queries
	in.put("query/random-64B", qt, 2, nil, in.random(64))
	in.put("query/truncated", qt, 2, nil, goodQ[:len(goodQ)-4])
	in.put("query/unknown-schema-id", qt, 2, nil, withSchemaID(goodQ, 7777))
	in.put("query/huge-declared-length", qt, 2, nil, zigzag(slices.Clone(goodQ[:5]), 1<<40))

	t.Logf("injected %d hostile records", len(in.sent))
	w.waitAcked(w.acked.Load()+450, time.Minute) // good load continues after the hostile records (3 s at 150/s)
	w.pause()
	seqs = s.relaySettled(w, time.Minute)
	pages := s.replicasCaughtUp(seqs, 2*time.Minute)
	stopWatch()
	watch.Wait()

	// No crash: the same processes, alive.
	for _, p := range procs {
		if !p.Alive() || p.Pid() != pids[p.Name] {
			t.Errorf("%s died or restarted", p.Name)
		}
	}
	if n := lane0Left.Load(); n > 0 {
		t.Errorf("lane 0 left service %d times while lane 1 and the KV topic of DC 0 were attacked", n)
	}
	for i, page := range pages {
		l0, l1 := page.Lanes[0], page.Lanes[1]
		if was := pagesBefore[i].Lanes[0]; len(l0.Faults) != 0 || l0.Rejected != 0 || l0.Recoveries != was.Recoveries || l0.Identity != was.Identity {
			t.Errorf("%s lane 0: faults %v, rejected %d, recoveries %d (was %d), identity %s (was %s): it received no hostile record",
				s.indexes[i].Name, l0.Faults, l0.Rejected, l0.Recoveries, was.Recoveries, l0.Identity, was.Identity)
		}
		if len(l1.Faults) == 0 {
			t.Errorf("%s lane 1: no fault counted", s.indexes[i].Name)
		}
		t.Logf("%s lane 1: faults %v, rejected %d, recoveries %d, last fault %q", s.indexes[i].Name, l1.Faults, l1.Rejected, l1.Recoveries, l1.LastFault)
	}
	rep := s.compareAnswers(w, w.queries(mrand.New(mrand.NewPCG(seed, 0x72)), 200))

	// Every hostile record dead-lettered with its reason.
	type coord struct {
		topic     string
		partition int32
		offset    int64
	}
	dead := map[coord][]schemas.DeadLetter{}
	var letters []schemas.DeadLetter
	missing := 0
	testenv.WaitUntilEvery(t, scrapePoll, 30*time.Second, "every hostile record is dead-lettered", func() bool {
		letters = s.deadLetters()
		clear(dead)
		for _, d := range letters {
			c := coord{d.SourceTopic, d.SourcePartition, d.SourceOffset}
			dead[c] = append(dead[c], d)
		}
		missing = 0
		for _, h := range in.sent {
			if len(dead[coord{h.topic, h.partition, h.offset}]) == 0 {
				missing++
			}
		}
		return missing == 0
	}, func() string { return fmt.Sprintf("%d of %d have no dead letter", missing, len(in.sent)) })
	byReason := map[string]int{}
	for _, h := range in.sent {
		ds := dead[coord{h.topic, h.partition, h.offset}]
		if len(ds) == 0 {
			t.Errorf("%s (%s[%d]@%d) was not dead-lettered", h.kind, h.topic, h.partition, h.offset)
			continue
		}
		var why []string
		for _, d := range ds {
			if d.Reason == "" {
				t.Errorf("%s: dead letter without a reason: %+v", h.kind, d)
			}
			why = append(why, fmt.Sprintf("%v by %s", d.ReasonCode, d.Component))
			byReason[fmt.Sprint(d.ReasonCode)]++
		}
		t.Logf("  %-32s -> %d dead letter(s): %s; %.90s", h.kind, len(ds), strings.Join(why, ", "), ds[0].Reason)
	}

	// Counters moved.
	after := map[string]map[string]float64{}
	for _, p := range procs {
		m, err := p.Metrics()
		if err != nil {
			t.Fatal(err)
		}
		after[p.Name] = m
	}
	delta1 := func(p *proc, name string) float64 {
		return sumMetrics(after[p.Name], name) - sumMetrics(before[p.Name], name)
	}
	if d := delta1(s.relays[0], "ckf_relay_events_undecodable_total"); d < 7 {
		t.Errorf("relay-0: ckf_relay_events_undecodable_total moved by %v, want >= 7", d)
	}
	var invalid float64
	for _, ix := range s.indexes {
		invalid += delta1(ix, "ckf_query_invalid_requests_total")
		if d := delta1(ix, "ckf_indexer_lane_faults_total"); d < 1 {
			t.Errorf("%s: ckf_indexer_lane_faults_total did not move", ix.Name)
		}
		t.Logf("%s: lane faults +%v, records rejected +%v, query invalid +%v", ix.Name, delta1(ix, "ckf_indexer_lane_faults_total"),
			delta1(ix, "ckf_indexer_lane_records_rejected_total"), delta1(ix, "ckf_query_invalid_requests_total"))
	}
	if invalid < 4 {
		t.Errorf("ckf_query_invalid_requests_total moved by %v over the replicas, want >= 4", invalid)
	}

	// A relay of another pool pointed at lane 1 (configured without the lane map, so only the
	// lane's snapshot index can stop it) must refuse to start and leave lane 1 as it was.
	var rogueEnv []string
	for _, kv := range s.relays[1].Env() {
		switch {
		case strings.HasPrefix(kv, "CKF_INDEXER_LANES="), strings.HasPrefix(kv, "CKF_RELAY_DC_ID="),
			strings.HasPrefix(kv, "CKF_TOPICS_KV_EVENTS="), strings.HasPrefix(kv, "CKF_HTTP_LISTEN="):
		default:
			rogueEnv = append(rogueEnv, kv)
		}
	}
	rogueEnv = append(rogueEnv, "CKF_RELAY_DC_ID=0xdc99", "CKF_TOPICS_KV_EVENTS="+s.topics.KVEvents)
	rogue := newProc(t, s.logDir, "rogue-relay", rogueEnv, "relay")
	rogue.Start()
	select {
	case <-rogue.Done():
	case <-time.After(time.Minute):
		t.Fatal("a relay of a foreign pool on lane 1 kept running")
	}
	rogueLog := testenv.Tail(rogue.LogPath(1), 200)
	if rogue.ExitError() == nil || !strings.Contains(rogueLog, "not owned") {
		t.Errorf("rogue relay: exit %v, want a failure naming the lane owner; log:\n%s", rogue.ExitError(), testenv.Tail(rogue.LogPath(1), 5))
	}
	t.Logf("rogue relay of pool dc99 on lane 1: %v", rogue.ExitError())
	// Whatever the rogue committed to lane 1 before it exited lies below the lane partition's
	// last stable offset now: once both replicas have processed lane 1 up to it, the rogue's
	// effect on them, if any, is visible.
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	lso, err := testenv.ListCommittedOffsets(ctx, kadm.NewClient(s.client()), lanes)
	cancel()
	if err != nil {
		t.Fatal(err)
	}
	stable, _ := lso.Lookup(lanes, lane)
	var rogueAfter []lanesPage
	testenv.WaitUntilEvery(t, scrapePoll, time.Minute, fmt.Sprintf("both replicas process lane 1 up to offset %d", stable.Offset-1), func() bool {
		rogueAfter = rogueAfter[:0]
		for _, ix := range s.indexes {
			page, err := ix.lanes()
			if err != nil || len(page.Lanes) < 2 || page.Lanes[1].AppliedOffset < stable.Offset-1 {
				return false
			}
			rogueAfter = append(rogueAfter, page)
		}
		return true
	}, func() string { return fmt.Sprintf("pages %+v", rogueAfter) })
	for i, page := range rogueAfter {
		if a, b := page.Lanes[1], pages[i].Lanes[1]; a.Identity != b.Identity || a.InstalledSequence != b.InstalledSequence || a.State != "serving" {
			t.Errorf("%s lane 1 changed after the rogue relay: %+v, was %+v", s.indexes[i].Name, a, b)
		}
	}

	// Memory bounded.
	var rssLine []string
	for _, p := range procs {
		a := p.RSS()
		rssLine = append(rssLine, fmt.Sprintf("%s %.1f->%.1f MiB", p.Name, mibf(rssBefore[p.Name]), mibf(a)))
		if a-rssBefore[p.Name] > rssBound {
			t.Errorf("%s: RSS grew from %d to %d bytes (bound +%d)", p.Name, rssBefore[p.Name], a, rssBound)
		}
	}
	reasons := make([]string, 0, len(byReason))
	for r, n := range byReason {
		reasons = append(reasons, fmt.Sprintf("%s=%d", r, n))
	}
	sort.Strings(reasons)
	t.Logf("SUMMARY hostile: %d hostile records (%d lane, %d kv, %d query), %d dead letters in all (%s); processes alive %d/%d; "+
		"lane 0 left service %d times; %d queries, %d probes, replica mismatches %d, answers below the model %d; RSS %s",
		len(in.sent), countPrefix(in.sent, "lane/"), countPrefix(in.sent, "kv/"), countPrefix(in.sent, "query/"), len(letters),
		strings.Join(reasons, " "), countAlive(procs), len(procs), lane0Left.Load(), rep.queries, rep.probes, rep.mismatches, rep.lost, strings.Join(rssLine, ", "))
}

func mibf(b int64) float64 { return float64(b) / (1 << 20) }

func countPrefix(hs []hostile, prefix string) int {
	n := 0
	for _, h := range hs {
		if strings.HasPrefix(h.kind, prefix) {
			n++
		}
	}
	return n
}

func countAlive(ps []*proc) int {
	n := 0
	for _, p := range ps {
		if p.Alive() {
			n++
		}
	}
	return n
}
