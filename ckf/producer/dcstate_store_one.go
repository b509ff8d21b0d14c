package producer

import (
	"math"

	"github.com/ckf-stream/ckf-stream/ckf"
	"github.com/ckf-stream/ckf-stream/ckf/internal/u64map"
)

// storeOne is storeBatch for an event of exactly one block, the most common shape at cadence 1
// (an engine stores one block per event while it decodes). The outcome, the order of the
// checks, the reservations (and so the test hook's sites) and every mutation are those of
// prepareStoreWith followed by storeBatch's commit; what it leaves out is their general
// machinery: the deduplicating candidate and re-offer lists, the owner-increment list and a
// second walk of the block list. The block is looked up once in the lineage and its canonical
// once in the ownership table, whose record is then updated in place.
// TestStoreOneMatchesGeneralPath checks it against the general path.
func (s *DcState) storeOne(src ckf.SourceKey, lin *lineageMap, d *StoreData) (uint64, error) {
	blk := d.Blocks[0]
	warm := s.worthPrefetching()
	if warm {
		lin.Prefetch(blk.BlockHash)
	}
	var canon ckf.CanonicalHash
	if d.HasParent {
		prev, ok := lin.Get(d.ParentHash)
		if !ok {
			return 0, ckf.NewEventError(ckf.EventParentBlockNotFound, "parent not in source lineage")
		}
		canon = ckf.CanonicalChild(prev, blk.TokensHash)
	} else {
		if d.HasStartPosition && d.StartPosition != 0 {
			return 0, ckf.NewEventError(ckf.EventInvalidBlockSequence, "non-zero start position without a parent")
		}
		canon = ckf.CanonicalRoot(blk.TokensHash)
	}
	if warm {
		s.owners.Prefetch(canon)
		s.filter.prefetch(uint64(canon))
	}
	if existing, mapped := lin.Get(blk.BlockHash); mapped {
		if existing != canon {
			return 0, ckf.NewEventError(ckf.EventInvalidBlockSequence, "external id remapped to a different chain")
		}
		return 0, s.reofferOne(canon)
	}

	e := s.owners.Find(canon) // nil: a new canonical, owners 0, not resident
	if e != nil && uint64(e.owners())+1 > math.MaxUint32 {
		return 0, ckf.NewEventError(ckf.EventOwnershipDegreeOverflow, "owner count would exceed 2^32-1")
	}
	if err := s.reserve(siteLineage, 1); err != nil {
		return 0, err
	}
	var need uint64
	if e == nil || !e.resident {
		need = s.cfg.MaxKicks + 1 // as storeBatch: MaxKicks is validated far below 2^64-1
	}
	if err := s.reserveDirty(min(need, s.format.BucketCount)); err != nil {
		return 0, err
	}

	// Mutation starts here.
	if lin == nil {
		lin = u64map.New[ckf.ExternalBlockHash, ckf.CanonicalHash](1)
		s.lineage[src] = lin
	}
	lin.Put(blk.BlockHash, canon)
	created := e == nil
	if created {
		e, _ = s.owners.Upsert(canon) // the lineage is another map: e stays valid below
	}
	e.setOwners(e.owners() + 1)
	if created && s.delegate != nil {
		s.delegate.OnCreate(canon)
	}
	s.contributions++
	ok, err := s.admitEntry(canon, e, s.cfg.MaxKicks)
	if err != nil || ok {
		return 0, err
	}
	return 1, nil
}

// reofferOne is the commit of a one-block store whose block the source already maps to the
// same canonical: the re-offer is admitted again, relocation-free, if it is not resident (a
// capacity omission stays silent), exactly as storeBatch commits a re-offer.
func (s *DcState) reofferOne(canon ckf.CanonicalHash) error {
	if err := s.reserve(siteLineage, 0); err != nil {
		return err
	}
	var need uint64
	if e, _ := s.owners.Get(canon); !e.resident {
		need = 1
	}
	if err := s.reserveDirty(min(need, s.format.BucketCount)); err != nil {
		return err
	}
	_, err := s.admit(canon, 0)
	return err
}
