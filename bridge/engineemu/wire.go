package engineemu

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"slices"

	"github.com/ckf-stream/ckf-stream/ckf"
	"github.com/vmihailenco/msgpack/v5"
)

// Wire is the payload shape of an event batch. The engines declare their batches as msgspec
// structs; the shape follows from the struct options they use.
type Wire int

const (
	// WireMap is vLLM's current shape: the batch and each event are maps, events tagged by a
	// "type" key, the batch carrying data_parallel_rank.
	WireMap Wire = iota
	// WireArray is the array_like shape of the same structs: [ts, events, rank] and
	// ["BlockStored", block_hashes, parent_block_hash, token_ids, block_size, lora_id, medium,
	// lora_name, extra_keys, group_idx, kv_cache_spec_kind, kv_cache_spec_sliding_window],
	// ["BlockRemoved", block_hashes, medium, group_idx]; msgspec writes an array_like struct
	// whole, fields at their default (None) included.
	WireArray
	// WireArray5 is the five-field BlockStored of vLLM 0.9.0: [ts, events],
	// ["BlockStored", block_hashes, parent_block_hash, token_ids, block_size, lora_id],
	// ["BlockRemoved", block_hashes]: no rank, no medium, no LoRA name.
	WireArray5
	// WireArray6 adds the medium and the rank: [ts, events, rank], ["BlockStored", ...,
	// lora_id, medium], ["BlockRemoved", block_hashes, medium] (vLLM 0.10.2 to 0.13, and
	// SGLang up to 0.5.17 with its attn_dp_rank).
	WireArray6
	// WireArray7 adds lora_name to WireArray6's BlockStored (vLLM 0.14.1 to 0.16).
	WireArray7
	// WireMapEvents is the shape of vLLM 0.24.0 and later (and SGLang 0.5.20 and later): the
	// batch stays array_like, [ts, events, rank], and each event is a map tagged by "type",
	// fields at their default (None) left out.
	WireMapEvents
)

// wires lists every Wire, in declaration order.
var wires = []Wire{WireMap, WireArray, WireArray5, WireArray6, WireArray7, WireMapEvents}

// Wires returns every Wire, in declaration order.
func Wires() []Wire { return append([]Wire(nil), wires...) }

// storedFields is how many BlockStored fields w carries (its array length less the tag);
// all eleven for the full shapes.
func (w Wire) storedFields() int {
	switch w {
	case WireArray5:
		return 5
	case WireArray6:
		return 6
	case WireArray7:
		return 7
	}
	return 11
}

// HasMedium says whether w's events carry a medium (without one, every block is a device block).
func (w Wire) HasMedium() bool { return w.storedFields() >= 6 }

// HasGroups says whether w's events carry hybrid-model group fields.
func (w Wire) HasGroups() bool { return w.storedFields() == 11 }

// eventMaps says whether w writes events as maps.
func (w Wire) eventMaps() bool { return w == WireMap || w == WireMapEvents }

// String returns the name the emulators' command lines use.
func (w Wire) String() string {
	switch w {
	case WireMap:
		return "map"
	case WireArray:
		return "array"
	case WireArray5:
		return "array5"
	case WireArray6:
		return "array6"
	case WireArray7:
		return "array7"
	case WireMapEvents:
		return "mapevents"
	}
	return fmt.Sprintf("Wire(%d)", int(w))
}

// ParseWire reads a Wire from its name.
func ParseWire(s string) (Wire, error) {
	for _, w := range wires {
		if w.String() == s {
			return w, nil
		}
	}
	return 0, fmt.Errorf("%w: wire %q (want map, array, array5, array6, array7 or mapevents)", ErrInvalidConfig, s)
}

// HashFormat is how block hashes travel.
type HashFormat int

const (
	// HashInt is the low 64 bits of the block's 32-byte digest as an unsigned integer (vLLM's
	// default, VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES=1).
	HashInt HashFormat = iota
	// HashSigned is the same 64 bits as a signed integer, as engines that sent Python hash()
	// values did.
	HashSigned
	// HashBytes is the whole 32-byte digest as msgpack bin.
	HashBytes
)

// String returns the name the emulators' command lines use.
func (h HashFormat) String() string {
	switch h {
	case HashInt:
		return "int"
	case HashSigned:
		return "signed"
	case HashBytes:
		return "bytes"
	}
	return fmt.Sprintf("HashFormat(%d)", int(h))
}

// ParseHashFormat reads a HashFormat from its name.
func ParseHashFormat(s string) (HashFormat, error) {
	for _, h := range []HashFormat{HashInt, HashSigned, HashBytes} {
		if h.String() == s {
			return h, nil
		}
	}
	return 0, fmt.Errorf("%w: hash format %q (want int, signed or bytes)", ErrInvalidConfig, s)
}

// Digest is a block's 32-byte engine digest (SHA-256 in the emulators).
type Digest [32]byte

// Low64 is the 64-bit id an engine with integer hashes sends for d: the digest read as a
// big-endian integer and masked to 64 bits, which is its last eight bytes.
func (d Digest) Low64() uint64 { return binary.BigEndian.Uint64(d[24:]) }

// Group is a KV-cache group other than the default full-attention one (hybrid models).
type Group struct {
	Index         int
	Kind          string
	SlidingWindow int
}

// slidingWindowGroup is the group the emulator stores sliding-window chains in.
var slidingWindowGroup = &Group{Index: 1, Kind: "sliding_window", SlidingWindow: 128}

// ExtraKeys are one block's extra keys (ckf.ExtraKeys).
type ExtraKeys = ckf.ExtraKeys

// Event is one KV-cache event as the emulator means it, before encoding. ExtraKeys is
// BlockStored's extra_keys: nil leaves the field at its default (None: absent from a map,
// nil in an array), otherwise one entry per block, nil for None, each entry a tuple of values
// as msgspec encodes a list[tuple | None].
type Event struct {
	Kind      EventKind
	Hashes    []Digest
	Parent    *Digest
	Tokens    []uint32
	BlockSize int
	LoRAID    *int
	LoRAName  string
	Medium    string
	Group     *Group
	ExtraKeys []ExtraKeys
	// CacheSalt is an SGLang store's cache salt ("" for none): a metadata map after medium in
	// WireArray6, a cache_salt key in the map shapes.
	CacheSalt string
}

// EventKind is the tag of an event.
type EventKind int

const (
	BlockStored EventKind = iota
	BlockRemoved
	AllBlocksCleared
)

// String returns the tag the engines write.
func (k EventKind) String() string {
	switch k {
	case BlockStored:
		return "BlockStored"
	case BlockRemoved:
		return "BlockRemoved"
	case AllBlocksCleared:
		return "AllBlocksCleared"
	}
	return fmt.Sprintf("EventKind(%d)", int(k))
}

// EncodeBatch encodes one batch of rank's events at time ts (seconds since the epoch) in the
// shape w with hashes in format h, byte for byte as the engines' msgspec encoder writes it.
func EncodeBatch(w Wire, h HashFormat, ts float64, events []Event, rank int) ([]byte, error) {
	return newEncoder(w, h).batch(ts, events, rank)
}

// encoder writes batches in one wire shape and hash format, as msgspec writes them: integers in
// their smallest form, floats as float 64, map keys in declaration order with the tag first.
type encoder struct {
	wire   Wire
	hashes HashFormat
	buf    bytes.Buffer
	enc    *msgpack.Encoder
}

func newEncoder(w Wire, h HashFormat) *encoder {
	e := &encoder{wire: w, hashes: h}
	e.enc = msgpack.NewEncoder(&e.buf)
	return e
}

// batch encodes one batch. The returned slice is a copy the caller owns.
func (e *encoder) batch(ts float64, events []Event, rank int) ([]byte, error) {
	e.buf.Reset()
	m := e.enc
	var err error
	switch e.wire {
	case WireMap:
		err = first(m.EncodeMapLen(3), m.EncodeString("ts"), m.EncodeFloat64(ts), m.EncodeString("events"))
	case WireArray5:
		err = first(m.EncodeArrayLen(2), m.EncodeFloat64(ts))
	default:
		err = first(m.EncodeArrayLen(3), m.EncodeFloat64(ts))
	}
	if err != nil {
		return nil, err
	}
	if err := m.EncodeArrayLen(len(events)); err != nil {
		return nil, err
	}
	for i := range events {
		if err := e.event(&events[i]); err != nil {
			return nil, err
		}
	}
	switch e.wire {
	case WireMap:
		err = first(m.EncodeString("data_parallel_rank"), m.EncodeInt(int64(rank)))
	case WireArray5:
	default:
		err = m.EncodeInt(int64(rank))
	}
	if err != nil {
		return nil, err
	}
	return bytes.Clone(e.buf.Bytes()), nil
}

// field is one event field: its name (map shape) and how to write its value.
type field struct {
	name  string
	value func() error
}

func (e *encoder) event(ev *Event) error {
	m := e.enc
	var fields []field
	switch ev.Kind {
	case BlockStored:
		fields = []field{
			{"block_hashes", func() error { return e.hashList(ev.Hashes) }},
			{"parent_block_hash", func() error { return e.optHash(ev.Parent) }},
			{"token_ids", func() error { return e.tokens(ev.Tokens) }},
			{"block_size", func() error { return m.EncodeInt(int64(ev.BlockSize)) }},
			{"lora_id", func() error { return e.optInt(ev.LoRAID) }},
		}
		if n := e.wire.storedFields(); n >= 6 {
			fields = append(fields, field{"medium", func() error { return m.EncodeString(ev.Medium) }})
			if n >= 7 {
				fields = append(fields, field{"lora_name", func() error { return e.optString(ev.LoRAName) }})
			}
		}
		if ev.ExtraKeys != nil && e.wire.eventMaps() {
			fields = append(fields, field{"extra_keys", func() error { return e.extraKeys(ev.ExtraKeys) }})
		}
		if ev.CacheSalt != "" {
			switch {
			case e.wire.eventMaps():
				fields = append(fields, field{"cache_salt", func() error { return m.EncodeString(ev.CacheSalt) }})
			case e.wire == WireArray6:
				// SGLang's BlockStoredWithMetadata: the array event with metadata appended.
				fields = append(fields, field{"metadata", func() error {
					return first(m.EncodeMapLen(1), m.EncodeString("cache_salt"), m.EncodeString(ev.CacheSalt))
				}})
			}
		}
		if e.wire.HasGroups() {
			g := ev.Group
			switch {
			case g != nil:
				fields = append(fields,
					field{"group_idx", func() error { return m.EncodeInt(int64(g.Index)) }},
					field{"kv_cache_spec_kind", func() error { return m.EncodeString(g.Kind) }},
					field{"kv_cache_spec_sliding_window", func() error { return m.EncodeInt(int64(g.SlidingWindow)) }})
			case e.wire == WireArray:
				fields = append(fields, field{"group_idx", m.EncodeNil}, field{"kv_cache_spec_kind", m.EncodeNil},
					field{"kv_cache_spec_sliding_window", m.EncodeNil})
			}
			if e.wire == WireArray {
				// msgspec leaves a field at its default (None) out of a map only: an array_like
				// struct is written whole. extra_keys comes before the group fields.
				fields = slices.Insert(fields, 7, field{"extra_keys", func() error { return e.extraKeys(ev.ExtraKeys) }})
			}
		}
	case BlockRemoved:
		fields = []field{{"block_hashes", func() error { return e.hashList(ev.Hashes) }}}
		if e.wire.HasMedium() {
			fields = append(fields, field{"medium", func() error { return m.EncodeString(ev.Medium) }})
		}
		if e.wire.HasGroups() {
			if g := ev.Group; g != nil {
				fields = append(fields, field{"group_idx", func() error { return m.EncodeInt(int64(g.Index)) }})
			} else if e.wire == WireArray {
				fields = append(fields, field{"group_idx", m.EncodeNil})
			}
		}
	case AllBlocksCleared:
	default:
		return fmt.Errorf("engineemu: unknown event kind %v", ev.Kind)
	}
	if e.wire.eventMaps() {
		if err := first(m.EncodeMapLen(len(fields)+1), m.EncodeString("type"), m.EncodeString(ev.Kind.String())); err != nil {
			return err
		}
		for _, f := range fields {
			if err := first(m.EncodeString(f.name), f.value()); err != nil {
				return err
			}
		}
		return nil
	}
	if err := first(m.EncodeArrayLen(len(fields)+1), m.EncodeString(ev.Kind.String())); err != nil {
		return err
	}
	for _, f := range fields {
		if err := f.value(); err != nil {
			return err
		}
	}
	return nil
}

func (e *encoder) hash(d *Digest) error {
	switch e.hashes {
	case HashBytes:
		return e.enc.EncodeBytes(d[:])
	case HashSigned:
		return e.enc.EncodeInt(int64(d.Low64()))
	default:
		return e.enc.EncodeUint(d.Low64())
	}
}

func (e *encoder) optHash(d *Digest) error {
	if d == nil {
		return e.enc.EncodeNil()
	}
	return e.hash(d)
}

func (e *encoder) hashList(ds []Digest) error {
	if err := e.enc.EncodeArrayLen(len(ds)); err != nil {
		return err
	}
	for i := range ds {
		if err := e.hash(&ds[i]); err != nil {
			return err
		}
	}
	return nil
}

func (e *encoder) tokens(ts []uint32) error {
	if err := e.enc.EncodeArrayLen(len(ts)); err != nil {
		return err
	}
	for _, t := range ts {
		if err := e.enc.EncodeUint(uint64(t)); err != nil {
			return err
		}
	}
	return nil
}

func (e *encoder) optInt(p *int) error {
	if p == nil {
		return e.enc.EncodeNil()
	}
	return e.enc.EncodeInt(int64(*p))
}

func (e *encoder) optString(s string) error {
	if s == "" {
		return e.enc.EncodeNil()
	}
	return e.enc.EncodeString(s)
}

// extraKeys writes extra_keys: None for nil, else an array of one entry per block, None or
// the block's values as an array (msgspec writes tuples and lists alike).
func (e *encoder) extraKeys(keys []ExtraKeys) error {
	if keys == nil {
		return e.enc.EncodeNil()
	}
	if err := e.enc.EncodeArrayLen(len(keys)); err != nil {
		return err
	}
	for _, k := range keys {
		if k == nil {
			if err := e.enc.EncodeNil(); err != nil {
				return err
			}
			continue
		}
		if err := e.extraValue(ckf.ExtraTupleValue(k...)); err != nil {
			return err
		}
	}
	return nil
}

// extraValue writes one value as msgspec writes the Python value: integers in their smallest
// form, floats as float 64, str, bytes as bin, tuples as arrays.
func (e *encoder) extraValue(v ckf.ExtraValue) error {
	m := e.enc
	switch v.Kind {
	case ckf.ExtraNone:
		return m.EncodeNil()
	case ckf.ExtraBool:
		return m.EncodeBool(v.Bits != 0)
	case ckf.ExtraInt:
		return m.EncodeInt(int64(v.Bits))
	case ckf.ExtraUint:
		return m.EncodeUint(v.Bits)
	case ckf.ExtraFloat:
		return m.EncodeFloat64(math.Float64frombits(v.Bits))
	case ckf.ExtraString:
		return m.EncodeString(v.Str)
	case ckf.ExtraBytes:
		return m.EncodeBytes([]byte(v.Str))
	case ckf.ExtraTuple:
		if err := m.EncodeArrayLen(len(v.Items)); err != nil {
			return err
		}
		for _, it := range v.Items {
			if err := e.extraValue(it); err != nil {
				return err
			}
		}
		return nil
	}
	return fmt.Errorf("engineemu: extra key of kind %v", v.Kind)
}

// first returns the first non-nil error.
func first(errs ...error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}
