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
// partition from its start to the end offset listed now, applies each of the worker's KvEvent
// records to conv (stored blocks held once, removals and clears applied), and returns, per
// rank, the last engine batch written (from the provenance headers). A rank whose last record
// is the clear of an engine restart gets no Resume: the bridge starts that rank afresh from the
// engine's sequence 0. Records without the headers (other producers) change the state but not
// the positions; records that do not decode are skipped (the relay dead-letters them).
//
// Copies beyond the first cannot be read back (only the first store and the last removal are
// written): a block the engine held twice when the previous bridge stopped is held once after
// ReadBack, unless the replay buffer still has the batch that stored it (README.md, "Restart").
func ReadBack(ctx context.Context, opts []kgo.Opt, codec *schemas.Codec, topic string, worker uint64, conv *Converter) (map[uint32]*Resume, error) {
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
	p := WorkerPartition(topic, worker, len(parts))
	end := parts[p].Offset
	resumes := map[uint32]*Resume{}
	if end <= 0 {
		return resumes, nil
	}
	cl, err := kgo.NewClient(append(append([]kgo.Opt(nil), opts...),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: {p: kgo.NewOffset().AtStart()}}))...)
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	key := strconv.AppendUint(nil, worker, 10)
	for {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		var ferr error
		fs.EachError(func(_ string, _ int32, err error) { ferr = err })
		if ferr != nil {
			return nil, fmt.Errorf("reading partition %d: %w", p, ferr)
		}
		done := false
		fs.EachRecord(func(r *kgo.Record) {
			if r.Offset >= end-1 {
				done = true
			}
			if r.Offset >= end || string(r.Key) != string(key) {
				return
			}
			ev, err := codec.DecodeKvEvent(r.Value)
			if err != nil {
				return
			}
			readBackEvent(conv, &ev)
			for _, h := range r.Headers {
				if h.Key == HeaderSeq && len(h.Value) == 8 {
					seq := int64(binary.BigEndian.Uint64(h.Value))
					if seq < 0 {
						delete(resumes, ev.DpRank)
						continue
					}
					res := &Resume{Seq: seq}
					for _, d := range r.Headers {
						if d.Key == HeaderDigest && len(d.Value) == 8 {
							res.Digest = binary.BigEndian.Uint64(d.Value)
						}
					}
					resumes[ev.DpRank] = res
				}
			}
		})
		if done {
			return resumes, nil
		}
	}
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
