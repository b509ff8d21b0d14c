package workers

import (
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"slices"

	"github.com/ckf-stream/ckf-stream/ckf"
	"github.com/ckf-stream/ckf-stream/ckf/producer"
	"github.com/ckf-stream/ckf-stream/ckf/workers"
	"github.com/zeebo/xxh3"
)

// Why the read model keeps a lineage of its own.
//
// A checkpoint must hold what the index holds: per source, every external id with its canonical
// hash and the tiers it is held on (workers §2.1). The relay's checkpoint (producer.DcState's) has
// the device tier's lineage only (lower-tier events never reach DcState) and accepts a store only
// when its parent is on the device tier, where workers §3.2 accepts a parent on any tier, so it
// cannot rebuild this index. ckf/workers exports no enumeration of its lineage, so the read model
// mirrors it: after the index accepted an event (Apply returned nil), lineage.apply records the
// same mappings by the same rules (workers §3.2, §3.4, §3.5). The cost is a second copy of the
// lineage (a Go map entry per (source, external id)); an enumerator in ckf/workers would remove it
// (TestLineageMirrorsIndex pins the two together).
//
// Restore needs no export either: a block stored without a parent has the canonical
// ckf.CanonicalRoot(local) = local, so a row (source, external id, canonical c, tiers) is rebuilt
// exactly by one parentless store of one block {external id, local c} per tier (restoreInto).

// lineageEntry is one external id of a source: its canonical hash and the tiers it is held on
// (bit t = producer.StorageTier t).
type lineageEntry struct {
	canon ckf.CanonicalHash
	tiers uint8
}

// lineage mirrors the index's per-source lineage. It belongs to the replica's loop goroutine.
type lineage struct {
	srcs map[ckf.SourceKey]map[ckf.ExternalBlockHash]lineageEntry
	rows int // external ids over all sources
}

func newLineage() *lineage {
	return &lineage{srcs: map[ckf.SourceKey]map[ckf.ExternalBlockHash]lineageEntry{}}
}

// apply records ev, which the index has just accepted (Apply returned nil), by workers §3's rules.
func (l *lineage) apply(ev *producer.RouterEvent) {
	if ev.Residency == producer.ResidencyCacheOwner || int(ev.StorageTier) >= workers.TierCount {
		return // ignored by the index (workers §3.1)
	}
	src, bit := ev.Source(), uint8(1)<<ev.StorageTier
	switch ev.Event.Kind {
	case producer.KvEventStored:
		s := &ev.Event.Stored
		m := l.srcs[src]
		var prev ckf.CanonicalHash
		have := false
		if s.HasParent {
			e, ok := m[s.ParentHash]
			if !ok {
				return // the index refuses such a store; Apply would not have returned nil
			}
			prev, have = e.canon, true
		}
		if m == nil {
			m = map[ckf.ExternalBlockHash]lineageEntry{}
			l.srcs[src] = m
		}
		for _, b := range s.Blocks {
			c := ckf.CanonicalRoot(b.TokensHash)
			if have {
				c = ckf.CanonicalChild(prev, b.TokensHash)
			}
			e, ok := m[b.BlockHash]
			if !ok {
				l.rows++
			}
			m[b.BlockHash] = lineageEntry{canon: c, tiers: e.tiers | bit}
			prev, have = c, true
		}
		if len(m) == 0 {
			delete(l.srcs, src)
		}
	case producer.KvEventRemoved:
		m := l.srcs[src]
		for _, id := range ev.Event.Removed {
			e, ok := m[id]
			if !ok || e.tiers&bit == 0 {
				continue
			}
			if e.tiers &^= bit; e.tiers == 0 {
				delete(m, id)
				l.rows--
			} else {
				m[id] = e
			}
		}
		if m != nil && len(m) == 0 {
			delete(l.srcs, src)
		}
	case producer.KvEventCleared:
		l.rows -= len(l.srcs[src])
		delete(l.srcs, src)
	}
}

// restoreInto applies l to ix, an empty index, as parentless one-block stores (see above).
func (l *lineage) restoreInto(ix interface {
	Apply(producer.RouterEvent) error
}) error {
	ev := producer.RouterEvent{Residency: producer.ResidencyWorker,
		Event: producer.KvCacheEvent{Kind: producer.KvEventStored, Stored: producer.StoreData{Blocks: make([]producer.StoredBlock, 1)}}}
	for src, m := range l.srcs {
		ev.WorkerID, ev.Event.DpRank = src.Worker, src.Rank
		for ext, e := range m {
			ev.Event.Stored.Blocks[0] = producer.StoredBlock{BlockHash: ext, TokensHash: ckf.LocalBlockHash(e.canon)}
			for t := range workers.TierCount {
				if e.tiers&(1<<t) == 0 {
					continue
				}
				ev.StorageTier = producer.StorageTier(t)
				if err := ix.Apply(ev); err != nil {
					return fmt.Errorf("restoring %v external id %#x on tier %v: %w", src, uint64(ext), ev.StorageTier, err)
				}
			}
		}
	}
	return nil
}

// The checkpoint payload, version 1. Integers are little-endian and fixed-width:
//
//	payload = magic:"CKFWLIN1" dc:u64 sources:u64 source* checksum:u64
//	source  = worker:u64 rank:u32 rows:u64 row*      (strictly ascending (worker, rank))
//	row     = external:u64 canonical:u64 tiers:u8    (strictly ascending external; tiers 1..15)
//	checksum = XXH3-64 of everything before it
//
// Equal lineages give equal bytes.
const (
	payloadMagic  = "CKFWLIN1"
	payloadSrcLen = 8 + 4 + 8
	payloadRowLen = 8 + 8 + 1
)

// ErrPayload is matched by every error of decodePayload.
var ErrPayload = errors.New("workers: unusable checkpoint payload")

// appendPayload appends l's payload for dc to dst.
func (l *lineage) appendPayload(dst []byte, dc ckf.DcID) []byte {
	start := len(dst)
	dst = append(dst, payloadMagic...)
	dst = binary.LittleEndian.AppendUint64(dst, uint64(dc))
	dst = binary.LittleEndian.AppendUint64(dst, uint64(len(l.srcs)))
	srcs := slices.SortedFunc(maps.Keys(l.srcs), ckf.SourceKey.Compare)
	var exts []ckf.ExternalBlockHash
	for _, src := range srcs {
		m := l.srcs[src]
		dst = binary.LittleEndian.AppendUint64(dst, uint64(src.Worker))
		dst = binary.LittleEndian.AppendUint32(dst, uint32(src.Rank))
		dst = binary.LittleEndian.AppendUint64(dst, uint64(len(m)))
		exts = slices.AppendSeq(exts[:0], maps.Keys(m))
		slices.Sort(exts)
		for _, ext := range exts {
			e := m[ext]
			dst = binary.LittleEndian.AppendUint64(dst, uint64(ext))
			dst = binary.LittleEndian.AppendUint64(dst, uint64(e.canon))
			dst = append(dst, e.tiers)
		}
	}
	return binary.LittleEndian.AppendUint64(dst, xxh3.Hash(dst[start:]))
}

// decodePayload rebuilds a lineage from a payload written for dc, checking everything the format
// fixes: magic, DC, checksum, lengths, key order, tiers. Errors match ErrPayload.
func decodePayload(b []byte, dc ckf.DcID) (*lineage, error) {
	bad := func(format string, args ...any) (*lineage, error) {
		return nil, fmt.Errorf("%w: %s", ErrPayload, fmt.Sprintf(format, args...))
	}
	const head = len(payloadMagic) + 16
	if len(b) < head+8 {
		return bad("%d bytes, shorter than the header and checksum", len(b))
	}
	if string(b[:len(payloadMagic)]) != payloadMagic {
		return bad("magic %q", b[:len(payloadMagic)])
	}
	body := b[:len(b)-8]
	if got, want := binary.LittleEndian.Uint64(b[len(b)-8:]), xxh3.Hash(body); got != want {
		return bad("checksum %#x, the bytes hash to %#x", got, want)
	}
	if got := ckf.DcID(binary.LittleEndian.Uint64(b[len(payloadMagic):])); got != dc {
		return bad("written for DC %v, this replica is DC %v", got, dc)
	}
	n := binary.LittleEndian.Uint64(b[len(payloadMagic)+8:])
	l := newLineage()
	p := body[head:]
	var last ckf.SourceKey
	for i := uint64(0); i < n; i++ {
		if len(p) < payloadSrcLen {
			return bad("source %d of %d truncated", i, n)
		}
		src := ckf.SourceKey{Worker: ckf.WorkerID(binary.LittleEndian.Uint64(p)), Rank: ckf.DpRank(binary.LittleEndian.Uint32(p[8:]))}
		rows := binary.LittleEndian.Uint64(p[12:])
		p = p[payloadSrcLen:]
		if i > 0 && src.Compare(last) <= 0 {
			return bad("source %v after %v", src, last)
		}
		last = src
		if rows == 0 || rows > uint64(len(p))/payloadRowLen {
			return bad("source %v has %d rows in %d bytes", src, rows, len(p))
		}
		m := make(map[ckf.ExternalBlockHash]lineageEntry, rows)
		var prev ckf.ExternalBlockHash
		for j := uint64(0); j < rows; j++ {
			ext := ckf.ExternalBlockHash(binary.LittleEndian.Uint64(p))
			e := lineageEntry{canon: ckf.CanonicalHash(binary.LittleEndian.Uint64(p[8:])), tiers: p[16]}
			p = p[payloadRowLen:]
			if j > 0 && cmp.Compare(ext, prev) <= 0 {
				return bad("source %v: external id %#x after %#x", src, uint64(ext), uint64(prev))
			}
			if e.tiers == 0 || e.tiers >= 1<<workers.TierCount {
				return bad("source %v: external id %#x has tiers %#x", src, uint64(ext), e.tiers)
			}
			prev = ext
			m[ext] = e
		}
		l.srcs[src] = m
		l.rows += int(rows)
	}
	if len(p) != 0 {
		return bad("%d bytes after the last source", len(p))
	}
	return l, nil
}
