package config

import (
	"github.com/ckf-stream/ckf-stream/ckf"
	"github.com/ckf-stream/ckf-stream/ckf/index"
	"github.com/ckf-stream/ckf-stream/streams/relay"
)

// LaneOwners returns the lane map (indexer.lanes) as the pools that own the lanes: lane l is
// owned by (the indexer domain, DC Lanes[l]). It is the one reading of the lane map that the
// indexer's manifest, the relay's ownership check and the per-lane relays of demo and replay
// share. Its lane rule is the relay library's (relay.CheckLane), as Validate's is; errors are
// *FieldError naming indexer.domain or indexer.lanes.
func (ix Indexer) LaneOwners() (index.ManifestLanes, error) {
	var owners index.ManifestLanes
	if len(ix.Lanes) == 0 {
		return owners, nil
	}
	domain, err := ix.DomainID()
	if err != nil {
		return owners, err
	}
	for _, l := range ix.Lanes.Lanes() {
		if err := relay.CheckLane(l); err != nil {
			return owners, &FieldError{Field: "indexer.lanes", Reason: "lane " + err.Error(), Err: err}
		}
		owners[l] = &ckf.PoolID{Domain: domain, Dc: ckf.DcID(ix.Lanes[l])}
	}
	return owners, nil
}
