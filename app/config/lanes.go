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

// LaneCount returns the lane count of the indexer's table: the highest lane of the lane map + 1
// (a map of lanes 0..3 builds a 4-lane table, of lanes 0..15 the reference's 16), 0 for an empty
// map. Lanes outside [0,63] are not counted (Validate refuses them). The table's rows, and what
// a query reads, follow this count (consumer §16).
func (ix Indexer) LaneCount() int {
	n := 0
	for l := range ix.Lanes {
		if l >= 0 && l < ckf.MaxLanes && l+1 > n {
			n = l + 1
		}
	}
	return n
}

// LanePartitions returns the partition count the lane topic (and the relays' checkpoint topic,
// whose partition p is lane p's relay) needs for the lane map: one per lane of LaneCount, and at
// least ckf.LaneCount (16), the count of every deployment before consumer §16, so that existing
// topics and the default layout stay as they were.
func (ix Indexer) LanePartitions() int {
	return max(ckf.LaneCount, ix.LaneCount())
}
