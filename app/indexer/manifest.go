package indexer

import (
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/ckf-stream/ckf-stream/app/config"
	"github.com/ckf-stream/ckf-stream/ckf"
	"github.com/ckf-stream/ckf-stream/ckf/index"
)

// Require checks what processor indexer needs beyond config.Config.Validate, which accepts an
// empty indexer section because other commands (relay, query, loadgen) do not read it: the
// indexer domain and at least one lane. Every missing field is a *config.FieldError, joined with
// errors.Join, so the command reports each one by its path and exits with status 2.
func Require(ix config.Indexer) error {
	var errs []error
	if ix.Domain == "" {
		errs = append(errs, &config.FieldError{Field: "indexer.domain",
			Reason: "is required by the indexer (<32 hex digits>:<32 hex digits>; the relays' domain)"})
	}
	if len(ix.Lanes) == 0 {
		errs = append(errs, &config.FieldError{Field: "indexer.lanes",
			Reason: "is required by the indexer: map at least one lane to its DC (lane=dc pairs, e.g. 0=0x1a)"})
	}
	return errors.Join(errs...)
}

// Format returns the CKF format every lane of ix must publish: ix.Seed and the bucket count of
// config.Indexer.EffectiveBucketCount (bucket_count when set, else derived from
// expected_blocks_per_dc exactly as the relays derive theirs with ckf.BucketCountFor).
func Format(ix config.Indexer) (ckf.FormatIdentity, error) {
	buckets := ix.BucketCount
	if buckets == 0 {
		n, err := ckf.BucketCountFor(ix.ExpectedBlocksPerDC)
		if err != nil {
			return ckf.FormatIdentity{}, &config.FieldError{Field: "indexer.expected_blocks_per_dc",
				Reason: fmt.Sprintf("%d gives no valid bucket count: %v", ix.ExpectedBlocksPerDC, err), Err: err}
		}
		buckets = n
	}
	f := ckf.NewFormatIdentity(ix.Seed, buckets)
	if err := f.Validate(); err != nil {
		return ckf.FormatIdentity{}, &config.FieldError{Field: "indexer.bucket_count",
			Reason: fmt.Sprintf("%d is not a valid CKF bucket count: %v", buckets, err), Err: err}
	}
	return f, nil
}

// ConsumerInstance returns configured when it is not 0, and otherwise a random non-zero id from
// crypto/rand. Replicas must hold distinct ids (each mints its own lane leases with it); 64
// random bits make a collision between replicas negligible.
func ConsumerInstance(configured uint64) (ckf.ConsumerInstanceID, error) {
	if configured != 0 {
		return ckf.ConsumerInstanceID(configured), nil
	}
	var b [8]byte
	for {
		if _, err := rand.Read(b[:]); err != nil {
			return 0, fmt.Errorf("indexer: random consumer instance id: %w", err)
		}
		if id := binary.LittleEndian.Uint64(b[:]); id != 0 {
			return ckf.ConsumerInstanceID(id), nil
		}
	}
}

// BuildManifest builds the indexer's manifest from its configuration: the domain, the format,
// and lane l owned by the pool (domain, DC ix.Lanes[l]), for a table of ix.LaneCount() lanes. consumer is the replica's consumer
// instance id (see ConsumerInstance). The warnings are ckf's non-fatal findings (a
// default-derived domain across several DCs), for the caller to log. Errors are
// *config.FieldError for a field that cannot be used, or ckf's *ckf.ManifestError wrapped in one
// naming indexer.lanes.
func BuildManifest(ix config.Indexer, consumer ckf.ConsumerInstanceID) (index.Manifest, []index.ManifestWarning, error) {
	if err := Require(ix); err != nil {
		return index.Manifest{}, nil, err
	}
	domain, err := ix.DomainID()
	if err != nil {
		return index.Manifest{}, nil, err
	}
	format, err := Format(ix)
	if err != nil {
		return index.Manifest{}, nil, err
	}
	lanes, err := ix.LaneOwners()
	if err != nil {
		return index.Manifest{}, nil, err
	}
	// The table holds the lanes of the map and no more (consumer §16): a 4-lane map builds a
	// 4-lane table, whose rows are a quarter of the 16-lane ones.
	m, warnings, err := index.NewManifestN(consumer, domain, format, lanes[:ix.LaneCount()])
	if err != nil {
		return index.Manifest{}, nil, &config.FieldError{Field: "indexer.lanes", Reason: err.Error(), Err: err}
	}
	return m, warnings, nil
}
