package producer

import (
	"errors"
	"math"

	"github.com/ckf-stream/ckf-stream/ckf"
	"github.com/ckf-stream/ckf-stream/ckf/internal/u64map"
)

// newMapping is one lineage mapping a store will add.
type newMapping struct {
	ext   ckf.ExternalBlockHash
	canon ckf.CanonicalHash
}

// preparedStore is the pure result of validating one store against a
// source's lineage (producer §7.3 "Prepare"): nothing has been mutated yet.
type preparedStore struct {
	mappings   []newMapping        // new (external, canonical) pairs, in block order
	candidates []ckf.CanonicalHash // canonicals of new mappings, deduplicated
	reoffers   []ckf.CanonicalHash // already-mapped canonicals, deduplicated, minus candidates
}

func (p *preparedStore) empty() bool {
	return len(p.mappings) == 0 && len(p.candidates) == 0 && len(p.reoffers) == 0
}

// prepareStore validates d against lin (the source's lineage, may be nil)
// and returns what a commit would do. It never mutates lin.
//
//   - parent present: it must be in lin (ParentBlockNotFound); the chain
//     starts at its canonical and start_position is not checked;
//   - parent absent: start_position must be absent or 0
//     (InvalidBlockSequence); the chain starts at root;
//   - an external already mapped (in lin or earlier in this batch) to a
//     different canonical rejects the whole event (InvalidBlockSequence);
//     mapped to the same canonical it is a re-offer.
func prepareStore(lin *lineageMap, d *StoreData) (preparedStore, error) {
	return prepareStoreWith(lin, d, nil, nil)
}

// storeScratch is the store path's reusable working memory (one per DcState): the prepared
// mappings and candidates and the owner increments of the event being applied. Nothing in it
// outlives the call that fills it.
type storeScratch struct {
	mappings []newMapping
	cands    []ckf.CanonicalHash
	incs     []canonInc
	chain    []ckf.CanonicalHash
}

// prepareStoreWith is prepareStore building its mappings and candidates in sc's buffers (nil:
// fresh ones); the result aliases them until the next call with sc. With warm set (the state
// the store will commit to), it first computes the event's canonical chain and prefetches
// every block's lineage slot, ownership slot and filter buckets, so that the cache misses of
// the whole event overlap instead of arriving one block at a time (ckf/internal/prefetch).
func prepareStoreWith(lin *lineageMap, d *StoreData, sc *storeScratch, warm *DcState) (p preparedStore, err error) {
	var cands, reoffers uniqueHashes
	if sc != nil {
		p.mappings, cands.list = sc.mappings[:0], sc.cands[:0]
		defer func() { sc.mappings, sc.cands = p.mappings[:0], cands.list[:0] }()
	}
	if len(d.Blocks) == 0 {
		return p, nil
	}
	var chain []ckf.CanonicalHash // the event's canonicals when prefetchStore computed them
	if warm != nil && sc != nil && warm.worthPrefetching() {
		chain = warm.prefetchStore(lin, d, sc)
	}
	var prev ckf.CanonicalHash
	havePrev := false
	if d.HasParent {
		c, ok := lin.Get(d.ParentHash)
		if !ok {
			return p, ckf.NewEventError(ckf.EventParentBlockNotFound, "parent not in source lineage")
		}
		prev, havePrev = c, true
	} else if d.HasStartPosition && d.StartPosition != 0 {
		return p, ckf.NewEventError(ckf.EventInvalidBlockSequence, "non-zero start position without a parent")
	}
	var batch map[ckf.ExternalBlockHash]ckf.CanonicalHash
	if len(d.Blocks) > 32 { // below, a scan of the mappings so far is cheaper than a map
		batch = make(map[ckf.ExternalBlockHash]ckf.CanonicalHash, len(d.Blocks))
	}
	lookupBatch := func(ext ckf.ExternalBlockHash) (ckf.CanonicalHash, bool) {
		if batch != nil {
			c, ok := batch[ext]
			return c, ok
		}
		for _, m := range p.mappings {
			if m.ext == ext {
				return m.canon, true
			}
		}
		return 0, false
	}
	for i, blk := range d.Blocks {
		var canon ckf.CanonicalHash
		switch {
		case chain != nil:
			canon = chain[i]
		case havePrev:
			canon = ckf.CanonicalChild(prev, blk.TokensHash)
		default:
			canon = ckf.CanonicalRoot(blk.TokensHash)
		}
		prev, havePrev = canon, true
		existing, ok := lin.Get(blk.BlockHash)
		if !ok {
			existing, ok = lookupBatch(blk.BlockHash)
		}
		switch {
		case ok && existing != canon:
			return preparedStore{}, ckf.NewEventError(ckf.EventInvalidBlockSequence, "external id remapped to a different chain")
		case ok:
			reoffers.add(canon)
		default:
			p.mappings = append(p.mappings, newMapping{ext: blk.BlockHash, canon: canon})
			if batch != nil {
				batch[blk.BlockHash] = canon
			}
			cands.add(canon)
		}
	}
	p.candidates = cands.list
	for _, c := range reoffers.list {
		if !cands.has(c) {
			p.reoffers = append(p.reoffers, c)
		}
	}
	return p, nil
}

// prefetchFloorBytes is the ownership table size below which the exact state does not
// prefetch: a table that small stays in the CPU's caches (with the lineage and filter it goes
// with), so the prefetches would only cost their instructions.
const prefetchFloorBytes = 1 << 20

// worthPrefetching reports whether the exact state is large enough for prefetching to pay.
func (s *DcState) worthPrefetching() bool { return s.owners.Bytes() >= prefetchFloorBytes }

// prefetchStore prefetches, for every block of d, its lineage slot in lin and its canonical's
// ownership slot and filter buckets, and returns the event's canonical chain (in sc.chain), or
// nil when the parent is unknown (only the lineage is prefetched then; prepare reports the
// error). It reads the parent's mapping to start the chain and changes nothing else.
func (s *DcState) prefetchStore(lin *lineageMap, d *StoreData, sc *storeScratch) []ckf.CanonicalHash {
	for _, blk := range d.Blocks {
		lin.Prefetch(blk.BlockHash)
	}
	var prev ckf.CanonicalHash
	havePrev := false
	if d.HasParent {
		if prev, havePrev = lin.Get(d.ParentHash); !havePrev {
			return nil
		}
	}
	chain := sc.chain[:0]
	for _, blk := range d.Blocks {
		if havePrev {
			prev = ckf.CanonicalChild(prev, blk.TokensHash)
		} else {
			prev, havePrev = ckf.CanonicalRoot(blk.TokensHash), true
		}
		chain = append(chain, prev)
		s.owners.Prefetch(prev)
		s.filter.prefetch(uint64(prev))
	}
	sc.chain = chain[:0]
	return chain
}

func containsHash(s []ckf.CanonicalHash, c ckf.CanonicalHash) bool {
	for _, x := range s {
		if x == c {
			return true
		}
	}
	return false
}

// uniqueHashes is an insertion-ordered set of canonical hashes: a linear
// scan while small (one event's chain, the common case), plus an index map
// once it grows past 16 entries.
type uniqueHashes struct {
	list []ckf.CanonicalHash
	idx  map[ckf.CanonicalHash]struct{}
}

func (u *uniqueHashes) add(c ckf.CanonicalHash) {
	if u.has(c) {
		return
	}
	u.list = append(u.list, c)
	if u.idx != nil {
		u.idx[c] = struct{}{}
	} else if len(u.list) > 16 {
		u.idx = make(map[ckf.CanonicalHash]struct{}, 2*len(u.list))
		for _, x := range u.list {
			u.idx[x] = struct{}{}
		}
	}
}

func (u *uniqueHashes) has(c ckf.CanonicalHash) bool {
	if u.idx != nil {
		_, ok := u.idx[c]
		return ok
	}
	return containsHash(u.list, c)
}

// canonInc is the number of new mappings to one canonical.
type canonInc struct {
	canon ckf.CanonicalHash
	n     uint64
	e     ownerEntry // the canonical's ownership entry, read once and written back once
}

// ownerIncrements returns, per canonical, the number of new mappings to it,
// in first-appearance order. Short lists (the common case: one event's
// blocks) are counted with a linear scan to avoid allocating a map.
func ownerIncrements(ms []newMapping) []canonInc { return ownerIncrementsInto(nil, ms) }

// ownerIncrementsInto is ownerIncrements appending to out[:0].
func ownerIncrementsInto(out []canonInc, ms []newMapping) []canonInc {
	out = out[:0]
	if len(ms) <= 32 {
	next:
		for _, m := range ms {
			for i := range out {
				if out[i].canon == m.canon {
					out[i].n++
					continue next
				}
			}
			out = append(out, canonInc{canon: m.canon, n: 1})
		}
		return out
	}
	idx := make(map[ckf.CanonicalHash]int, len(ms))
	for _, m := range ms {
		if i, ok := idx[m.canon]; ok {
			out[i].n++
			continue
		}
		idx[m.canon] = len(out)
		out = append(out, canonInc{canon: m.canon, n: 1})
	}
	return out
}

// storeBatch is producer §7.3 "Commit": every fallible check (overflow, lineage and
// dirty-window reservations) happens before the first mutation. It returns
// the number of capacity omissions among new candidates (re-offer
// omissions are silent). The only error after the first mutation would be
// a physical insert failing with something other than ErrCapacityExhausted,
// which the mutator cannot produce.
func (s *DcState) storeBatch(src ckf.SourceKey, d *StoreData) (uint64, error) {
	lin := s.lineageOf(src)
	if len(d.Blocks) == 1 && !s.generalStoreOnly {
		return s.storeOne(src, lin, d)
	}
	p, err := prepareStoreWith(lin, d, &s.storeBuf, s)
	if err != nil {
		return 0, err
	}
	if p.empty() {
		return 0, nil
	}
	// The owner map is large and cold: each new canonical's entry is read once here and written
	// back once after its admission. incs lists the new mappings' canonicals in first-appearance
	// order, which is p.candidates' order (both come from the same walk of the new mappings).
	incs := ownerIncrementsInto(s.storeBuf.incs, p.mappings)
	s.storeBuf.incs = incs[:0]
	var nrc, nrr uint64
	for i := range incs {
		ci := &incs[i]
		ci.e, _ = s.owners.Get(ci.canon)
		if uint64(ci.e.owners())+ci.n > math.MaxUint32 {
			return 0, ckf.NewEventError(ckf.EventOwnershipDegreeOverflow, "owner count would exceed 2^32-1")
		}
		if !ci.e.resident {
			nrc++
		}
	}
	if err := s.reserve(siteLineage, uint64(len(p.mappings))); err != nil {
		return 0, err
	}
	for _, c := range p.reoffers {
		if e, _ := s.owners.Get(c); !e.resident {
			nrr++
		}
	}
	need := satAdd(satMul(nrc, s.cfg.MaxKicks+1), nrr)
	if err := s.reserveDirty(min(need, s.format.BucketCount)); err != nil {
		return 0, err
	}

	// Mutation starts here.
	if len(p.mappings) > 0 {
		if lin == nil {
			lin = u64map.New[ckf.ExternalBlockHash, ckf.CanonicalHash](len(p.mappings))
			s.lineage[src] = lin
		}
		for _, m := range p.mappings {
			lin.Put(m.ext, m.canon)
		}
		for i := range incs {
			ci := &incs[i]
			created := ci.e.owners() == 0
			ci.e.setOwners(ci.e.owners() + uint32(ci.n))
			if created && s.delegate != nil {
				s.delegate.OnCreate(ci.canon)
			}
		}
		s.contributions += uint64(len(p.mappings))
	}
	var omissions uint64
	for i := range incs {
		ci := &incs[i]
		ok, err := s.admitEntry(ci.canon, &ci.e, s.cfg.MaxKicks)
		s.owners.Put(ci.canon, ci.e)
		if err != nil {
			for _, rest := range incs[i+1:] {
				s.owners.Put(rest.canon, rest.e)
			}
			return omissions, err
		}
		if !ok {
			omissions++
		}
	}
	for _, c := range p.reoffers {
		if _, err := s.admit(c, 0); err != nil {
			return omissions, err
		}
	}
	return omissions, nil
}

// admit physically inserts a non-resident canonical with maxKicks
// relocations. It returns (true, nil) if resident afterwards, (false, nil)
// on a capacity omission (table unchanged).
func (s *DcState) admit(c ckf.CanonicalHash, maxKicks uint64) (bool, error) {
	e := s.owners.Find(c)
	if e == nil {
		return false, ckf.NewEventError(ckf.EventIndexerInvariantViolation, "admitted canonical has no ownership entry")
	}
	return s.admitEntry(c, e, maxKicks)
}

// admitEntry is admit on an entry the caller holds: it sets e.resident and leaves the owner map
// to the caller, who writes e back.
func (s *DcState) admitEntry(c ckf.CanonicalHash, e *ownerEntry, maxKicks uint64) (bool, error) {
	if e.resident {
		return true, nil
	}
	ts, err := s.filter.Insert(uint64(c), maxKicks)
	if err != nil {
		if errors.Is(err, ckf.ErrCapacityExhausted) {
			return false, nil
		}
		return false, err
	}
	s.markTouches(ts)
	e.resident = true
	s.residentCount++
	return true, nil
}

func satMul(a, b uint64) uint64 {
	if a != 0 && b > math.MaxUint64/a {
		return math.MaxUint64
	}
	return a * b
}
