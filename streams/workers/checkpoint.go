package workers

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"maps"
	"slices"
	"strconv"
	"time"

	"github.com/ckf-stream/ckf-stream/ckf"
	"github.com/ckf-stream/ckf-stream/streams"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/zeebo/xxh3"
)

// Checkpoint records on the compacted checkpoint topic (workers.md, "Checkpoint"). One
// checkpoint of DC d is one Kafka transaction on d's partition (checkpointPartition):
//
//	chunk i     key "<d>/<i>"  value "CKFWCHK1" generation:u64 index:u32 bytes
//	tombstones  key "<d>/<i>"  no value, for the chunks of a larger earlier checkpoint
//	manifest    key "<d>"      value "CKFWMAN1" JSON(checkpointManifest)
//
// Keys repeat from one checkpoint to the next, so compaction keeps about one checkpoint per DC.
// The DC's replicas share one transactional id: a replica that begins a checkpoint fences the
// one another replica has open, whose records abort, so committed checkpoints never interleave
// and the newest committed manifest and the newest committed chunk of each index belong to the
// same checkpoint (the cleaner ignores aborted records). A reader still checks the generation,
// the count, the length and the hash: nothing is taken on trust.

const (
	chunkMagic    = "CKFWCHK1"
	manifestMagic = "CKFWMAN1"
	chunkHeadLen  = len(chunkMagic) + 8 + 4
)

// checkpointManifest says what a checkpoint holds and the input it reflects.
type checkpointManifest struct {
	DC          string `json:"dc"`
	KVTopic     string `json:"kv_topic"`
	Generation  uint64 `json:"generation"`
	Chunks      int    `json:"chunks"`
	PayloadLen  int    `json:"payload_bytes"`
	PayloadHash uint64 `json:"payload_xxh3"`
	// FirstChunk is the offset of chunk 0; the chunks lie in [FirstChunk, the manifest's offset).
	FirstChunk int64 `json:"first_chunk_offset"`
	// Offsets is, per KV partition, the offset of the next record to apply.
	Offsets map[int32]int64 `json:"offsets"`
	// NewestEventMs is the timestamp of the newest KV record applied (Unix ms; 0: none).
	NewestEventMs int64 `json:"newest_event_ms"`
	// Applied is the number of KV records applied since the replica's log start, across restarts.
	Applied uint64 `json:"applied"`
	// Rows is the lineage's number of (source, external id) rows.
	Rows int `json:"rows"`
	// WrittenMs is when the checkpoint was written (Unix ms).
	WrittenMs int64 `json:"written_ms"`
	// Degraded lists the sources whose engine history was lost, as (worker id, dp rank) pairs
	// in key order; absent when none (and from replicas of an earlier revision).
	Degraded [][2]uint64 `json:"degraded_sources,omitempty"`
}

// degradedList is the manifest's form of the degraded sources: pairs in key order, nil for none.
func degradedList(m map[ckf.SourceKey]struct{}) [][2]uint64 {
	if len(m) == 0 {
		return nil
	}
	keys := slices.SortedFunc(maps.Keys(m), ckf.SourceKey.Compare)
	out := make([][2]uint64, len(keys))
	for i, k := range keys {
		out[i] = [2]uint64{uint64(k.Worker), uint64(k.Rank)}
	}
	return out
}

// CheckpointError is an unusable checkpoint or checkpoint record, as it is logged, counted and
// dead-lettered. Offset is the record's (the manifest's for a checkpoint as a whole).
type CheckpointError struct {
	Offset int64
	Reason string
	Err    error
}

// Error implements error.
func (e *CheckpointError) Error() string {
	s := fmt.Sprintf("workers: checkpoint at offset %d: %s", e.Offset, e.Reason)
	if e.Err != nil {
		s += ": " + e.Err.Error()
	}
	return s
}

// Unwrap returns the cause.
func (e *CheckpointError) Unwrap() error { return e.Err }

// ErrCheckpointRecord is the cause of a CheckpointError for a record that is not a checkpoint
// record of this format.
var ErrCheckpointRecord = errors.New("not a worker checkpoint record")

func manifestKey(dc ckf.DcID) []byte     { return []byte(dc.String()) }
func chunkKey(dc ckf.DcID, i int) []byte { return []byte(dc.String() + "/" + strconv.Itoa(i)) }
func isChunkKeyOf(k []byte, dc ckf.DcID) bool {
	p := dc.String() + "/"
	return len(k) > len(p) && string(k[:len(p)]) == p
}

// checkpointPartition is DC dc's partition of a checkpoint topic of n partitions.
func checkpointPartition(dc ckf.DcID, n int) int32 {
	h := fnv.New32a()
	_, _ = h.Write(manifestKey(dc))
	return int32(h.Sum32() % uint32(n))
}

func encodeManifest(m *checkpointManifest) []byte {
	b, _ := json.Marshal(m) // plain fields: never fails
	return append([]byte(manifestMagic), b...)
}

func decodeManifest(v []byte) (checkpointManifest, error) {
	var m checkpointManifest
	if !bytes.HasPrefix(v, []byte(manifestMagic)) {
		return m, fmt.Errorf("%w: no manifest magic", ErrCheckpointRecord)
	}
	dec := json.NewDecoder(bytes.NewReader(v[len(manifestMagic):]))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&m); err != nil {
		return m, fmt.Errorf("%w: manifest: %w", ErrCheckpointRecord, err)
	}
	if m.Chunks < 0 || m.PayloadLen < 0 || m.FirstChunk < 0 {
		return m, fmt.Errorf("%w: manifest with negative counts", ErrCheckpointRecord)
	}
	return m, nil
}

func encodeChunk(gen uint64, i int, data []byte) []byte {
	b := make([]byte, 0, chunkHeadLen+len(data))
	b = append(b, chunkMagic...)
	b = binary.LittleEndian.AppendUint64(b, gen)
	b = binary.LittleEndian.AppendUint32(b, uint32(i))
	return append(b, data...)
}

func decodeChunk(v []byte) (gen uint64, i int, data []byte, err error) {
	if len(v) < chunkHeadLen || string(v[:len(chunkMagic)]) != chunkMagic {
		return 0, 0, nil, fmt.Errorf("%w: no chunk header", ErrCheckpointRecord)
	}
	return binary.LittleEndian.Uint64(v[len(chunkMagic):]), int(binary.LittleEndian.Uint32(v[len(chunkMagic)+8:])), v[chunkHeadLen:], nil
}

// restored is a checkpoint found usable.
type restored struct {
	m       checkpointManifest
	payload payload
}

// checkpointReader finds the newest usable checkpoint of a DC by reading its partition back from
// the end in windows growing fourfold (the manifest is normally among the last records).
type checkpointReader struct {
	adm       *kadm.Client
	wait      streams.ListingWait // how its listings wait for the brokers
	opts      []kgo.Opt
	topic     string
	partition int32
	dc        ckf.DcID
	kvTopic   string
}

// latest returns the newest checkpoint whose records, payload and topic check out, or nil when
// there is none. Each unusable one is passed to reject, with the record to dead-letter.
func (cr *checkpointReader) latest(ctx context.Context, reject func(*kgo.Record, error)) (*restored, error) {
	var start, end int64
	err := cr.wait.Retry(ctx, "offsets of "+cr.topic, func() error {
		ends, err := cr.adm.ListCommittedOffsets(ctx, cr.topic)
		if err == nil {
			err = ends.Error()
		}
		if err != nil {
			return err
		}
		starts, err := cr.adm.ListStartOffsets(ctx, cr.topic)
		if err == nil {
			err = starts.Error()
		}
		if err != nil {
			return err
		}
		e, _ := ends.Lookup(cr.topic, cr.partition)
		s, _ := starts.Lookup(cr.topic, cr.partition)
		start, end = s.Offset, e.Offset
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("workers: listing checkpoint topic %s: %w", cr.topic, err)
	}
	for hi, window := end, int64(16); hi > start; window = min(window*4, 1<<20) {
		lo := max(start, hi-window)
		var manifests []*kgo.Record
		if err := cr.read(ctx, lo, hi, func(rec *kgo.Record) {
			if bytes.Equal(rec.Key, manifestKey(cr.dc)) && rec.Value != nil {
				manifests = append(manifests, rec)
			}
		}); err != nil {
			return nil, err
		}
		for _, rec := range slices.Backward(manifests) {
			r, err := cr.load(ctx, rec)
			if err == nil {
				return r, nil
			}
			reject(rec, err)
		}
		hi = lo
	}
	return nil, nil
}

// load reads and checks the checkpoint whose manifest is rec.
func (cr *checkpointReader) load(ctx context.Context, rec *kgo.Record) (*restored, error) {
	fail := func(reason string, err error) (*restored, error) {
		return nil, &CheckpointError{Offset: rec.Offset, Reason: reason, Err: err}
	}
	m, err := decodeManifest(rec.Value)
	if err != nil {
		return fail("unreadable manifest", err)
	}
	switch {
	case m.DC != cr.dc.String():
		return fail(fmt.Sprintf("manifest of DC %s", m.DC), nil)
	case m.KVTopic != cr.kvTopic:
		return fail(fmt.Sprintf("written for KV topic %q, this replica reads %q", m.KVTopic, cr.kvTopic), nil)
	case m.FirstChunk > rec.Offset:
		return fail(fmt.Sprintf("first chunk offset %d after the manifest", m.FirstChunk), nil)
	}
	chunks := make([][]byte, m.Chunks)
	if m.Chunks > 0 {
		err := cr.read(ctx, m.FirstChunk, rec.Offset, func(c *kgo.Record) {
			if !isChunkKeyOf(c.Key, cr.dc) || c.Value == nil {
				return
			}
			gen, i, data, err := decodeChunk(c.Value)
			if err != nil || gen != m.Generation || i >= m.Chunks {
				return
			}
			chunks[i] = data
		})
		if err != nil {
			return nil, err
		}
	}
	payload := make([]byte, 0, m.PayloadLen)
	for i, c := range chunks {
		if c == nil {
			return fail(fmt.Sprintf("chunk %d of %d (generation %#x) missing", i, m.Chunks, m.Generation), nil)
		}
		payload = append(payload, c...)
	}
	if len(payload) != m.PayloadLen || xxh3.Hash(payload) != m.PayloadHash {
		return fail(fmt.Sprintf("payload of %d bytes (hash %#x), the manifest says %d (hash %#x)", len(payload), xxh3.Hash(payload), m.PayloadLen, m.PayloadHash), nil)
	}
	p, err := decodePayload(payload, cr.dc)
	if err != nil {
		return fail("payload", err)
	}
	if p.rows != m.Rows {
		return fail(fmt.Sprintf("%d rows, the manifest says %d", p.rows, m.Rows), nil)
	}
	return &restored{m: m, payload: p}, nil
}

// read calls fn for every data record of the partition in [lo, hi), hi at most the listed end.
func (cr *checkpointReader) read(ctx context.Context, lo, hi int64, fn func(*kgo.Record)) error {
	eol := streams.NewEndOfLog(cr.topic, map[int32]int64{cr.partition: lo}, map[int32]int64{cr.partition: hi})
	if eol.Reached() {
		return nil
	}
	opts := append(slices.Clip(cr.opts), kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{cr.topic: {cr.partition: kgo.NewOffset().At(lo)}}))
	cl, err := kgo.NewClient(append(opts, streams.EndOfLogConsumerOpts()...)...)
	if err != nil {
		return fmt.Errorf("workers: checkpoint reader: %w", err)
	}
	defer cl.Close()
	return eol.ReadToEnd(ctx, cl, func(rec *kgo.Record) {
		if rec.Offset >= lo {
			fn(rec)
		}
	})
}

// writeCheckpoint writes payload and m as one transaction on partition with a fresh
// transactional client (opts carry the connection; the transactional id fences any other
// replica's open checkpoint). staleFrom..staleTo are chunk indexes of an earlier, larger
// checkpoint to tombstone. It returns the manifest as written.
func writeCheckpoint(ctx context.Context, opts []kgo.Opt, txnID, topic string, partition int32, dc ckf.DcID, m checkpointManifest, payload []byte, chunkBytes, staleTo int) (checkpointManifest, error) {
	cl, err := kgo.NewClient(append(slices.Clip(opts), kgo.TransactionalID(txnID),
		kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.DefaultProduceTopic(topic))...)
	if err != nil {
		return m, err
	}
	defer cl.Close()
	if err := cl.BeginTransaction(); err != nil {
		return m, err
	}
	abort := func(err error) (checkpointManifest, error) {
		actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		if aerr := cl.AbortBufferedRecords(actx); aerr == nil {
			_ = cl.EndTransaction(actx, kgo.TryAbort)
		}
		return m, err
	}
	var recs []*kgo.Record
	for i := 0; i*chunkBytes < len(payload) || (i == 0 && len(payload) == 0); i++ {
		data := payload[i*chunkBytes : min(len(payload), (i+1)*chunkBytes)]
		recs = append(recs, &kgo.Record{Partition: partition, Key: chunkKey(dc, i), Value: encodeChunk(m.Generation, i, data)})
	}
	m.Chunks = len(recs)
	res := cl.ProduceSync(ctx, recs...)
	if err := res.FirstErr(); err != nil {
		return abort(err)
	}
	m.FirstChunk = res[0].Record.Offset
	recs = recs[:0]
	for i := m.Chunks; i < staleTo; i++ {
		recs = append(recs, &kgo.Record{Partition: partition, Key: chunkKey(dc, i)})
	}
	recs = append(recs, &kgo.Record{Partition: partition, Key: manifestKey(dc), Value: encodeManifest(&m)})
	if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		return abort(err)
	}
	if err := cl.EndTransaction(ctx, kgo.TryCommit); err != nil {
		return abort(err)
	}
	return m, nil
}
