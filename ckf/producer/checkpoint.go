package producer

import (
	"cmp"
	"encoding/binary"
	"fmt"
	"math/bits"
	"slices"
	"sync"

	"github.com/ckf-stream/ckf-stream/ckf"
	"github.com/ckf-stream/ckf-stream/ckf/internal/u64map"
	"github.com/zeebo/xxh3"
)

// String methods of the enums below are generated from the constants' line
// comments, which are the names errors show; run make generate after
// changing a constant.
//go:generate go run golang.org/x/tools/cmd/stringer@v0.52.0 -type=CheckpointErrorKind -linecomment -output=checkpoint_string.go

// Exact-state checkpoints of a DcState.
//
// A checkpoint lets a restarted relay rebuild its producer without
// replaying the whole KV history: it restores the state as of the
// checkpoint and replays only the events after it. The codec here is pure
// (no Kafka); chunking into records is the caller's business.
//
// Format, version 1. Every integer is fixed-width little-endian; fixed
// widths keep encode and decode a straight copy, and the checkpoint of
// 1 M blocks stays near 30 MiB.
//
//	checkpoint   = header payload checksum
//	header       = magic:"CKFPCKPT" version:u32(=1) payload_len:u64
//	checksum     = u64 XXH3-64 (seed 0) of header and payload
//	payload      = config format rng:u64 resident_count:u64 contributions:u64
//	               telemetry window words sources owners
//	config       = expected_blocks:u64 seed:u64 max_kicks:u64
//	               verification_window:u64 publish_every_n_events:u64
//	format       = format_version:u16 seed:u64 bucket_count:u64
//	               fingerprint_bits:u8 slots_per_bucket:u8
//	telemetry    = unknown_removals:u64 parent_not_found:u64
//	               capacity_failures:u64 physical_touches:u64
//	               distinct_touched_buckets:u64 emitted_images:u64
//	               net_reverted_buckets:u64 unrotated_cycles:u64
//	window       = pending_events:u64 materialize:u8(0|1)
//	words        = bucket_count × u64, in bucket order
//	sources      = count:u64 source*     (strictly ascending (worker, rank))
//	source       = worker:u64 rank:u32 count:u64 mapping*
//	mapping      = external:u64 canonical:u64   (strictly ascending external)
//	owners       = count:u64 owner*      (strictly ascending canonical)
//	owner        = canonical:u64 owners:u32 resident:u8(0|1)
//
// Every map is written in key order, so equal states give equal bytes
// whatever their map iteration order. The payload ends exactly at the
// checksum: nothing may follow the last owner.

// CheckpointVersion is the checkpoint format version AppendCheckpoint
// writes and the only one RestoreDcState reads.
const CheckpointVersion uint32 = 1

const (
	checkpointMagic      = "CKFPCKPT"
	checkpointHeaderLen  = len(checkpointMagic) + 4 + 8
	checkpointTrailerLen = 8
	// Fixed part of the payload: config (5×8), format (2+8+8+1+1), rng,
	// resident count, contributions (3×8), telemetry (8×8), window (8+1).
	checkpointFixedLen   = 5*8 + 20 + 3*8 + 8*8 + 9
	checkpointSourceLen  = 8 + 4 + 8 // worker, rank, mapping count
	checkpointMappingLen = 8 + 8
	checkpointOwnerLen   = 8 + 4 + 1
)

// CheckpointErrorKind says why a checkpoint could not be written or
// restored.
type CheckpointErrorKind uint8

const (
	// CheckpointTruncated: the input ends before the length its header
	// announces (or before a whole header).
	CheckpointTruncated CheckpointErrorKind = iota + 1 // truncated
	// CheckpointBadMagic: the input does not start with the checkpoint
	// magic; it is not a checkpoint.
	CheckpointBadMagic // bad magic
	// CheckpointUnsupportedVersion: the header names a format version this
	// build cannot read (checked before the checksum, which a later
	// version may define differently).
	CheckpointUnsupportedVersion // unsupported version
	// CheckpointChecksumMismatch: the payload is corrupt; nothing of it
	// was used.
	CheckpointChecksumMismatch // checksum mismatch
	// CheckpointConfigMismatch: the checkpoint was built under a different
	// configuration or filter layout than the one restoring it.
	CheckpointConfigMismatch // config mismatch
	// CheckpointMalformed: the payload passed its checksum but does not
	// parse (a count beyond the bytes left, a flag other than 0 or 1, keys
	// out of order, bytes after the last section). Only a faulty encoder
	// produces this.
	CheckpointMalformed // malformed
	// CheckpointInconsistent: the payload parses but violates a DcState
	// invariant (see RestoreDcState). Only a faulty encoder produces this.
	CheckpointInconsistent // inconsistent
	// CheckpointWindowOpen: AppendCheckpoint was called while dirty buckets
	// await a drain; checkpoint after a publication boundary.
	CheckpointWindowOpen // publication window open
)

// CheckpointError is the error of AppendCheckpoint and RestoreDcState.
// errors.Is matches any *CheckpointError of the same Kind (Detail
// ignored), so the Err* sentinels below work with errors.Is.
type CheckpointError struct {
	Kind   CheckpointErrorKind
	Detail string
}

// Error implements error.
func (e *CheckpointError) Error() string {
	if e.Detail != "" {
		return "ckf: checkpoint " + e.Kind.String() + ": " + e.Detail
	}
	return "ckf: checkpoint " + e.Kind.String()
}

// Is matches a *CheckpointError of the same kind.
func (e *CheckpointError) Is(target error) bool {
	t, ok := target.(*CheckpointError)
	return ok && t.Kind == e.Kind
}

// Sentinels for errors.Is against CheckpointErrorKind.
var (
	ErrCheckpointTruncated          error = &CheckpointError{Kind: CheckpointTruncated}
	ErrCheckpointBadMagic           error = &CheckpointError{Kind: CheckpointBadMagic}
	ErrCheckpointUnsupportedVersion error = &CheckpointError{Kind: CheckpointUnsupportedVersion}
	ErrCheckpointChecksumMismatch   error = &CheckpointError{Kind: CheckpointChecksumMismatch}
	ErrCheckpointConfigMismatch     error = &CheckpointError{Kind: CheckpointConfigMismatch}
	ErrCheckpointMalformed          error = &CheckpointError{Kind: CheckpointMalformed}
	ErrCheckpointInconsistent       error = &CheckpointError{Kind: CheckpointInconsistent}
	ErrCheckpointWindowOpen         error = &CheckpointError{Kind: CheckpointWindowOpen}
)

func checkpointErr(k CheckpointErrorKind, format string, args ...any) *CheckpointError {
	return &CheckpointError{Kind: k, Detail: fmt.Sprintf(format, args...)}
}

// AppendCheckpoint appends the checkpoint of the whole exact state to dst
// and returns the extended slice: the configuration and filter layout it
// was built with, the relocation RNG, the resident and contribution
// counts, the telemetry, the window's pending-event count and
// materialization flag, the bucket words, the lineage and the ownership
// map (format in the comment at the top of checkpoint.go). The same state
// always yields the same bytes.
//
// It requires an empty dirty list: while buckets await a drain it returns
// ErrCheckpointWindowOpen (a *CheckpointError) and dst unchanged, so
// callers checkpoint right after a publication boundary, a Flush or a
// barrier snapshot. A non-zero pending-event count with no dirty bucket
// (events that changed nothing physical under a cadence above 1) is
// allowed and carried over. The delegate, the test hooks and the capacity
// of the window's scratch lists are not state and are not written.
//
// Cost: linear in bucket_count + mappings + owner entries (the rows are
// put in key order by a radix sort); besides dst, which grows at most
// once, two scratch slices of 16 bytes per row of the largest of the
// owner map and each source's lineage. At 1 M resident blocks the
// checkpoint is about 32 MB (see BenchmarkCheckpointEncode).
func (s *DcState) AppendCheckpoint(dst []byte) ([]byte, error) {
	if n := len(s.win.dirty); n != 0 {
		return dst, checkpointErr(CheckpointWindowOpen, "%d dirty buckets await a drain", n)
	}
	maxSource, mappings := 0, 0
	for _, lin := range s.lineage {
		maxSource = max(maxSource, lin.Len())
		mappings += lin.Len()
	}
	payloadLen := checkpointFixedLen + 8*len(s.filter.words) +
		8 + checkpointSourceLen*len(s.lineage) + checkpointMappingLen*mappings +
		8 + checkpointOwnerLen*s.owners.Len()
	start := len(dst)
	dst = slices.Grow(dst, checkpointHeaderLen+payloadLen+checkpointTrailerLen)
	le := binary.LittleEndian

	dst = append(dst, checkpointMagic...)
	dst = le.AppendUint32(dst, CheckpointVersion)
	dst = le.AppendUint64(dst, uint64(payloadLen))

	c := s.cfg
	for _, v := range [...]uint64{c.ExpectedBlocksPerDC, c.Seed, c.MaxKicks, c.VerificationWindow, c.PublishEveryNEvents} {
		dst = le.AppendUint64(dst, v)
	}
	f := s.format
	dst = le.AppendUint16(dst, f.Version)
	dst = le.AppendUint64(dst, f.Seed)
	dst = le.AppendUint64(dst, f.BucketCount)
	dst = append(dst, f.FingerprintBits, f.SlotsPerBucket)
	dst = le.AppendUint64(dst, s.filter.rng.State)
	dst = le.AppendUint64(dst, s.residentCount)
	dst = le.AppendUint64(dst, s.contributions)
	t := s.tel
	for _, v := range [...]uint64{t.UnknownRemovals, t.ParentNotFound, t.CapacityFailures, t.PhysicalTouches,
		t.DistinctTouchedBuckets, t.EmittedImages, t.NetRevertedBuckets, t.UnrotatedCycles} {
		dst = le.AppendUint64(dst, v)
	}
	dst = le.AppendUint64(dst, s.win.pending)
	dst = append(dst, boolByte(s.win.materialize))
	for _, w := range s.filter.words {
		dst = le.AppendUint64(dst, w)
	}

	// One scratch pair per mapping of the largest source or per owner
	// entry, whichever is more, shared by every sort below.
	rows := make([]keyedPair, 0, max(maxSource, s.owners.Len()))
	scratch := make([]keyedPair, cap(rows))
	dst = le.AppendUint64(dst, uint64(len(s.lineage)))
	for _, k := range s.sortedSources() {
		rows = rows[:0]
		for e, c := range s.lineage[k].All() {
			rows = append(rows, keyedPair{key: uint64(e), val: uint64(c)})
		}
		radixSortPairs(rows, scratch)
		dst = le.AppendUint64(dst, uint64(k.Worker))
		dst = le.AppendUint32(dst, uint32(k.Rank))
		dst = le.AppendUint64(dst, uint64(len(rows)))
		for _, m := range rows {
			dst = le.AppendUint64(dst, m.key)
			dst = le.AppendUint64(dst, m.val)
		}
	}

	rows = rows[:0]
	for c, e := range s.owners.All() {
		rows = append(rows, keyedPair{key: uint64(c), val: uint64(e.owners()) | uint64(boolByte(e.resident))<<32})
	}
	radixSortPairs(rows, scratch)
	dst = le.AppendUint64(dst, uint64(len(rows)))
	for _, r := range rows {
		dst = le.AppendUint64(dst, r.key)
		dst = le.AppendUint32(dst, uint32(r.val))
		dst = append(dst, byte(r.val>>32))
	}

	return le.AppendUint64(dst, xxh3.Hash(dst[start:])), nil
}

func boolByte(b bool) byte {
	if b {
		return 1
	}
	return 0
}

// RestoreDcState rebuilds the DcState a checkpoint was taken from: the
// same words, RNG, lineage, ownership, counts, telemetry, pending-event
// count and materialization flag, so it behaves byte for byte like the
// state that was encoded on every later event. It has no delegate (see
// RestoreDcStateWithDelegate).
//
// Checks, in order, each failing with a *CheckpointError (sentinel
// ErrCheckpoint<Kind>): the header is whole (Truncated), the magic
// (BadMagic), the version (UnsupportedVersion), the announced length
// (Truncated when short, Malformed when bytes follow the checksum), the
// checksum (ChecksumMismatch), then config and format equal to cfg's
// (ConfigMismatch: every CkfConfig field must match, not only those that
// shape the filter, so a checkpoint is never silently reinterpreted), and,
// as the payload is read, its structure (Malformed) and the DcState
// invariants (Inconsistent):
//
//   - every source has at least one mapping, and the mappings number
//     exactly contributions;
//   - owners(c) == the number of mappings to c for every canonical c, every
//     owner entry has owners > 0 and every mapped canonical has an entry;
//   - residentCount == the number of resident entries == the number of
//     occupied slots in the words;
//   - every resident canonical's fingerprint is in one of its two buckets
//     (Contains);
//   - pending events < publish_every_n_events (a state at or past its
//     cadence would already have drained).
//
// An invalid cfg returns its *ckf.BuildError. Bad input never panics and
// never allocates more than the input's size justifies: every count is
// bounded by the bytes left before anything is allocated for it. Nothing is
// returned on error, so a failed restore cannot leave a half-built state
// behind; the caller falls back to a full replay.
//
// Cost: linear in the input. The maps are pre-sized from the counts, so
// decoding allocates per source and per map table, never per mapping; the
// mapped canonicals are radix-sorted in a temporary slice (16 bytes per
// mapping) for the ownership check. The owner map is filled on a second
// goroutine while the calling one fills the lineage and validates; the
// call returns only after both finish (see BenchmarkCheckpointDecode).
func RestoreDcState(cfg ckf.CkfConfig, b []byte) (*DcState, error) {
	return restoreDcState(cfg, b)
}

// RestoreDcStateWithDelegate is RestoreDcState with a delegate (nil =
// none). After a successful restore it calls d.OnCreate once for every
// owned canonical in ascending order, so a fresh delegate ends up with the
// same set it would have built by observing the whole history; on error it
// calls nothing.
func RestoreDcStateWithDelegate(cfg ckf.CkfConfig, b []byte, d CanonicalDelegate) (*DcState, error) {
	s, err := restoreDcState(cfg, b)
	if err != nil || d == nil {
		return s, err
	}
	s.delegate = d
	for _, c := range sortedCanonicalKeys(&s.owners) {
		d.OnCreate(c)
	}
	return s, nil
}

func sortedCanonicalKeys(m *ownerMap) []ckf.CanonicalHash {
	out := slices.AppendSeq(make([]ckf.CanonicalHash, 0, m.Len()), m.Keys())
	slices.Sort(out)
	return out
}

// openCheckpoint checks the envelope (header, length, checksum) and
// returns the payload.
func openCheckpoint(b []byte) ([]byte, error) {
	if len(b) < checkpointHeaderLen {
		return nil, checkpointErr(CheckpointTruncated, "%d bytes, header needs %d", len(b), checkpointHeaderLen)
	}
	if string(b[:len(checkpointMagic)]) != checkpointMagic {
		return nil, checkpointErr(CheckpointBadMagic, "%q", b[:len(checkpointMagic)])
	}
	le := binary.LittleEndian
	if v := le.Uint32(b[len(checkpointMagic):]); v != CheckpointVersion {
		return nil, checkpointErr(CheckpointUnsupportedVersion, "version %d, this build reads %d", v, CheckpointVersion)
	}
	payloadLen := le.Uint64(b[len(checkpointMagic)+4:])
	rest := uint64(len(b) - checkpointHeaderLen)
	if payloadLen > rest || rest-payloadLen < checkpointTrailerLen {
		return nil, checkpointErr(CheckpointTruncated, "payload of %d bytes announced, %d bytes follow the header", payloadLen, rest)
	}
	if extra := rest - payloadLen - checkpointTrailerLen; extra != 0 {
		return nil, checkpointErr(CheckpointMalformed, "%d bytes after the checksum", extra)
	}
	end := checkpointHeaderLen + int(payloadLen)
	if want, got := le.Uint64(b[end:]), xxh3.Hash(b[:end]); want != got {
		return nil, checkpointErr(CheckpointChecksumMismatch, "stored %#016x, computed %#016x", want, got)
	}
	return b[checkpointHeaderLen:end], nil
}

// ckptReader reads little-endian integers from a payload. Reads past the
// end return zero and set short; callers check remaining() before bulk
// reads and short after fixed ones.
type ckptReader struct {
	b     []byte
	short bool
}

func (r *ckptReader) remaining() uint64 { return uint64(len(r.b)) }

func (r *ckptReader) take(n int) []byte {
	if len(r.b) < n {
		r.short, r.b = true, nil
		return make([]byte, n)
	}
	p := r.b[:n]
	r.b = r.b[n:]
	return p
}

func (r *ckptReader) u8() uint8   { return r.take(1)[0] }
func (r *ckptReader) u16() uint16 { return binary.LittleEndian.Uint16(r.take(2)) }
func (r *ckptReader) u32() uint32 { return binary.LittleEndian.Uint32(r.take(4)) }
func (r *ckptReader) u64() uint64 { return binary.LittleEndian.Uint64(r.take(8)) }

func (r *ckptReader) flag(name string) (bool, error) {
	switch v := r.u8(); v {
	case 0:
		return false, nil
	case 1:
		return true, nil
	default:
		return false, checkpointErr(CheckpointMalformed, "%s flag is %d", name, v)
	}
}

func restoreDcState(cfg ckf.CkfConfig, b []byte) (*DcState, error) {
	format, err := cfg.Format()
	if err != nil {
		return nil, err
	}
	payload, err := openCheckpoint(b)
	if err != nil {
		return nil, err
	}
	r := &ckptReader{b: payload}
	if r.remaining() < checkpointFixedLen {
		return nil, checkpointErr(CheckpointMalformed, "payload of %d bytes, fixed part needs %d", r.remaining(), checkpointFixedLen)
	}
	if err := checkCheckpointConfig(r, cfg, format); err != nil {
		return nil, err
	}
	rng := r.u64()
	residentCount := r.u64()
	contributions := r.u64()
	var tel Telemetry
	for _, p := range [...]*uint64{&tel.UnknownRemovals, &tel.ParentNotFound, &tel.CapacityFailures, &tel.PhysicalTouches,
		&tel.DistinctTouchedBuckets, &tel.EmittedImages, &tel.NetRevertedBuckets, &tel.UnrotatedCycles} {
		*p = r.u64()
	}
	pending := r.u64()
	materialize, err := r.flag("materialize")
	if err != nil {
		return nil, err
	}
	if pending >= cfg.PublishEveryNEvents {
		return nil, checkpointErr(CheckpointInconsistent, "%d pending events at a cadence of %d", pending, cfg.PublishEveryNEvents)
	}
	n := format.BucketCount
	if n > r.remaining()/8 {
		return nil, checkpointErr(CheckpointMalformed, "%d bucket words, %d bytes left", n, r.remaining())
	}

	s, err := NewDcState(cfg)
	if err != nil {
		return nil, err
	}
	words := s.filter.words
	raw := r.take(int(8 * n))
	for i := range words {
		words[i] = binary.LittleEndian.Uint64(raw[8*i:])
	}
	s.filter.rng.State = rng
	s.residentCount = residentCount
	s.contributions = contributions
	s.tel = tel
	s.win.pending = pending
	s.win.materialize = materialize

	sections, err := scanCheckpointSections(r, s.contributions)
	if err != nil {
		return nil, err
	}
	// The two maps are the bulk of the work and independent: the owner map
	// is filled on a second goroutine while this one fills the lineage and
	// validates everything (including the owner rows the other goroutine
	// reads). Its result is used only if validation passes.
	var owners *ownerMap
	var wg sync.WaitGroup
	wg.Go(func() { owners = fillCheckpointOwners(sections.owners) })
	lineage, err := restoreCheckpointLineage(s, sections)
	wg.Wait()
	if err != nil {
		return nil, err
	}
	s.lineage, s.owners = lineage, *owners
	var empty uint64
	for _, w := range words {
		empty += uint64(bits.OnesCount64(ckf.ZeroLanes16(w)))
	}
	if slots := 4*n - empty; slots != residentCount {
		return nil, checkpointErr(CheckpointInconsistent, "%d occupied slots, resident count %d", slots, residentCount)
	}
	return s, nil
}

// checkCheckpointConfig reads the config and format sections and compares
// them with the restoring configuration.
func checkCheckpointConfig(r *ckptReader, cfg ckf.CkfConfig, format ckf.FormatIdentity) error {
	mismatch := func(field string, got, want uint64) error {
		return checkpointErr(CheckpointConfigMismatch, "%s: checkpoint %d, config %d", field, got, want)
	}
	for _, f := range [...]struct {
		name string
		want uint64
	}{
		{"expected_blocks_per_dc", cfg.ExpectedBlocksPerDC},
		{"seed", cfg.Seed},
		{"max_kicks", cfg.MaxKicks},
		{"verification_window", cfg.VerificationWindow},
		{"publish_every_n_events", cfg.PublishEveryNEvents},
	} {
		if got := r.u64(); got != f.want {
			return mismatch(f.name, got, f.want)
		}
	}
	got := ckf.FormatIdentity{Version: r.u16(), Seed: r.u64(), BucketCount: r.u64(), FingerprintBits: r.u8(), SlotsPerBucket: r.u8()}
	if got != format {
		return checkpointErr(CheckpointConfigMismatch, "format: checkpoint %+v, config %+v", got, format)
	}
	return nil
}

// checkpointSource is one source of the sources section: its key and its
// mapping rows.
type checkpointSource struct {
	key  ckf.SourceKey
	rows []byte // count × (external, canonical)
}

// checkpointSections are the variable-length sections, located and with
// every count checked, not yet decoded.
type checkpointSections struct {
	sources []checkpointSource
	owners  []byte // count × (canonical, owners, resident)
}

// scanCheckpointSections walks the source headers and the owner count:
// every count must fit in the bytes left, sources must ascend and be
// non-empty, the mappings must number contributions, and the owner rows
// must end the payload exactly. It allocates one entry per source.
func scanCheckpointSections(r *ckptReader, contributions uint64) (checkpointSections, error) {
	var sec checkpointSections
	nSources := r.u64()
	if r.short || nSources > r.remaining()/checkpointSourceLen {
		return sec, checkpointErr(CheckpointMalformed, "%d sources, %d bytes left", nSources, r.remaining())
	}
	if contributions > r.remaining()/checkpointMappingLen {
		return sec, checkpointErr(CheckpointMalformed, "%d contributions, %d bytes left", contributions, r.remaining())
	}
	sec.sources = make([]checkpointSource, 0, nSources)
	var mappings uint64
	for i := uint64(0); i < nSources; i++ {
		if r.remaining() < checkpointSourceLen {
			return sec, checkpointErr(CheckpointMalformed, "source %d: %d bytes left", i, r.remaining())
		}
		k := ckf.SourceKey{Worker: ckf.WorkerID(r.u64()), Rank: ckf.DpRank(r.u32())}
		n := r.u64()
		if i > 0 && sec.sources[i-1].key.Compare(k) >= 0 {
			return sec, checkpointErr(CheckpointMalformed, "source %v after %v", k, sec.sources[i-1].key)
		}
		if n == 0 {
			return sec, checkpointErr(CheckpointInconsistent, "source %v has no mappings", k)
		}
		if n > r.remaining()/checkpointMappingLen {
			return sec, checkpointErr(CheckpointMalformed, "source %v: %d mappings, %d bytes left", k, n, r.remaining())
		}
		if n > contributions-mappings {
			return sec, checkpointErr(CheckpointInconsistent, "more mappings than the %d contributions", contributions)
		}
		mappings += n
		sec.sources = append(sec.sources, checkpointSource{key: k, rows: r.take(int(n * checkpointMappingLen))})
	}
	if mappings != contributions {
		return sec, checkpointErr(CheckpointInconsistent, "%d mappings, %d contributions", mappings, contributions)
	}
	nOwners := r.u64()
	if r.short || nOwners > r.remaining()/checkpointOwnerLen {
		return sec, checkpointErr(CheckpointMalformed, "%d owner entries, %d bytes left", nOwners, r.remaining())
	}
	if extra := r.remaining() - nOwners*checkpointOwnerLen; extra != 0 {
		return sec, checkpointErr(CheckpointMalformed, "%d bytes after the owner entries", extra)
	}
	sec.owners = r.take(int(nOwners * checkpointOwnerLen))
	return sec, nil
}

// fillCheckpointOwners builds the owner map from the owner rows without
// checking them (restoreCheckpointLineage does, and its verdict decides
// whether the map is used).
func fillCheckpointOwners(rows []byte) *ownerMap {
	n := len(rows) / checkpointOwnerLen
	owners := u64map.New[ckf.CanonicalHash, ownerEntry](n)
	for i := 0; i < n; i++ {
		row := rows[checkpointOwnerLen*i : checkpointOwnerLen*(i+1)]
		owners.Put(ckf.CanonicalHash(binary.LittleEndian.Uint64(row)), newOwnerEntry(binary.LittleEndian.Uint32(row[8:]), row[12] == 1))
	}
	return owners
}

// restoreCheckpointLineage builds the lineage maps and validates the owner
// rows against them: externals ascend within a source; owner rows ascend,
// carry a 0/1 resident flag and owners equal to the number of mappings to
// their canonical (the mapped canonicals are sorted and merged with the
// rows, rather than counted in a second map); every mapped canonical has a
// row; every resident canonical's fingerprint is in one of its buckets;
// resident rows number s.residentCount.
func restoreCheckpointLineage(s *DcState, sec checkpointSections) (map[ckf.SourceKey]*lineageMap, error) {
	le := binary.LittleEndian
	lineage := make(map[ckf.SourceKey]*lineageMap, len(sec.sources))
	canonicals := make([]ckf.CanonicalHash, 0, s.contributions)
	for _, src := range sec.sources {
		n := len(src.rows) / checkpointMappingLen
		lin := u64map.New[ckf.ExternalBlockHash, ckf.CanonicalHash](n)
		var prev ckf.ExternalBlockHash
		for j := 0; j < n; j++ {
			e := ckf.ExternalBlockHash(le.Uint64(src.rows[16*j:]))
			c := ckf.CanonicalHash(le.Uint64(src.rows[16*j+8:]))
			if j > 0 && e <= prev {
				return nil, checkpointErr(CheckpointMalformed, "source %v: external %#x after %#x", src.key, uint64(e), uint64(prev))
			}
			prev = e
			lin.Put(e, c)
			canonicals = append(canonicals, c)
		}
		lineage[src.key] = lin
	}
	radixSortHashes(canonicals, make([]ckf.CanonicalHash, len(canonicals)))

	rows := sec.owners
	next := 0 // first canonical in canonicals not yet matched to a row
	var resident uint64
	var prev ckf.CanonicalHash
	for i := 0; i < len(rows)/checkpointOwnerLen; i++ {
		row := rows[checkpointOwnerLen*i : checkpointOwnerLen*(i+1)]
		c := ckf.CanonicalHash(le.Uint64(row))
		owners := le.Uint32(row[8:])
		if i > 0 && c <= prev {
			return nil, checkpointErr(CheckpointMalformed, "owner %#x after %#x", uint64(c), uint64(prev))
		}
		prev = c
		if row[12] > 1 {
			return nil, checkpointErr(CheckpointMalformed, "owner %#x resident flag is %d", uint64(c), row[12])
		}
		if next < len(canonicals) && canonicals[next] < c {
			return nil, checkpointErr(CheckpointInconsistent, "mapped canonical %#x has no owner entry", uint64(canonicals[next]))
		}
		run := next
		for run < len(canonicals) && canonicals[run] == c {
			run++
		}
		if mappings := run - next; owners == 0 || uint64(owners) != uint64(mappings) {
			return nil, checkpointErr(CheckpointInconsistent, "canonical %#x: %d owners, %d mappings", uint64(c), owners, mappings)
		}
		next = run
		if row[12] == 1 {
			resident++
			if !s.filter.Contains(uint64(c)) {
				return nil, checkpointErr(CheckpointInconsistent, "resident canonical %#x is in neither bucket", uint64(c))
			}
		}
	}
	if next != len(canonicals) {
		return nil, checkpointErr(CheckpointInconsistent, "mapped canonical %#x has no owner entry", uint64(canonicals[next]))
	}
	if resident != s.residentCount {
		return nil, checkpointErr(CheckpointInconsistent, "%d resident entries, resident count %d", resident, s.residentCount)
	}
	return lineage, nil
}

// keyedPair is one row to be written in key order: a mapping (external,
// canonical) or an owner entry (canonical, owners | resident<<32).
type keyedPair struct{ key, val uint64 }

// radixSortPairs sorts p by key (keys are unique in every use here) with
// an LSD radix sort over the eight key bytes, skipping a byte on which all
// keys agree; scratch must hold len(p) pairs. A comparison sort of the
// 1 M owner entries of a large state took most of AppendCheckpoint's time;
// this is a linear pass per byte. Short inputs use a comparison sort.
func radixSortPairs(p, scratch []keyedPair) {
	if len(p) < 256 {
		slices.SortFunc(p, func(a, b keyedPair) int { return cmp.Compare(a.key, b.key) })
		return
	}
	var counts [8][256]int
	for _, x := range p {
		k := x.key
		for d := range counts {
			counts[d][byte(k>>(8*d))]++
		}
	}
	src, dst := p, scratch[:len(p)]
	for d := range counts {
		c := &counts[d]
		if c[byte(src[0].key>>(8*d))] == len(p) {
			continue
		}
		offs := digitOffsets(c)
		shift := uint(8 * d)
		for _, x := range src {
			b := byte(x.key >> shift)
			dst[offs[b]] = x
			offs[b]++
		}
		src, dst = dst, src
	}
	if &src[0] != &p[0] {
		copy(p, src)
	}
}

// digitOffsets is where each byte value's run starts in one radix pass: the prefix sums of the
// pass's counts.
func digitOffsets(c *[256]int) (offs [256]int) {
	sum := 0
	for i, n := range c {
		offs[i] = sum
		sum += n
	}
	return offs
}

// radixSortHashes is radixSortPairs for bare canonical hashes.
func radixSortHashes(p, scratch []ckf.CanonicalHash) {
	if len(p) < 256 {
		slices.Sort(p)
		return
	}
	var counts [8][256]int
	for _, k := range p {
		for d := range counts {
			counts[d][byte(k>>(8*d))]++
		}
	}
	src, dst := p, scratch[:len(p)]
	for d := range counts {
		c := &counts[d]
		if c[byte(src[0]>>(8*d))] == len(p) {
			continue
		}
		offs := digitOffsets(c)
		shift := uint(8 * d)
		for _, k := range src {
			b := byte(k >> shift)
			dst[offs[b]] = k
			offs[b]++
		}
		src, dst = dst, src
	}
	if &src[0] != &p[0] {
		copy(p, src)
	}
}
