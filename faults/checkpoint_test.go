//go:build linux

package faults

import (
	"context"
	"encoding/binary"
	"fmt"
	mrand "math/rand/v2"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ckf-stream/ckf-stream/ckf"
	"github.com/ckf-stream/ckf-stream/schemas"
	"github.com/ckf-stream/ckf-stream/testenv"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/zeebo/xxh3"
)

// The relay checkpoint framing, as streams/relay/checkpoint_record.go documents it, rebuilt here so
// that the suite can write well-framed checkpoints around payloads of its choosing (the package
// streams keeps its encoder unexported; its own tests reach it through relay_export_test.go,
// which other packages cannot import). Should this copy drift from the relay's format, the
// framed-but-garbage checkpoint of TestHostileCheckpoint would be rejected as malformed rather
// than as an unusable state, and the test fails.
const (
	ckptMagic         = "CKFR"
	ckptVersion       = 1 // the test writes format version 1, which relays still read
	ckptNextVersion   = 3 // the first version no relay reads
	ckptKindChunk     = 1
	ckptKindManifest  = 2
	relayCheckpointDL = "relay-checkpoint" // the dead letters' component
)

func ckptHeader(kind byte) []byte {
	return append([]byte(ckptMagic), ckptVersion, kind)
}

// ckptChunk is one chunk record's value: id, index, count, then its payload bytes.
func ckptChunk(id uint64, index, count uint32, payload []byte) []byte {
	b := binary.BigEndian.AppendUint64(ckptHeader(ckptKindChunk), id)
	b = binary.BigEndian.AppendUint32(b, index)
	b = binary.BigEndian.AppendUint32(b, count)
	return append(b, payload...)
}

// ckptManifest is a manifest as the suite writes it; payload gives its length and hash.
type ckptManifest struct {
	id          uint64
	pool        string
	lane        uint8
	chunks      uint32
	firstChunk  int64
	payload     []byte
	events      uint64
	inputTopic  string
	offsets     [][2]int64 // (partition, next offset), sorted by partition
	incarnation uint64
	sequence    uint64
}

func ckptStr(b []byte, s string) []byte {
	b = binary.BigEndian.AppendUint16(b, uint16(len(s)))
	return append(b, s...)
}

// encode is the manifest record's value, its trailing xxh3 covering everything before it.
func (m ckptManifest) encode() []byte {
	b := binary.BigEndian.AppendUint64(ckptHeader(ckptKindManifest), m.id)
	b = ckptStr(b, m.pool)
	b = append(b, m.lane)
	b = binary.BigEndian.AppendUint64(b, m.incarnation)
	b = binary.BigEndian.AppendUint64(b, m.sequence)
	b = binary.BigEndian.AppendUint32(b, m.chunks)
	b = binary.BigEndian.AppendUint64(b, uint64(m.firstChunk))
	b = binary.BigEndian.AppendUint64(b, uint64(len(m.payload)))
	b = binary.BigEndian.AppendUint64(b, xxh3.Hash(m.payload))
	b = binary.BigEndian.AppendUint64(b, uint64(time.Now().UnixNano()))
	b = binary.BigEndian.AppendUint64(b, m.events)
	b = ckptStr(b, m.inputTopic)
	b = binary.BigEndian.AppendUint32(b, uint32(len(m.offsets)))
	for _, o := range m.offsets {
		b = binary.BigEndian.AppendUint32(b, uint32(o[0]))
		b = binary.BigEndian.AppendUint64(b, uint64(o[1]))
	}
	return binary.BigEndian.AppendUint64(b, xxh3.Hash(b))
}

// damaged is one record written to a relay's checkpoint partition. rejected says whether the
// restarting relay must reject it (count it, dead-letter it): every record but the chunks of a
// well-framed checkpoint, which are only read through their manifest. code and reason are what
// its dead letter must carry.
type damaged struct {
	kind     string
	offset   int64
	rejected bool
	code     schemas.DeadLetterReason
	reason   string // a fragment of the dead letter's reason (case-insensitive)
}

// checkpointInjector writes hand-made records to one relay's checkpoint partition, keyed by the
// relay's pool (the reader skips records of other keys without a word).
type checkpointInjector struct {
	t         *testing.T
	cl        *kgo.Client
	rng       *mrand.Rand
	topic     string
	partition int32
	key       []byte
	nextID    uint64
	sent      []damaged
}

func (in *checkpointInjector) put(d damaged, value []byte) int64 {
	in.t.Helper()
	r, err := in.cl.ProduceSync(context.Background(), &kgo.Record{Topic: in.topic, Partition: in.partition, Key: in.key, Value: value}).First()
	if err != nil {
		in.t.Fatalf("%s: %v", d.kind, err)
	}
	d.offset = r.Offset
	in.sent = append(in.sent, d)
	return r.Offset
}

func (in *checkpointInjector) random(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(in.rng.UintN(256))
	}
	return b
}

// checkpoint writes a well-framed checkpoint of m.payload (its chunks of chunkBytes, then the
// manifest m describes, with a fresh id and the chunks' count and first offset). The chunks are
// not rejected; the manifest must be, with code and reason.
func (in *checkpointInjector) checkpoint(kind string, m ckptManifest, chunkBytes int, code schemas.DeadLetterReason, reason string) {
	in.t.Helper()
	in.nextID++
	m.id = in.nextID
	n := max(1, (len(m.payload)+chunkBytes-1)/chunkBytes)
	m.chunks = uint32(n)
	for i := 0; i < n; i++ {
		part := m.payload[i*chunkBytes : min((i+1)*chunkBytes, len(m.payload))]
		off := in.put(damaged{kind: fmt.Sprintf("%s/chunk-%d", kind, i)}, ckptChunk(m.id, uint32(i), uint32(n), part))
		if i == 0 {
			m.firstChunk = off
		}
	}
	in.put(damaged{kind: kind + "/manifest", rejected: true, code: code, reason: reason}, m.encode())
}

// rejectedSince counts the records from index i of sent that the relay must reject.
func (in *checkpointInjector) rejectedSince(i int) int {
	n := 0
	for _, d := range in.sent[i:] {
		if d.rejected {
			n++
		}
	}
	return n
}

// restoredLog is the message a relay logs when it restores a checkpoint (streams/relay/relay_checkpoint.go).
const restoredLog = `"msg":"relay state restored from checkpoint"`

var logIDField = regexp.MustCompile(`"id":(\d+)`)

// logID is the checkpoint id in a relay's log line.
func logID(t *testing.T, line string) uint64 {
	t.Helper()
	m := logIDField.FindStringSubmatch(line)
	if m == nil {
		t.Fatalf("no checkpoint id in %s", line)
	}
	id, err := strconv.ParseUint(m[1], 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// TestHostileCheckpoint writes damaged records to a relay's checkpoint partition, kills the
// relay with SIGKILL and restarts it, twice, while the engine keeps writing KV events:
//
//  1. On top of the relay's own good checkpoints: random bytes, an unknown record kind, a
//     future format version, a manifest with a bad checksum, a manifest whose chunks are
//     missing, a well-framed checkpoint whose payload is garbage, and two well-framed
//     checkpoints of a restorable state (the model's) written for another pool and with input
//     offsets beyond the KV topic's end. The relay must reject every one of them and restore its
//     newest good checkpoint.
//  2. After every record of the partition is deleted (as retention would): random bytes, a
//     manifest whose chunks were deleted, the garbage payload and the state beyond the input's
//     end again. With no usable checkpoint the relay must replay the KV topic from its start.
//
// Each time the relay must become ready, count exactly the rejected records
// (ckf_relay_checkpoints_rejected_total), and then hold exactly the model's resident blocks and every
// KV record; the replica must answer no less than the model. Every rejected record is
// dead-lettered with component "relay-checkpoint" and its reason, and nothing else is.
func TestHostileCheckpoint(t *testing.T) {
	seeds := testenv.Brokers(t)
	seed := uint64(envInt(t, "FAULTS_SEED", 1))
	s := newSystem(t, seeds, 1, 1)
	relay := s.relays[0]
	// Checkpoints on the event count only (every relayCheckpointEveryEvents events): with the
	// writer paused and the relay settled, no checkpoint transaction can be open when the relay
	// is killed, so none holds back the partition's last stable offset and hides the injected
	// records from the restarting relay.
	relay.AddEnv("CKF_RELAY_CHECKPOINT_INTERVAL=0")
	s.startAll()
	w := s.newWriter(seed+300, 150)
	w.run()

	domain, err := ckf.ParseIndexerDomainID(s.domain, ckf.IdentityExplicit)
	if err != nil {
		t.Fatal(err)
	}
	pool := ckf.PoolID{Domain: domain, Dc: ckf.DcID(s.dcs[0])}.String()
	foreign := ckf.PoolID{Domain: domain, Dc: ckf.DcID(0x999)}.String()
	const lane = 0
	in := &checkpointInjector{t: t, cl: s.client(kgo.RecordPartitioner(kgo.ManualPartitioner())), rng: mrand.New(mrand.NewPCG(seed, 0x636b7074)),
		topic: s.topics.RelayCheckpoints, partition: lane, key: []byte(pool), nextID: uint64(time.Now().Add(time.Hour).UnixNano())}
	adm := kadm.NewClient(s.client())
	endOf := func() int64 {
		t.Helper()
		ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
		defer cancel()
		ends, err := testenv.ListEndOffsets(ctx, adm, in.topic)
		if err != nil {
			t.Fatal(err)
		}
		o, _ := ends.Lookup(in.topic, lane)
		return o.Offset
	}
	modelState := func() []byte {
		w.mu.Lock()
		defer w.mu.Unlock()
		b, err := w.models[0].AppendCheckpoint(nil)
		if err != nil {
			t.Fatalf("the model's checkpoint: %v", err)
		}
		return b
	}
	checkpoints := func() float64 {
		m, err := relay.Metrics()
		if err != nil {
			return -1
		}
		return sumMetrics(m, "ckf_relay_checkpoints_total")
	}
	// crash pauses the engine, waits until the relay has applied and committed every event,
	// and kills it.
	crash := func() {
		t.Helper()
		w.pause()
		s.relaySettled(w, time.Minute)
		relay.Kill9()
	}
	// restart lets the engine write a tail of events while the relay is down, starts the relay
	// and returns its metrics once it has started.
	restart := func() map[string]float64 {
		t.Helper()
		w.resume()
		w.waitAcked(w.acked.Load()+150, time.Minute)
		relay.Start()
		relay.WaitReady(time.Minute)
		return s.relayStarted(relay, time.Minute)
	}
	// settle checks the relay's state and the replica's answers against the model.
	settle := func(phase string) oracleReport {
		t.Helper()
		w.waitAcked(w.acked.Load()+150, time.Minute) // live events after the restart
		w.pause()
		seqs := s.relaySettled(w, time.Minute)
		s.replicasCaughtUp(seqs, time.Minute)
		rep := s.compareAnswers(w, w.queries(mrand.New(mrand.NewPCG(seed, 0x74)), 100))
		t.Logf("%s: lane at sequence %d; %d queries, %d probes (%d with a resident prefix), answers below the model %d", phase, seqs[0], rep.queries, rep.probes, rep.nonZero, rep.lost)
		w.resume()
		return rep
	}

	// ---- 1. damaged records above good checkpoints ----
	testenv.WaitUntilEvery(t, scrapePoll, time.Minute, "the relay commits two checkpoints", func() bool { return checkpoints() >= 2 })
	crash()
	committed := relay.LogLines(1, checkpointCommittedLog)
	newest := logID(t, committed[len(committed)-1]) // the newest good checkpoint
	before := endOf()
	in.put(damaged{kind: "random-bytes", rejected: true, code: schemas.DeadLetterMalformed, reason: "bad magic"}, in.random(300))
	in.put(damaged{kind: "unknown-kind", rejected: true, code: schemas.DeadLetterMalformed, reason: "kind"}, append(ckptHeader(9), in.random(40)...))
	future := ckptHeader(ckptKindManifest)
	future[len(ckptMagic)] = ckptNextVersion
	in.put(damaged{kind: "future-version", rejected: true, code: schemas.DeadLetterMalformed, reason: "version"}, append(future, in.random(40)...))
	state := modelState()
	bad := ckptManifest{id: in.nextID + 100, pool: pool, lane: lane, chunks: 1, firstChunk: before - 1, payload: state, inputTopic: s.kv[0]}.encode()
	bad[len(ckptMagic)+2+8+2] ^= 0x40 // the pool string's first byte (after header, id, length): only the trailer tells
	in.put(damaged{kind: "manifest-bad-checksum", rejected: true, code: schemas.DeadLetterMalformed, reason: "checksum"}, bad)
	in.put(damaged{kind: "manifest-chunks-missing", rejected: true, code: schemas.DeadLetterMalformed, reason: "chunks found"},
		ckptManifest{id: in.nextID + 200, pool: pool, lane: lane, chunks: 3, firstChunk: before - 1, payload: in.random(3000), inputTopic: s.kv[0]}.encode())
	in.checkpoint("garbage-payload", ckptManifest{pool: pool, lane: lane, payload: in.random(5000), inputTopic: s.kv[0]}, 2000,
		schemas.DeadLetterInvalidField, "relay checkpoint at offset")
	in.checkpoint("foreign-pool", ckptManifest{pool: foreign, lane: lane, payload: state, inputTopic: s.kv[0]}, 64<<10,
		schemas.DeadLetterMalformed, "written for pool")
	in.checkpoint("beyond-input-end", ckptManifest{pool: pool, lane: lane, payload: state, inputTopic: s.kv[0], offsets: [][2]int64{{0, 1 << 40}}}, 64<<10,
		schemas.DeadLetterMalformed, "beyond the KV topic's end")
	want1 := in.rejectedSince(0)
	m := restart()
	rejected1, restored1 := sumMetrics(m, "ckf_relay_checkpoints_rejected_total"), m["ckf_relay_restored_from_checkpoint"]
	var restoredID uint64
	if lines := relay.LogLines(2, restoredLog); len(lines) == 1 {
		restoredID = logID(t, lines[0])
	}
	t.Logf("phase 1: %d good checkpoints committed (the newest %d), %d damaged records written (%d to reject); the restart rejected %v, restored from a checkpoint %v (%d)",
		len(committed), newest, len(in.sent), want1, rejected1, restored1, restoredID)
	if restored1 != 1 || rejected1 != float64(want1) || restoredID != newest {
		t.Errorf("phase 1: restored from checkpoint %d (gauge %v), rejected %v; want the newest good checkpoint %d under the damaged records, and %d rejected",
			restoredID, restored1, rejected1, newest, want1)
	}
	rep1 := settle("phase 1")

	// ---- 2. no usable checkpoint ----
	crash()
	end := endOf()
	var del kadm.Offsets
	del.Add(kadm.Offset{Topic: in.topic, Partition: lane, At: end})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	resp, err := adm.DeleteRecords(ctx, del)
	cancel()
	if err == nil {
		err = resp.Error()
	}
	if err != nil {
		t.Fatalf("deleting the records of %s partition %d: %v", in.topic, lane, err)
	}
	phase2 := len(in.sent)
	in.put(damaged{kind: "2/random-bytes", rejected: true, code: schemas.DeadLetterMalformed, reason: "bad magic"}, in.random(100))
	in.put(damaged{kind: "2/manifest-chunks-deleted", rejected: true, code: schemas.DeadLetterMalformed, reason: "chunks found"},
		ckptManifest{id: in.nextID + 300, pool: pool, lane: lane, chunks: 2, firstChunk: end - 2, payload: state, inputTopic: s.kv[0]}.encode())
	in.checkpoint("2/garbage-payload", ckptManifest{pool: pool, lane: lane, payload: in.random(700), inputTopic: s.kv[0]}, 500,
		schemas.DeadLetterInvalidField, "relay checkpoint at offset")
	in.checkpoint("2/beyond-input-end", ckptManifest{pool: pool, lane: lane, payload: modelState(), inputTopic: s.kv[0], offsets: [][2]int64{{3, 1 << 40}}}, 64<<10,
		schemas.DeadLetterMalformed, "beyond the KV topic's end")
	want2 := in.rejectedSince(phase2)
	m = restart()
	rejected2, restored2 := sumMetrics(m, "ckf_relay_checkpoints_rejected_total"), m["ckf_relay_restored_from_checkpoint"]
	t.Logf("phase 2: records below offset %d deleted, %d damaged records written (%d to reject); the restart rejected %v, restored from a checkpoint %v",
		end, len(in.sent)-phase2, want2, rejected2, restored2)
	if restored2 != 0 || rejected2 != float64(want2) {
		t.Errorf("phase 2: restored from a checkpoint %v, rejected %v; want 0 (a replay from the KV topic's start) and %d", restored2, rejected2, want2)
	}
	rep2 := settle("phase 2")

	// Every rejected record dead-lettered with its reason, and nothing else.
	type coord struct {
		partition int32
		offset    int64
	}
	var letters []schemas.DeadLetter
	byRecord := map[coord][]schemas.DeadLetter{}
	want := want1 + want2
	testenv.WaitUntilEvery(t, scrapePoll, 30*time.Second, fmt.Sprintf("%d relay-checkpoint dead letters", want), func() bool {
		letters = letters[:0]
		for _, d := range s.deadLetters() {
			if d.Component == relayCheckpointDL {
				letters = append(letters, d)
			}
		}
		return len(letters) >= want
	}, func() string { return fmt.Sprintf("%d found", len(letters)) })
	for _, d := range letters {
		if d.SourceTopic != in.topic {
			t.Errorf("relay-checkpoint dead letter of %s[%d]@%d: %s", d.SourceTopic, d.SourcePartition, d.SourceOffset, d.Reason)
		}
		byRecord[coord{d.SourcePartition, d.SourceOffset}] = append(byRecord[coord{d.SourcePartition, d.SourceOffset}], d)
	}
	for _, d := range in.sent {
		ds := byRecord[coord{lane, d.offset}]
		delete(byRecord, coord{lane, d.offset})
		switch {
		case !d.rejected && len(ds) != 0:
			t.Errorf("%s (@%d): dead-lettered (%s), but it is part of a well-framed checkpoint", d.kind, d.offset, ds[0].Reason)
		case !d.rejected:
		case len(ds) != 1:
			t.Errorf("%s (@%d): %d dead letters, want 1", d.kind, d.offset, len(ds))
		case ds[0].ReasonCode != d.code || !strings.Contains(strings.ToLower(ds[0].Reason), strings.ToLower(d.reason)):
			t.Errorf("%s (@%d): dead letter %v %q, want %v with %q", d.kind, d.offset, ds[0].ReasonCode, ds[0].Reason, d.code, d.reason)
		default:
			t.Logf("  %-32s @%-4d -> %v: %.110s", d.kind, d.offset, ds[0].ReasonCode, ds[0].Reason)
		}
	}
	for c, ds := range byRecord {
		t.Errorf("relay-checkpoint dead letter of a record the test did not damage (partition %d offset %d): %s", c.partition, c.offset, ds[0].Reason)
	}
	t.Logf("SUMMARY checkpoint: %d damaged records (%d to reject) in 2 restarts: rejected %v then %v, restored from a checkpoint %v then %v; "+
		"%d relay-checkpoint dead letters; answers below the model %d then %d",
		len(in.sent), want, rejected1, rejected2, restored1, restored2, len(letters), rep1.lost, rep2.lost)
}
