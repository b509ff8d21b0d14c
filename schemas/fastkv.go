package schemas

import "slices"

// Hand-written Avro codec for the embedded KvEvent schema. A relay consumes
// one event per engine store or removal; on goavro's native maps an event
// costs a map and two boxed longs per block. The codec must match goavro
// byte for byte (TestKvCodecMatchesGoavro, the round-trip tests) and on
// every input (FuzzDecodeKvEvent decodes each input both ways).

// Minimum encodings of one array element.
const (
	kvBlockMinSize = 2 // block_hash, tokens_hash
	longMinSize    = 1
)

func appendKvEventBody(dst []byte, e *KvEvent) []byte {
	dst = appendU64(dst, e.WorkerID)
	dst = appendLong(dst, int64(e.DpRank))
	dst = appendU64(dst, e.EventID)
	dst = appendLong(dst, int64(e.StorageTier))
	if e.ResidencyDomain.Valid {
		dst = appendString(append(dst, 2), e.ResidencyDomain.Value)
	} else {
		dst = append(dst, 0)
	}
	dst = appendLong(dst, int64(e.Kind-1))
	switch e.Kind {
	case KvStoredEvent:
		s := &e.Stored
		if s.ParentHash.Valid {
			dst = appendU64(append(dst, 2), s.ParentHash.Value)
		} else {
			dst = append(dst, 0)
		}
		if s.StartPosition.Valid {
			dst = appendLong(append(dst, 2), int64(s.StartPosition.Value))
		} else {
			dst = append(dst, 0)
		}
		if n := len(s.Blocks); n > 0 {
			dst = appendLong(dst, int64(n))
			for _, b := range s.Blocks {
				dst = appendU64(dst, b.BlockHash)
				dst = appendU64(dst, b.TokensHash)
			}
		}
		dst = append(dst, 0)
		if s.SharedCacheEligible {
			dst = append(dst, 1)
		} else {
			dst = append(dst, 0)
		}
		dst = appendOptBlockSize(dst, s.BlockSize)
	case KvRemovedEvent:
		if n := len(e.Removed.BlockHashes); n > 0 {
			dst = appendLong(dst, int64(n))
			for _, h := range e.Removed.BlockHashes {
				dst = appendU64(dst, h)
			}
		}
		dst = append(dst, 0)
	}
	return dst
}

// appendOptBlockSize appends an optional block size (union ["null", long]): 0 is null.
func appendOptBlockSize(dst []byte, size uint32) []byte {
	if size == 0 {
		return append(dst, 0)
	}
	return appendLong(append(dst, 2), int64(size))
}

// optBlockSize reads a trailing optional block size (KvStored.block_size, LaneRecord.block_size):
// a body that ends before it was written with an earlier revision of the v1 schema and reads as 0
// (null); a written size must be a u32 above 0.
func (r *reader) optBlockSize(field string, nf *nat) uint32 {
	if r.failed() || r.remaining() == 0 || !r.optIndex() {
		return 0
	}
	return uint32(narrow(r.long(), 1, 1<<32-1, field, nf))
}

// residency returns the residency domain, reusing the constant strings for
// the known values so the common case does not allocate.
func residency(b []byte) string {
	switch string(b) { // no allocation: the conversion is only compared
	case ResidencyWorker:
		return ResidencyWorker
	case ResidencyCacheOwner:
		return ResidencyCacheOwner
	}
	return string(b)
}

func decodeKvEventBody(body []byte) (KvEvent, error) {
	var e KvEvent
	if err := decodeKvEventBodyInto(body, &e); err != nil {
		return KvEvent{}, err
	}
	return e, nil
}

// decodeKvEventBodyInto decodes body into *e, which it overwrites field by field while keeping
// the capacity of its two block slices (the relay decodes every KV record into one KvEvent).
// Starting from a zero KvEvent it gives exactly what decodeKvEventBody gives, nil slices included.
// On an error *e holds a partial decode and must not be used.
func decodeKvEventBodyInto(body []byte, e *KvEvent) error {
	r := reader{b: body}
	var nf nat
	*e = KvEvent{Stored: KvStored{Blocks: e.Stored.Blocks[:0]}, Removed: KvRemoved{BlockHashes: e.Removed.BlockHashes[:0]}}
	e.WorkerID = r.u64()
	e.DpRank = uint32(narrow(r.long(), 0, 1<<32-1, "dp_rank", &nf))
	e.EventID = r.u64()
	e.StorageTier = StorageTier(r.index(len(storageTierSymbols), "enum"))
	if r.optIndex() {
		e.ResidencyDomain = Some(residency(r.bytes()))
	}
	e.Kind = KvEventKind(r.index(3, "union") + 1)
	if r.failed() {
		return wireError(&r)
	}
	switch e.Kind {
	case KvStoredEvent:
		s := &e.Stored
		if r.optIndex() {
			s.ParentHash = Some(r.u64())
		}
		if r.optIndex() {
			s.StartPosition = Some(uint32(narrow(r.long(), 0, 1<<32-1, "data.start_position", &nf)))
		}
		for {
			n := r.blockCount(kvBlockMinSize)
			if n == 0 {
				break
			}
			s.Blocks = grow(s.Blocks, n)
			for ; n > 0 && !r.failed(); n-- {
				s.Blocks = append(s.Blocks, KvBlock{BlockHash: r.u64(), TokensHash: r.u64()})
			}
		}
		s.SharedCacheEligible = r.boolean()
		s.BlockSize = r.optBlockSize("data.block_size", &nf)
	case KvRemovedEvent:
		for {
			n := r.blockCount(longMinSize)
			if n == 0 {
				break
			}
			e.Removed.BlockHashes = grow(e.Removed.BlockHashes, n)
			for ; n > 0 && !r.failed(); n-- {
				e.Removed.BlockHashes = append(e.Removed.BlockHashes, r.u64())
			}
		}
	}
	return r.end(&nf)
}

// grow makes room for n more elements; blockCount has already bounded n by
// the input size.
func grow[S ~[]E, E any](s S, n int64) S {
	if s == nil {
		return make(S, 0, n)
	}
	return slices.Grow(s, int(n))
}

// DecodeKvEventInto is DecodeKvEvent for a consumer that decodes one record after another: it
// decodes b into *e and reuses the capacity of e's block slices, so that a steady stream of
// events allocates nothing once the slices have grown to the largest event. The result is the
// event DecodeKvEvent returns, except that an event without blocks may hold an empty non-nil
// slice where DecodeKvEvent leaves nil. The slices of *e are overwritten by the next call: a
// caller that keeps the event (or its blocks) past that copies it. Errors are DecodeKvEvent's;
// after an error *e is unspecified. A writer schema other than the embedded one decodes through
// goavro as in DecodeKvEvent (and allocates as it does).
func (c *Codec) DecodeKvEventInto(b []byte, e *KvEvent) error {
	const t = TypeKvEvent
	en, body, err := c.body(t, b)
	if err != nil {
		return err
	}
	if !en.fast {
		ev, err := c.DecodeKvEvent(b)
		if err != nil {
			return err
		}
		*e = ev
		return nil
	}
	err = decodeKvEventBodyInto(body, e)
	if err == nil {
		err = e.validate()
	}
	if err != nil {
		return fastError(t, en.id, err)
	}
	return nil
}
