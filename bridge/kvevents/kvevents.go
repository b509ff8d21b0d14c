// Package kvevents decodes the KV-cache event batches that vLLM and SGLang publish over ZeroMQ
// (msgpack, as their msgspec structs encode them). It is pure: no sockets, no Kafka.
//
// The wire format, as the engines define it (see bridge/README.md for the sources):
//
//   - A batch is EventBatch{ts float, events list, data_parallel_rank int|None}. Older vLLM and
//     SGLang encode it as a positional array ([ts, events] or [ts, events, rank]); recent vLLM
//     as a map keyed by field name. Fields left at their default are omitted (omit_defaults).
//   - An event is a tagged struct: in array form its first element is the tag (the class name
//     "BlockStored", "BlockRemoved" or "AllBlocksCleared") and the fields follow in declaration
//     order; in map form the tag is the value of the key "type".
//   - BlockStored: block_hashes, parent_block_hash, token_ids, block_size, lora_id, then (newer
//     vLLM) medium, lora_name, extra_keys, group_idx, kv_cache_spec_kind,
//     kv_cache_spec_sliding_window. SGLang sends the first five only.
//   - BlockRemoved: block_hashes, then (newer vLLM) medium, group_idx.
//   - Block hashes are integers in older versions (signed 64-bit from Python's hash, or unsigned)
//     and bytes (a 32-byte SHA-256 digest) in recent ones.
//
// Fields this package does not know (added by later engine versions) are skipped in both
// forms, so a newer engine still decodes. BlockStored's extra_keys (vLLM: one entry per block,
// None or a tuple of the values the engine mixed into that block's hash) is decoded into
// ckf.ExtraKeys: nil, bool, integers, floats, strings, bytes and nested arrays up to
// ckf.MaxExtraDepth; a map or extension value, deeper nesting, or a list whose length is not
// the number of block hashes is malformed. SGLang's cache salt of a salted store (the metadata
// map of 0.5.18 and 0.5.19, the cache_salt key or metadata map of later releases) is decoded
// into Event.CacheSalt: a string or null, anything else malformed. Anything else (a tag this
// package does not know, a field of the wrong type, trailing bytes) is a *DecodeError matching
// ErrMalformed or ErrUnknownEvent: the caller dead-letters the raw bytes.
package kvevents

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"

	"github.com/ckf-stream/ckf-stream/ckf"
	"github.com/vmihailenco/msgpack/v5"
	"github.com/vmihailenco/msgpack/v5/msgpcode"
	"github.com/zeebo/xxh3"
)

// Sentinels; every decoding error is a *DecodeError wrapping one of them.
var (
	// ErrMalformed: the bytes are not a msgpack batch of the engines' shape (wrong types,
	// missing required fields, truncated input, trailing bytes, out-of-range values).
	ErrMalformed = errors.New("kvevents: malformed batch")
	// ErrUnknownEvent: an event carries a tag this build does not know.
	ErrUnknownEvent = errors.New("kvevents: unknown event type")
)

// DecodeError says what could not be decoded and where.
type DecodeError struct {
	// Kind is ErrMalformed or ErrUnknownEvent.
	Kind error
	// Path locates the offending value, for example "events[3].token_ids[7]".
	Path string
	// Detail says what was wrong.
	Detail string
	// Err is the msgpack library's error, when there is one.
	Err error
}

func (e *DecodeError) Error() string {
	s := e.Kind.Error()
	if e.Path != "" {
		s += " at " + e.Path
	}
	if e.Detail != "" {
		s += ": " + e.Detail
	}
	if e.Err != nil {
		s += ": " + e.Err.Error()
	}
	return s
}

// Unwrap returns the kind and the cause, so errors.Is matches both.
func (e *DecodeError) Unwrap() []error {
	if e.Err != nil {
		return []error{e.Kind, e.Err}
	}
	return []error{e.Kind}
}

// Kind says which event an Event is.
type Kind uint8

// Event kinds.
const (
	KindStored Kind = iota + 1
	KindRemoved
	KindCleared
)

func (k Kind) String() string {
	switch k {
	case KindStored:
		return "stored"
	case KindRemoved:
		return "removed"
	case KindCleared:
		return "cleared"
	}
	return fmt.Sprintf("Kind(%d)", uint8(k))
}

// BlockHash is an engine block hash reduced to 64 bits: an integer hash is its two's-complement
// bit pattern; a bytes hash (any length) is XXH3-64 of the bytes with seed 0. The value is only
// ever compared with other hashes of the same engine (removals, parents), so the reduction just
// has to be deterministic and collision-poor.
type BlockHash uint64

// Batch is one decoded event batch.
type Batch struct {
	// TS is the engine's timestamp (seconds since the epoch).
	TS float64
	// Rank is the data-parallel rank the batch names; HasRank is false when the field is absent
	// (SGLang, vLLM without data parallelism before the publisher filled it in).
	Rank    uint32
	HasRank bool
	Events  []Event
}

// Event is one decoded event; which fields are meaningful depends on Kind.
type Event struct {
	Kind Kind
	// BlockHashes are the stored or removed blocks.
	BlockHashes []BlockHash
	// Parent is the block the first stored block follows (HasParent false: a sequence start).
	Parent    BlockHash
	HasParent bool
	// TokenIDs are the tokens of the stored blocks, BlockSize per block.
	TokenIDs  []uint32
	BlockSize int
	// LoraID is the deprecated numeric LoRA id (HasLoraID false: none); LoraName the adapter
	// name (empty: none).
	LoraID    int64
	HasLoraID bool
	LoraName  string
	// Medium is where the blocks live ("GPU", "CPU", ...); empty when absent (older engines,
	// which only report device blocks).
	Medium string
	// GroupIdx is the KV-cache group of hybrid models (HasGroup false: absent).
	GroupIdx int64
	HasGroup bool
	// SpecKind is kv_cache_spec_kind ("full_attention", "sliding_window", ...); empty when
	// absent.
	SpecKind string
	// ExtraKeys is extra_keys: nil when absent or null, else one entry per block hash (the
	// decoder checks the length), an entry nil for a block without extra keys. Values are as
	// the engine sent them (vLLM 0.34.0 publishes the LoRA name first when a LoRA is active,
	// then (mm identifier, offset) pairs, the cache salt on the first block, prompt-embeds
	// digests); the converter decides what enters the local hash.
	ExtraKeys []ckf.ExtraKeys
	// CacheSalt is SGLang's cache salt of a salted store (HasCacheSalt false: unsalted): the
	// metadata map {"cache_salt": ...} SGLang 0.5.18 and 0.5.19 append to the array event, or
	// the cache_salt key (or the same metadata map) of the map events of later releases. SGLang
	// keeps a salted request's whole radix path, and its event hashes, in the salt's namespace;
	// the converter salts the sequence's first block with it, as vLLM's cache_salt is salted.
	CacheSalt    string
	HasCacheSalt bool
}

// MaxElements bounds any one array or map length in a batch (hashes, tokens, events), so a
// corrupt length cannot make the decoder allocate gigabytes before failing.
const MaxElements = 1 << 22

// Decode decodes one batch payload (the third frame of a published message, or the second of a
// replayed one).
func Decode(payload []byte) (Batch, error) {
	d := decoder{payload: payload, r: bytes.NewReader(payload)}
	d.dec = msgpack.NewDecoder(d.r)
	var b Batch
	if err := d.batch(&b); err != nil {
		return Batch{}, err
	}
	if d.r.Len() != 0 {
		return Batch{}, &DecodeError{Kind: ErrMalformed, Detail: fmt.Sprintf("%d trailing bytes after the batch", d.r.Len())}
	}
	return b, nil
}

type decoder struct {
	payload []byte
	r       *bytes.Reader
	dec     *msgpack.Decoder
}

func malformed(path, format string, args ...any) error {
	return &DecodeError{Kind: ErrMalformed, Path: path, Detail: fmt.Sprintf(format, args...)}
}

func (d *decoder) wrap(path string, err error) error {
	if err == nil {
		return nil
	}
	var de *DecodeError
	if errors.As(err, &de) {
		return err
	}
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return &DecodeError{Kind: ErrMalformed, Path: path, Detail: "truncated", Err: err}
	}
	return &DecodeError{Kind: ErrMalformed, Path: path, Err: err}
}

func (d *decoder) peek() (byte, error) {
	c, err := d.dec.PeekCode()
	if err != nil {
		return 0, err
	}
	return c, nil
}

func isArray(c byte) bool {
	return msgpcode.IsFixedArray(c) || c == msgpcode.Array16 || c == msgpcode.Array32
}
func isMap(c byte) bool { return msgpcode.IsFixedMap(c) || c == msgpcode.Map16 || c == msgpcode.Map32 }
func isString(c byte) bool {
	return msgpcode.IsFixedString(c) || c == msgpcode.Str8 || c == msgpcode.Str16 || c == msgpcode.Str32
}
func isBin(c byte) bool { return c == msgpcode.Bin8 || c == msgpcode.Bin16 || c == msgpcode.Bin32 }
func isInt(c byte) bool {
	return msgpcode.IsFixedNum(c) || c == msgpcode.Uint8 || c == msgpcode.Uint16 || c == msgpcode.Uint32 ||
		c == msgpcode.Uint64 || c == msgpcode.Int8 || c == msgpcode.Int16 || c == msgpcode.Int32 || c == msgpcode.Int64
}

// length reads an array or map length, bounded by MaxElements and by the bytes left (every
// element takes at least one byte).
func (d *decoder) length(path string) func(int, error) (int, error) {
	return func(n int, err error) (int, error) { return d.checkLen(path, n, err) }
}

func (d *decoder) checkLen(path string, n int, err error) (int, error) {
	if err != nil {
		return 0, d.wrap(path, err)
	}
	if n < 0 || n > MaxElements || n > d.r.Len() {
		return 0, malformed(path, "length %d out of range", n)
	}
	return n, nil
}

func (d *decoder) isNil() (bool, error) {
	c, err := d.peek()
	if err != nil {
		return false, err
	}
	if c == msgpcode.Nil {
		_, err := d.r.ReadByte()
		return true, err
	}
	return false, nil
}

func (d *decoder) batch(b *Batch) error {
	c, err := d.peek()
	if err != nil {
		return d.wrap("batch", err)
	}
	switch {
	case isArray(c):
		n, err := d.length("batch")(d.dec.DecodeArrayLen())
		if err != nil {
			return err
		}
		if n < 2 {
			return malformed("batch", "array of %d fields, want at least ts and events", n)
		}
		if b.TS, err = d.float("ts"); err != nil {
			return err
		}
		if err := d.events(b); err != nil {
			return err
		}
		if n >= 3 {
			if err := d.rank(b); err != nil {
				return err
			}
		}
		return d.skip("batch", n-3)
	case isMap(c):
		n, err := d.length("batch")(d.dec.DecodeMapLen())
		if err != nil {
			return err
		}
		var hasTS, hasEvents bool
		for i := 0; i < n; i++ {
			key, err := d.str("batch.key")
			if err != nil {
				return err
			}
			switch key {
			case "ts":
				hasTS = true
				if b.TS, err = d.float("ts"); err != nil {
					return err
				}
			case "events":
				hasEvents = true
				if err := d.events(b); err != nil {
					return err
				}
			case "data_parallel_rank":
				if err := d.rank(b); err != nil {
					return err
				}
			default:
				if err := d.wrap("batch."+key, d.dec.Skip()); err != nil {
					return err
				}
			}
		}
		if !hasTS || !hasEvents {
			return malformed("batch", "map without ts or events")
		}
		return nil
	}
	return malformed("batch", "neither an array nor a map (msgpack code %#x)", c)
}

func (d *decoder) skip(path string, n int) error {
	for i := 0; i < n; i++ {
		if err := d.dec.Skip(); err != nil {
			return d.wrap(path, err)
		}
	}
	return nil
}

func (d *decoder) rank(b *Batch) error {
	null, err := d.isNil()
	if err != nil || null {
		return d.wrap("data_parallel_rank", err)
	}
	v, err := d.int("data_parallel_rank")
	if err != nil {
		return err
	}
	if v < 0 || v > math.MaxUint32 {
		return malformed("data_parallel_rank", "%d out of range", v)
	}
	b.Rank, b.HasRank = uint32(v), true
	return nil
}

func (d *decoder) float(path string) (float64, error) {
	c, err := d.peek()
	if err != nil {
		return 0, d.wrap(path, err)
	}
	if isInt(c) {
		v, err := d.int(path)
		return float64(v), err
	}
	if c != msgpcode.Float && c != msgpcode.Double {
		return 0, malformed(path, "not a number (msgpack code %#x)", c)
	}
	v, err := d.dec.DecodeFloat64()
	return v, d.wrap(path, err)
}

func (d *decoder) int(path string) (int64, error) {
	c, err := d.peek()
	if err != nil {
		return 0, d.wrap(path, err)
	}
	if !isInt(c) {
		return 0, malformed(path, "not an integer (msgpack code %#x)", c)
	}
	if c == msgpcode.Uint64 {
		u, err := d.dec.DecodeUint64()
		if err != nil {
			return 0, d.wrap(path, err)
		}
		if u > math.MaxInt64 {
			return 0, malformed(path, "%d out of range", u)
		}
		return int64(u), nil
	}
	v, err := d.dec.DecodeInt64()
	return v, d.wrap(path, err)
}

func (d *decoder) str(path string) (string, error) {
	c, err := d.peek()
	if err != nil {
		return "", d.wrap(path, err)
	}
	if !isString(c) {
		return "", malformed(path, "not a string (msgpack code %#x)", c)
	}
	s, err := d.dec.DecodeString()
	return s, d.wrap(path, err)
}

func (d *decoder) optStr(path string) (string, error) {
	null, err := d.isNil()
	if err != nil || null {
		return "", d.wrap(path, err)
	}
	return d.str(path)
}

// hash reads one block hash: an integer (signed or unsigned, kept as its 64-bit pattern) or
// bytes (reduced with XXH3-64).
func (d *decoder) hash(path string) (BlockHash, error) {
	c, err := d.peek()
	if err != nil {
		return 0, d.wrap(path, err)
	}
	switch {
	case c == msgpcode.Uint64:
		u, err := d.dec.DecodeUint64()
		return BlockHash(u), d.wrap(path, err)
	case isInt(c):
		v, err := d.dec.DecodeInt64()
		return BlockHash(uint64(v)), d.wrap(path, err)
	case isBin(c):
		n, err := d.length(path)(d.dec.DecodeBytesLen())
		if err != nil {
			return 0, err
		}
		var stack [64]byte
		buf := stack[:0]
		if n > len(stack) {
			buf = make([]byte, n)
		}
		buf = buf[:n]
		if _, err := io.ReadFull(d.r, buf); err != nil {
			return 0, d.wrap(path, err)
		}
		return BlockHash(xxh3.Hash(buf)), nil
	}
	return 0, malformed(path, "block hash is neither an integer nor bytes (msgpack code %#x)", c)
}

func (d *decoder) hashes(path string) ([]BlockHash, error) {
	n, err := d.length(path)(d.arrayLen(path))
	if err != nil {
		return nil, err
	}
	out := make([]BlockHash, n)
	for i := range out {
		if out[i], err = d.hash(path); err != nil {
			return nil, err
		}
	}
	return out, nil
}

func (d *decoder) arrayLen(path string) (int, error) {
	c, err := d.peek()
	if err != nil {
		return 0, err
	}
	if !isArray(c) {
		return 0, malformed(path, "not an array (msgpack code %#x)", c)
	}
	return d.dec.DecodeArrayLen()
}

func (d *decoder) tokens(path string) ([]uint32, error) {
	n, err := d.length(path)(d.arrayLen(path))
	if err != nil {
		return nil, err
	}
	out := make([]uint32, n)
	// Token ids are most of a batch's bytes: read them straight from the payload (the msgpack
	// decoder reads d.r directly, without a buffer of its own, so skipping ahead in d.r is
	// safe). Anything but the integer encodings the engines use goes the general way.
	rest := d.payload[len(d.payload)-d.r.Len():]
	pos, i := 0, 0
fast:
	for ; i < n && pos < len(rest); i++ {
		c := rest[pos]
		var v uint64
		switch {
		case c <= 0x7f:
			v, pos = uint64(c), pos+1
		case c == msgpcode.Uint8 && pos+2 <= len(rest):
			v, pos = uint64(rest[pos+1]), pos+2
		case c == msgpcode.Uint16 && pos+3 <= len(rest):
			v, pos = uint64(binary.BigEndian.Uint16(rest[pos+1:])), pos+3
		case c == msgpcode.Uint32 && pos+5 <= len(rest):
			v, pos = uint64(binary.BigEndian.Uint32(rest[pos+1:])), pos+5
		default:
			break fast
		}
		out[i] = uint32(v)
	}
	if _, err := d.r.Seek(int64(pos), io.SeekCurrent); err != nil {
		return nil, d.wrap(path, err)
	}
	for ; i < n; i++ {
		v, err := d.int(path)
		if err != nil {
			return nil, err
		}
		if v < 0 || v > math.MaxUint32 {
			return nil, malformed(path, "token id %d out of range", v)
		}
		out[i] = uint32(v)
	}
	return out, nil
}

func (d *decoder) events(b *Batch) error {
	n, err := d.length("events")(d.arrayLen("events"))
	if err != nil {
		return err
	}
	b.Events = make([]Event, n)
	for i := range b.Events {
		if err := d.event(fmt.Sprintf("events[%d]", i), &b.Events[i]); err != nil {
			return err
		}
	}
	return nil
}

// Field names, in the engines' declaration order (the positional order of the array form).
var (
	storedFields  = []string{"block_hashes", "parent_block_hash", "token_ids", "block_size", "lora_id", "medium", "lora_name", "extra_keys", "group_idx", "kv_cache_spec_kind", "kv_cache_spec_sliding_window"}
	removedFields = []string{"block_hashes", "medium", "group_idx"}
)

func kindOf(tag string) (Kind, []string, bool) {
	switch tag {
	case "BlockStored":
		return KindStored, storedFields, true
	case "BlockRemoved":
		return KindRemoved, removedFields, true
	case "AllBlocksCleared":
		return KindCleared, nil, true
	}
	return 0, nil, false
}

// required are the fields without a default in every engine version: an event missing one is
// malformed.
func required(k Kind) []string {
	switch k {
	case KindStored:
		return []string{"block_hashes", "parent_block_hash", "token_ids", "block_size"}
	case KindRemoved:
		return []string{"block_hashes"}
	}
	return nil
}

func (d *decoder) event(path string, ev *Event) error {
	c, err := d.peek()
	if err != nil {
		return d.wrap(path, err)
	}
	seen := map[string]bool{}
	switch {
	case isArray(c):
		n, err := d.length(path)(d.dec.DecodeArrayLen())
		if err != nil {
			return err
		}
		if n < 1 {
			return malformed(path, "empty event array")
		}
		tag, err := d.str(path + ".tag")
		if err != nil {
			return err
		}
		kind, fields, ok := kindOf(tag)
		if !ok {
			return &DecodeError{Kind: ErrUnknownEvent, Path: path, Detail: fmt.Sprintf("tag %q", tag)}
		}
		ev.Kind = kind
		for i := 1; i < n; i++ {
			if i-1 >= len(fields) {
				if err := d.wrap(path, d.dec.Skip()); err != nil {
					return err
				}
				continue
			}
			name := fields[i-1]
			if name == "lora_name" && kind == KindStored {
				// SGLang 0.5.18 and 0.5.19 append a metadata map ({"cache_salt": ...}) to a
				// salted store where vLLM has lora_name.
				if c, err := d.peek(); err != nil {
					return d.wrap(path, err)
				} else if isMap(c) {
					if err := d.metadata(path+".metadata", ev); err != nil {
						return err
					}
					seen["metadata"] = true
					continue
				}
			}
			seen[name] = true
			if err := d.field(path+"."+name, name, ev); err != nil {
				return err
			}
		}
	case isMap(c):
		n, err := d.length(path)(d.dec.DecodeMapLen())
		if err != nil {
			return err
		}
		// The tag may come anywhere in a map (msgspec writes it first), so every known field is
		// decoded and the kind checked at the end.
		var tag string
		for i := 0; i < n; i++ {
			key, err := d.str(path + ".key")
			if err != nil {
				return err
			}
			if key == "type" {
				if tag, err = d.str(path + ".type"); err != nil {
					return err
				}
				continue
			}
			if key == "cache_salt" || key == "metadata" { // SGLang 0.5.20 and later
				if seen[key] {
					return malformed(path, "field %q twice", key)
				}
				seen[key] = true
				var err error
				if key == "metadata" {
					err = d.metadata(path+".metadata", ev)
				} else {
					err = d.cacheSalt(path+".cache_salt", ev)
				}
				if err != nil {
					return err
				}
				continue
			}
			if !knownField(key) {
				if err := d.wrap(path+"."+key, d.dec.Skip()); err != nil {
					return err
				}
				continue
			}
			if seen[key] {
				return malformed(path, "field %q twice", key)
			}
			seen[key] = true
			if err := d.field(path+"."+key, key, ev); err != nil {
				return err
			}
		}
		kind, _, ok := kindOf(tag)
		if !ok {
			if tag == "" {
				return malformed(path, "event map without a type")
			}
			return &DecodeError{Kind: ErrUnknownEvent, Path: path, Detail: fmt.Sprintf("tag %q", tag)}
		}
		ev.Kind = kind
	default:
		return malformed(path, "event is neither an array nor a map (msgpack code %#x)", c)
	}
	for _, f := range required(ev.Kind) {
		if !seen[f] {
			return malformed(path, "%s event without %s", ev.Kind, f)
		}
	}
	if ev.Kind != KindStored {
		ev.TokenIDs, ev.BlockSize, ev.HasParent, ev.Parent, ev.LoraName, ev.HasLoraID, ev.LoraID, ev.SpecKind = nil, 0, false, 0, "", false, 0, ""
		ev.ExtraKeys, ev.CacheSalt, ev.HasCacheSalt = nil, "", false
	}
	if ev.ExtraKeys != nil && len(ev.ExtraKeys) != len(ev.BlockHashes) {
		return malformed(path+".extra_keys", "%d entries for %d block hashes", len(ev.ExtraKeys), len(ev.BlockHashes))
	}
	if ev.Kind == KindCleared {
		*ev = Event{Kind: KindCleared}
	}
	return nil
}

func knownField(name string) bool {
	for _, f := range storedFields {
		if f == name {
			return true
		}
	}
	return false
}

// field decodes the named field into ev. The sliding window is read past: only the spec kind
// decides filtering.
func (d *decoder) field(path, name string, ev *Event) error {
	var err error
	switch name {
	case "block_hashes":
		ev.BlockHashes, err = d.hashes(path)
	case "parent_block_hash":
		null, nerr := d.isNil()
		if nerr != nil || null {
			return d.wrap(path, nerr)
		}
		ev.Parent, err = d.hash(path)
		ev.HasParent = err == nil
	case "token_ids":
		ev.TokenIDs, err = d.tokens(path)
	case "block_size":
		var v int64
		v, err = d.int(path)
		if err == nil && (v <= 0 || v > math.MaxInt32) {
			return malformed(path, "block size %d out of range", v)
		}
		ev.BlockSize = int(v)
	case "lora_id":
		null, nerr := d.isNil()
		if nerr != nil || null {
			return d.wrap(path, nerr)
		}
		ev.LoraID, err = d.int(path)
		ev.HasLoraID = err == nil
	case "medium":
		ev.Medium, err = d.optStr(path)
	case "lora_name":
		ev.LoraName, err = d.optStr(path)
	case "group_idx":
		null, nerr := d.isNil()
		if nerr != nil || null {
			return d.wrap(path, nerr)
		}
		ev.GroupIdx, err = d.int(path)
		ev.HasGroup = err == nil
	case "kv_cache_spec_kind":
		ev.SpecKind, err = d.optStr(path)
	case "extra_keys":
		ev.ExtraKeys, err = d.extraKeys(path)
	default: // kv_cache_spec_sliding_window
		err = d.wrap(path, d.dec.Skip())
	}
	return err
}

// metadata reads SGLang's BlockStoredMetadata map: its cache_salt (a string, or null for none);
// keys this package does not know are skipped.
func (d *decoder) metadata(path string, ev *Event) error {
	null, err := d.isNil()
	if err != nil || null {
		return d.wrap(path, err)
	}
	n, err := d.length(path)(d.dec.DecodeMapLen())
	if err != nil {
		return err
	}
	for i := 0; i < n; i++ {
		key, err := d.str(path + ".key")
		if err != nil {
			return err
		}
		if key != "cache_salt" {
			if err := d.wrap(path+"."+key, d.dec.Skip()); err != nil {
				return err
			}
			continue
		}
		if err := d.cacheSalt(path+".cache_salt", ev); err != nil {
			return err
		}
	}
	return nil
}

// cacheSalt reads a cache salt: a string, or null for none. Two salts of one event (a map
// event with both the key and the metadata map) must agree: the store is in one namespace.
func (d *decoder) cacheSalt(path string, ev *Event) error {
	null, err := d.isNil()
	if err != nil || null {
		return d.wrap(path, err)
	}
	salt, err := d.str(path)
	if err != nil {
		return err
	}
	if ev.HasCacheSalt && ev.CacheSalt != salt {
		return malformed(path, "two cache salts, %q and %q", ev.CacheSalt, salt)
	}
	ev.CacheSalt, ev.HasCacheSalt = salt, true
	return nil
}

// extraKeys reads extra_keys: null, or an array of one entry per block, each null or an array
// of values (extraValue).
func (d *decoder) extraKeys(path string) ([]ckf.ExtraKeys, error) {
	null, err := d.isNil()
	if err != nil || null {
		return nil, d.wrap(path, err)
	}
	n, err := d.length(path)(d.arrayLen(path))
	if err != nil {
		return nil, err
	}
	out := make([]ckf.ExtraKeys, n)
	for i := range out {
		p := fmt.Sprintf("%s[%d]", path, i)
		null, err := d.isNil()
		if err != nil {
			return nil, d.wrap(p, err)
		}
		if null {
			continue
		}
		v, err := d.extraValue(p, 1)
		if err != nil {
			return nil, err
		}
		if v.Kind != ckf.ExtraTuple {
			return nil, malformed(p, "an entry is neither null nor an array")
		}
		out[i] = v.Items
		if out[i] == nil {
			out[i] = ckf.ExtraKeys{}
		}
	}
	return out, nil
}

// extraValue reads one extra-key value at nesting depth depth (a block's entry is depth 1).
func (d *decoder) extraValue(path string, depth int) (ckf.ExtraValue, error) {
	c, err := d.peek()
	if err != nil {
		return ckf.ExtraValue{}, d.wrap(path, err)
	}
	switch {
	case c == msgpcode.Nil:
		_, err := d.r.ReadByte()
		return ckf.ExtraNil(), d.wrap(path, err)
	case c == msgpcode.True || c == msgpcode.False:
		b, err := d.dec.DecodeBool()
		return ckf.ExtraBoolValue(b), d.wrap(path, err)
	case c == msgpcode.Uint64:
		u, err := d.dec.DecodeUint64()
		return ckf.ExtraUintValue(u), d.wrap(path, err)
	case isInt(c):
		v, err := d.dec.DecodeInt64()
		return ckf.ExtraIntValue(v), d.wrap(path, err)
	case c == msgpcode.Float || c == msgpcode.Double:
		f, err := d.dec.DecodeFloat64()
		return ckf.ExtraFloatValue(f), d.wrap(path, err)
	case isString(c):
		s, err := d.dec.DecodeString()
		return ckf.ExtraStringValue(s), d.wrap(path, err)
	case isBin(c):
		b, err := d.dec.DecodeBytes()
		return ckf.ExtraBytesValue(b), d.wrap(path, err)
	case isArray(c):
		if depth > ckf.MaxExtraDepth {
			return ckf.ExtraValue{}, malformed(path, "extra keys nested deeper than %d", ckf.MaxExtraDepth)
		}
		n, err := d.length(path)(d.dec.DecodeArrayLen())
		if err != nil {
			return ckf.ExtraValue{}, err
		}
		items := make([]ckf.ExtraValue, n)
		for i := range items {
			if items[i], err = d.extraValue(path, depth+1); err != nil {
				return ckf.ExtraValue{}, err
			}
		}
		return ckf.ExtraTupleValue(items...), nil
	}
	return ckf.ExtraValue{}, malformed(path, "an extra key of an unsupported type (msgpack code %#x)", c)
}

// Message framing of the engines' sockets.

// EndOfReplay is the sequence number that ends a replay: the replay socket's last message is
// (EndOfReplay as 8 big-endian bytes, an empty payload).
const EndOfReplay int64 = -1

// ParseSeq reads an 8-byte big-endian sequence frame (signed: the end marker is -1).
func ParseSeq(frame []byte) (int64, error) {
	if len(frame) != 8 {
		return 0, &DecodeError{Kind: ErrMalformed, Path: "seq", Detail: fmt.Sprintf("sequence frame of %d bytes, want 8", len(frame))}
	}
	return int64(binary.BigEndian.Uint64(frame)), nil
}

// SeqFrame is the 8-byte big-endian encoding of seq (replay requests).
func SeqFrame(seq int64) []byte { return binary.BigEndian.AppendUint64(nil, uint64(seq)) }
