package workers

import (
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/ckf-stream/ckf-stream/ckf"
	"github.com/ckf-stream/ckf-stream/ckf/workers"
	"github.com/zeebo/xxh3"
)

// What a checkpoint holds, and why it is read out of the index.
//
// A checkpoint must hold what the index holds: per source, every external id with its canonical
// hash and the tiers it is held on (workers §2.1). The relay's checkpoint (producer.DcState's) has
// the device tier's lineage only (lower-tier events never reach DcState) and accepts a store only
// when its parent is on the device tier, where workers §3.2 accepts a parent on any tier, so it
// cannot rebuild this index. The index gives its rows (workers §2.2: Index.AppendLineage, in
// ascending external id), and an empty index given them back (Index.RestoreLineage) holds and
// answers exactly what it held. The loop takes the index's lineage snapshot between two polls
// (workers.Index.SnapshotLineage), so no event falls between two sources' rows; the payload is
// encoded from the snapshot on another goroutine while the loop goes on applying.
// A copy of the lineage kept beside the index, as this read model once did, more than doubled
// its heap per membership and its apply time (workers.md, "Checkpoint").

// The checkpoint payload, version 1. Integers are little-endian and fixed-width:
//
//	payload = magic:"CKFWLIN1" dc:u64 sources:u64 source* checksum:u64
//	source  = worker:u64 rank:u32 rows:u64 row*      (strictly ascending (worker, rank))
//	row     = external:u64 canonical:u64 tiers:u8    (strictly ascending external; tiers 1..15)
//	checksum = XXH3-64 of everything before it
//
// Equal indexes give equal bytes.
const (
	payloadMagic  = "CKFWLIN1"
	payloadHead   = len(payloadMagic) + 8 + 8
	payloadSrcLen = 8 + 4 + 8
	payloadRowLen = 8 + 8 + 1
)

// ErrPayload is matched by every error of decodePayload.
var ErrPayload = errors.New("workers: unusable checkpoint payload")

// lineageReader is what appendPayload reads the rows from: a workers.LineageSnapshot (the
// replica's loop), or the index itself.
type lineageReader interface {
	Sources() []ckf.SourceKey
	AppendLineage([]workers.LineageRow, ckf.SourceKey) []workers.LineageRow
}

// appendPayload appends the payload of ix's rows for dc to dst; it returns the extended slice
// and the number of rows written.
func appendPayload(dst []byte, dc ckf.DcID, ix lineageReader) ([]byte, int) {
	start := len(dst)
	srcs := ix.Sources() // in SourceKey order, the payload's
	dst = append(dst, payloadMagic...)
	dst = binary.LittleEndian.AppendUint64(dst, uint64(dc))
	dst = binary.LittleEndian.AppendUint64(dst, uint64(len(srcs)))
	var rows []workers.LineageRow
	total := 0
	for _, src := range srcs {
		rows = ix.AppendLineage(rows[:0], src)
		dst = binary.LittleEndian.AppendUint64(dst, uint64(src.Worker))
		dst = binary.LittleEndian.AppendUint32(dst, uint32(src.Rank))
		dst = binary.LittleEndian.AppendUint64(dst, uint64(len(rows)))
		for _, r := range rows {
			dst = binary.LittleEndian.AppendUint64(dst, uint64(r.ID))
			dst = binary.LittleEndian.AppendUint64(dst, uint64(r.Canonical))
			dst = append(dst, r.Tiers)
		}
		total += len(rows)
	}
	return binary.LittleEndian.AppendUint64(dst, xxh3.Hash(dst[start:])), total
}

// payload is a checkpoint payload that decodePayload checked: it only reads it afterwards.
type payload struct {
	b       []byte // the whole payload, checksum included
	sources int
	rows    int
}

// decodePayload checks a payload written for dc against everything the format fixes: magic, DC,
// checksum, lengths, key order, tiers. It allocates nothing; errors match ErrPayload.
func decodePayload(b []byte, dc ckf.DcID) (payload, error) {
	bad := func(format string, args ...any) (payload, error) {
		return payload{}, fmt.Errorf("%w: %s", ErrPayload, fmt.Sprintf(format, args...))
	}
	if len(b) < payloadHead+8 {
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
	p := body[payloadHead:]
	var last ckf.SourceKey
	total := 0
	for i := uint64(0); i < n; i++ {
		src, rows, rest, ok := payloadSource(p)
		if !ok {
			return bad("source %d of %d truncated", i, n)
		}
		if i > 0 && src.Compare(last) <= 0 {
			return bad("source %v after %v", src, last)
		}
		last = src
		if rows == 0 || rows > uint64(len(rest))/payloadRowLen {
			return bad("source %v has %d rows in %d bytes", src, rows, len(rest))
		}
		var prev ckf.ExternalBlockHash
		for j := uint64(0); j < rows; j++ {
			r := payloadRow(rest[j*payloadRowLen:])
			if j > 0 && cmp.Compare(r.ID, prev) <= 0 {
				return bad("source %v: external id %#x after %#x", src, uint64(r.ID), uint64(prev))
			}
			if r.Tiers == 0 || r.Tiers >= 1<<workers.TierCount {
				return bad("source %v: external id %#x has tiers %#x", src, uint64(r.ID), r.Tiers)
			}
			prev = r.ID
		}
		p = rest[rows*payloadRowLen:]
		total += int(rows)
	}
	if len(p) != 0 {
		return bad("%d bytes after the last source", len(p))
	}
	return payload{b: b, sources: int(n), rows: total}, nil
}

// payloadSource reads a source's header at the start of p: its key, its row count and the bytes
// after the header; ok is false when p is shorter than a header.
func payloadSource(p []byte) (src ckf.SourceKey, rows uint64, rest []byte, ok bool) {
	if len(p) < payloadSrcLen {
		return src, 0, nil, false
	}
	src = ckf.SourceKey{Worker: ckf.WorkerID(binary.LittleEndian.Uint64(p)), Rank: ckf.DpRank(binary.LittleEndian.Uint32(p[8:]))}
	return src, binary.LittleEndian.Uint64(p[12:]), p[payloadSrcLen:], true
}

// payloadRow reads the row at the start of p (at least payloadRowLen bytes).
func payloadRow(p []byte) workers.LineageRow {
	return workers.LineageRow{ID: ckf.ExternalBlockHash(binary.LittleEndian.Uint64(p)),
		Canonical: ckf.CanonicalHash(binary.LittleEndian.Uint64(p[8:])), Tiers: p[16]}
}

// restoreInto applies p's rows to ix, an empty index, one source at a time
// (workers.Index.RestoreLineage). An error names the source and row the index refused.
func (p payload) restoreInto(ix *workers.Index) error {
	rest := p.b[payloadHead : len(p.b)-8]
	var rows []workers.LineageRow
	for range p.sources {
		src, n, after, _ := payloadSource(rest)
		rows = rows[:0]
		for j := range n {
			rows = append(rows, payloadRow(after[j*payloadRowLen:]))
		}
		if err := ix.RestoreLineage(src, rows); err != nil {
			return err
		}
		rest = after[n*payloadRowLen:]
	}
	return nil
}
