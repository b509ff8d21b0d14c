package bridge

import (
	"context"
	"encoding/binary"
	"fmt"
	"strconv"

	"github.com/ckf-stream/ckf-stream/bridge/kvevents"
	"github.com/ckf-stream/ckf-stream/schemas"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// KeyPartitioner is the partitioner the bridge produces with and ReadBack computes the
// worker's partition with: Kafka's murmur2 hash of the key, as every Kafka client does by
// default, so a worker's records share a partition whichever client wrote them.
func KeyPartitioner() kgo.Partitioner { return kgo.StickyKeyPartitioner(nil) }

// WorkerPartition returns the partition of worker's records in a topic of n partitions.
func WorkerPartition(topic string, worker uint64, n int) int32 {
	rec := &kgo.Record{Key: strconv.AppendUint(nil, worker, 10)}
	return int32(KeyPartitioner().ForTopic(topic).Partition(rec, n))
}

// ReadBack rebuilds what a previous bridge of worker wrote to topic: it reads the worker's
// partition from its start to the end offset listed now, applies the worker's KvEvent records to
// conv (stored blocks held once, removals and clears applied), and returns, per rank, the last
// engine batch written whole (from the provenance headers).
//
// Records are grouped by batch (their ckf-bridge-part headers). A batch whose records did not
// all reach Kafka (the previous bridge died between them) is left out, state and position: the
// bridge converts and writes that batch again in full. Writing its first records twice does not
// change the relay's state: the relay applies them again in the same order before the rest, a
// re-stored block is a deduplicated re-offer, a removed block an ignored unknown removal, a
// clear clears the same blocks. A rank whose last batch is the clear of an engine restart gets
// no Resume: the bridge starts that rank afresh from the engine's sequence 0. Records without
// the headers (other producers) change the state but not the positions; records that do not
// decode are skipped (the relay dead-letters them).
//
// Copies beyond the first cannot be read back (only the first store and the last removal are
// written): a block the engine held twice when the previous bridge stopped is held once after
// ReadBack (README.md, "Restart of the bridge").
func ReadBack(ctx context.Context, opts []kgo.Opt, codec *schemas.Codec, topic string, worker uint64, conv *Converter) (map[uint32]*Resume, error) {
	all, err := ReadBackWorkers(ctx, opts, codec, topic, map[uint64]*Converter{worker: conv})
	if err != nil {
		return nil, err
	}
	return all[worker], nil
}

// ReadBackWorkers is ReadBack for several workers in one pass (a Fleet's engines): it reads
// each partition that holds one of the workers' records once, from its start to the end offset
// listed now, and hands every record to its worker's converter. It returns the Resumes per
// worker (a worker without records has an empty map).
func ReadBackWorkers(ctx context.Context, opts []kgo.Opt, codec *schemas.Codec, topic string, convs map[uint64]*Converter) (map[uint64]map[uint32]*Resume, error) {
	adm, err := kgo.NewClient(opts...)
	if err != nil {
		return nil, err
	}
	ends, err := kadm.NewClient(adm).ListEndOffsets(ctx, topic)
	adm.Close()
	if err != nil {
		return nil, fmt.Errorf("listing end offsets: %w", err)
	}
	if err := ends.Error(); err != nil {
		return nil, fmt.Errorf("listing end offsets: %w", err)
	}
	parts := ends[topic]
	if len(parts) == 0 {
		return nil, fmt.Errorf("topic %s has no partitions", topic)
	}
	byKey := map[string]*readBack{}
	out := map[uint64]map[uint32]*Resume{}
	// end per partition to read: the partitions holding a worker's records and not empty.
	endOf := map[int32]int64{}
	for worker, conv := range convs {
		rb := newReadBack(conv)
		byKey[string(strconv.AppendUint(nil, worker, 10))] = rb
		out[worker] = rb.resumes
		p := WorkerPartition(topic, worker, len(parts))
		if end := parts[p].Offset; end > 0 {
			endOf[p] = end
		}
	}
	if len(endOf) == 0 {
		return out, nil
	}
	starts := map[int32]kgo.Offset{}
	for p := range endOf {
		starts[p] = kgo.NewOffset().AtStart()
	}
	cl, err := kgo.NewClient(append(append([]kgo.Opt(nil), opts...),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: starts}))...)
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	for len(endOf) > 0 {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		var ferr error
		fs.EachError(func(_ string, p int32, err error) { ferr = fmt.Errorf("reading partition %d: %w", p, err) })
		if ferr != nil {
			return nil, ferr
		}
		fs.EachRecord(func(r *kgo.Record) {
			end, reading := endOf[r.Partition]
			if !reading || r.Offset >= end {
				return
			}
			if r.Offset >= end-1 {
				delete(endOf, r.Partition)
			}
			rb := byKey[string(r.Key)]
			if rb == nil {
				return // another worker's record
			}
			if ev, err := codec.DecodeKvEvent(r.Value); err == nil {
				rb.record(r.Headers, &ev)
			}
		})
	}
	return out, nil
}

// pendingBatch holds the records of one batch until all of them were read.
type pendingBatch struct {
	resume      Resume
	restart     bool
	lost        bool
	evs         []schemas.KvEvent
	next, count uint32
}

type readBack struct {
	conv    *Converter
	resumes map[uint32]*Resume
	pending map[uint32]*pendingBatch
	// degraded: the rank's last full clear is older than its last clear for lost history.
	degraded map[uint32]bool
}

func newReadBack(conv *Converter) *readBack {
	return &readBack{conv: conv, resumes: map[uint32]*Resume{}, pending: map[uint32]*pendingBatch{}, degraded: map[uint32]bool{}}
}

func (rb *readBack) record(headers []kgo.RecordHeader, ev *schemas.KvEvent) {
	var seq, digest uint64
	var index, count uint32
	var hasSeq, hasPart, lost bool
	for _, h := range headers {
		switch {
		case h.Key == HeaderSeq && len(h.Value) == 8:
			seq, hasSeq = binary.BigEndian.Uint64(h.Value), true
		case h.Key == HeaderDigest && len(h.Value) == 8:
			digest = binary.BigEndian.Uint64(h.Value)
		case h.Key == HeaderPart && len(h.Value) == 8:
			index, count, hasPart = binary.BigEndian.Uint32(h.Value), binary.BigEndian.Uint32(h.Value[4:]), true
		case h.Key == HeaderLost:
			lost = true
		case h.Key == HeaderGroups:
			rb.conv.learnGroupKinds(ev.DpRank, h.Value)
		}
	}
	if !hasSeq || !hasPart {
		readBackEvent(rb.conv, ev)
		return
	}
	pb := rb.pending[ev.DpRank]
	if index == 0 || pb == nil || pb.next != index || pb.count != count {
		// A new batch; a previous one left incomplete was written again in full after it.
		pb = &pendingBatch{resume: Resume{Seq: int64(seq), Digest: digest, Lost: lost}, restart: int64(seq) < 0, lost: lost, count: count}
		rb.pending[ev.DpRank] = pb
	}
	pb.evs = append(pb.evs, *ev)
	pb.next++
	if pb.next < pb.count {
		return
	}
	for i := range pb.evs {
		readBackEvent(rb.conv, &pb.evs[i])
		if pb.evs[i].Kind == schemas.KvClearedEvent {
			rb.degraded[ev.DpRank] = pb.lost
		}
	}
	if pb.restart {
		delete(rb.resumes, ev.DpRank)
	} else {
		res := pb.resume
		res.Degraded = rb.degraded[ev.DpRank]
		rb.resumes[ev.DpRank] = &res
	}
	delete(rb.pending, ev.DpRank)
}
func readBackEvent(conv *Converter, ev *schemas.KvEvent) {
	st := conv.rank(ev.DpRank)
	switch ev.Kind {
	case schemas.KvStoredEvent:
		for _, b := range ev.Stored.Blocks {
			if st.copies[kvevents.BlockHash(b.BlockHash)] == 0 {
				st.copies[kvevents.BlockHash(b.BlockHash)] = 1
			}
		}
	case schemas.KvRemovedEvent:
		for _, h := range ev.Removed.BlockHashes {
			delete(st.copies, kvevents.BlockHash(h))
		}
	case schemas.KvClearedEvent:
		clear(st.copies)
	}
}
