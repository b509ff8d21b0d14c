package relay

import (
	"bytes"
	"context"
	"fmt"
	"slices"

	"github.com/ckf-stream/ckf-stream/streams"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// checkpointReader finds a relay's newest usable checkpoint on its partition of the checkpoint
// topic. Only committed records are read (read_committed), so a checkpoint whose transaction
// aborted, or is still open when the reader lists the end, is never seen. The reader walks back
// from the end in windows that grow fourfold (4, 16, 64, … offsets), because a checkpoint's
// manifest is normally the last data record of the partition: one small read finds it, a second
// one reads its chunks. Manifests are tried newest first; one that fails (damaged record, chunks
// missing, payload hash, the caller's check) is reported through reject and the next older one
// is tried.
type checkpointReader struct {
	adm       *kadm.Client
	opts      []kgo.Opt // connection options of a fresh client per range read
	topic     string
	partition int32
	key       []byte // the pool's key; other pools' records on the partition are skipped
	wait      streams.ListingWait
}

// checkpointRejectFunc reports an unusable checkpoint record or checkpoint: rec is the record
// (the manifest, when the checkpoint as a whole failed), err says why.
type checkpointRejectFunc func(rec *kgo.Record, err error)

// manifestAt is a decoded manifest and its record.
type manifestAt struct {
	m   checkpointManifest
	rec *kgo.Record
}

// latest returns the newest checkpoint that accept takes (accept restores the state from the
// payload and checks it against the relay's configuration), or ok false when the partition holds
// none. Errors are Kafka errors of the listing or of a read (the caller may retry the start).
func (cr *checkpointReader) latest(ctx context.Context, accept func(m *checkpointManifest, payload []byte) error, reject checkpointRejectFunc) (m checkpointManifest, ok bool, err error) {
	start, end, err := cr.bounds(ctx)
	if err != nil {
		return checkpointManifest{}, false, err
	}
	window := int64(4)
	for hi := end; hi > start; window = min(window*4, 1<<20) {
		lo := max(start, hi-window)
		var manifests []manifestAt
		var chunks []*kgo.Record // this window's chunk records, reused when a manifest's chunks lie in it
		err := cr.readRange(ctx, lo, hi, func(rec *kgo.Record) {
			if !bytes.Equal(rec.Key, cr.key) {
				return
			}
			kind, err := checkpointKind(rec.Value)
			switch {
			case err != nil:
				reject(rec, &CheckpointRecordError{Offset: rec.Offset, Reason: err.Error()})
			case kind == checkpointKindChunk:
				chunks = append(chunks, rec)
			default:
				dm, err := decodeCheckpointManifest(rec.Value)
				if err != nil {
					reject(rec, &CheckpointRecordError{Offset: rec.Offset, Reason: err.Error()})
					return
				}
				dm.offset = rec.Offset
				manifests = append(manifests, manifestAt{m: dm, rec: rec})
			}
		})
		if err != nil {
			return checkpointManifest{}, false, err
		}
		for i := len(manifests) - 1; i >= 0; i-- {
			ma := &manifests[i]
			payload, err := cr.load(ctx, &ma.m, lo, chunks)
			if err == nil {
				err = accept(&ma.m, payload)
			}
			if err == nil {
				return ma.m, true, nil
			}
			if ctx.Err() != nil {
				return checkpointManifest{}, false, ctx.Err()
			}
			reject(ma.rec, err)
		}
		hi = lo
	}
	return checkpointManifest{}, false, nil
}

// bounds lists the partition's log start and last stable offset.
func (cr *checkpointReader) bounds(ctx context.Context) (start, end int64, err error) {
	e, err := cr.wait.ListEndOfLog(ctx, cr.adm, cr.topic)
	if err != nil {
		return 0, 0, err
	}
	end, ok := e.End(cr.partition)
	if !ok {
		return 0, 0, fmt.Errorf("streams: relay checkpoints: topic %s has no partition %d", cr.topic, cr.partition)
	}
	return e.Start(cr.partition), end, nil
}

// load assembles m's chunks: from the window's chunk records when the first one is in the
// window (lo), otherwise by reading [first chunk, manifest) again.
func (cr *checkpointReader) load(ctx context.Context, m *checkpointManifest, lo int64, window []*kgo.Record) ([]byte, error) {
	if m.FirstChunkOffset >= m.offset {
		return nil, &CheckpointRecordError{Offset: m.offset, Reason: fmt.Sprintf("first chunk offset %d is not before the manifest", m.FirstChunkOffset)}
	}
	a := newCheckpointAssembly(m)
	var aerr error
	take := func(rec *kgo.Record) {
		if aerr != nil || rec.Offset < m.FirstChunkOffset || rec.Offset >= m.offset || !bytes.Equal(rec.Key, cr.key) {
			return
		}
		if kind, err := checkpointKind(rec.Value); err != nil || kind != checkpointKindChunk {
			return // reported by the scan (or a manifest, not a chunk)
		}
		c, err := decodeCheckpointChunk(rec.Value)
		if err != nil {
			aerr = &CheckpointRecordError{Offset: rec.Offset, Reason: err.Error()}
			return
		}
		aerr = a.add(rec.Offset, c)
	}
	if m.FirstChunkOffset >= lo {
		i, _ := slices.BinarySearchFunc(window, m.FirstChunkOffset, func(r *kgo.Record, o int64) int { return int(r.Offset - o) })
		for _, rec := range window[i:] {
			take(rec)
		}
	} else if err := cr.readRange(ctx, m.FirstChunkOffset, m.offset, take); err != nil {
		return nil, err
	}
	if aerr != nil {
		return nil, aerr
	}
	return a.finish()
}

// readRange reads the committed data records of [lo, hi) with a client of its own and calls fn
// for each, in offset order. The end is exact (endoflog.go): transaction markers count, so the
// read ends at hi even when the range ends with a marker.
func (cr *checkpointReader) readRange(ctx context.Context, lo, hi int64, fn func(*kgo.Record)) error {
	e := streams.NewEndOfLog(cr.topic, map[int32]int64{cr.partition: lo}, map[int32]int64{cr.partition: hi})
	if e.Reached() {
		return nil
	}
	opts := append(slices.Clip(cr.opts), kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{
		cr.topic: {cr.partition: kgo.NewOffset().At(lo)}}))
	cl, err := kgo.NewClient(append(opts, streams.EndOfLogConsumerOpts()...)...)
	if err != nil {
		return &streams.EndOfLogError{Topic: cr.topic, Partition: cr.partition, Op: "fetch", Err: err}
	}
	defer cl.Close()
	return e.ReadToEnd(ctx, cl, fn)
}
