package replay

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/ckf-stream/ckf-stream/app/config"
	"github.com/ckf-stream/ckf-stream/app/indexer"
	"github.com/ckf-stream/ckf-stream/app/kafka"
	"github.com/ckf-stream/ckf-stream/app/relay"
	"github.com/ckf-stream/ckf-stream/eval"
	"github.com/ckf-stream/ckf-stream/schemas"
	"github.com/ckf-stream/ckf-stream/streams"
	"go.uber.org/fx"
	"go.uber.org/zap"
)

// The replay across regions (--regions N, design §8): the DCs split over N regions in
// contiguous blocks of DC indices, each region with its own embedded cluster holding its DCs'
// KV topics, lanes, snapshot index and control topic, its DCs' relays and worker stages, and
// an indexer of every lane that reads the other regions' lanes from the copies the mirror
// (mirror.go) makes of them, as a deployment's indexer reads MirrorMaker's
// (indexer.remote_lanes, relay.remote_regions). Region 0 is the application's own cluster and
// indexer; the others are built here beside them.

// ErrRegionsNeedEmbedded is returned (wrapped) by a replay over several regions on a
// configured cluster: each region needs a cluster of its own, and the replay starts them
// embedded.
var ErrRegionsNeedEmbedded = errors.New("--regions above 1 runs every region on an embedded broker of its own: leave kafka.brokers (KAFKA_BROKERS) unset")

// maxRegions bounds --regions: one alias letter per region (RegionAlias).
const maxRegions = 16

// RegionAlias is region i's MirrorMaker alias: a, b, c, ...
func RegionAlias(i int) string { return string(rune('a' + i)) }

// RegionOf is the region of DC index d when dcs DCs are split over n regions: contiguous
// blocks, every region holding at least one DC when n <= dcs.
func RegionOf(d, dcs, n int) int {
	if n <= 1 {
		return 0
	}
	return d * n / dcs
}

// region is one region of the replay.
type region struct {
	alias  string
	cfg    config.Config // the region's configuration: its indexer's remote lanes, its relays' remote regions
	conn   *kafka.Connection
	codec  *schemas.Codec
	ix     *indexer.Indexer
	relays []*relay.LaneRelay
	dcs    []int // its DC indices (= lanes)
}

// regionConfig is cfg (after Configure's lane map) for region i of o's regions: every lane of
// another region is remote, read from that region's copies under MirrorMaker's default policy,
// and every other region's indexers ask this region's relays for snapshots. One region: cfg.
func regionConfig(cfg config.Config, o Options, i int) config.Config {
	n := o.regions()
	if n <= 1 {
		return cfg
	}
	cfg.Indexer.MirrorPolicy = streams.MirrorPolicyDefault
	cfg.Indexer.RemoteLanes = config.LaneRegions{}
	for _, lane := range cfg.Indexer.Lanes.Lanes() {
		if reg := RegionOf(lane, o.Fleet.DCs, n); reg != i {
			cfg.Indexer.RemoteLanes[lane] = RegionAlias(reg)
		}
	}
	cfg.Relay.RemoteRegions = nil
	for j := range n {
		if j != i {
			cfg.Relay.RemoteRegions = append(cfg.Relay.RemoteRegions, RegionAlias(j))
		}
	}
	return cfg
}

// relayConfig is the region's configuration for relay.PerLane: its own lanes only.
func (reg *region) relayConfig() config.Config {
	c := reg.cfg
	c.Indexer.Lanes = config.LaneMap{}
	for _, d := range reg.dcs {
		c.Indexer.Lanes[d] = reg.cfg.Indexer.Lanes[d]
	}
	return c
}

// openRegions builds the regions: region 0 on conn; with several, each other one on an
// embedded cluster of its own (started, its layout ensured, at the application's start and
// closed at its stop), and the mirror between them, started before any relay or indexer reads
// a copy.
func (r *replay) openRegions(lc fx.Lifecycle, conn *kafka.Connection) error {
	n := r.opts.regions()
	if n > 1 && !conn.Cluster.Embedded {
		return fmt.Errorf("replay: %w", ErrRegionsNeedEmbedded)
	}
	for i := range n {
		reg := &region{alias: RegionAlias(i), cfg: regionConfig(r.cfg, r.opts, i), conn: conn, codec: r.codec}
		if i > 0 {
			c, err := kafka.New(kafka.Params{Config: reg.cfg.Kafka, Topics: conn.Topics, Registry: conn.Registry,
				Indexer: reg.cfg.Indexer, Relay: reg.cfg.Relay, Logger: r.log.With(zap.String("region", reg.alias))})
			if err != nil {
				return fmt.Errorf("replay: region %s: %w", reg.alias, err)
			}
			lc.Append(fx.Hook{OnStart: c.Start, OnStop: func(context.Context) error { c.Close(); return nil }})
			if reg.codec, err = c.Codec(); err != nil {
				return err
			}
			reg.conn = c
		}
		r.regions = append(r.regions, reg)
	}
	for d := range r.opts.Fleet.DCs {
		i := RegionOf(d, r.opts.Fleet.DCs, n)
		r.regionOf = append(r.regionOf, i)
		r.regions[i].dcs = append(r.regions[i].dcs, d)
	}
	if n > 1 {
		r.mirror = newMirror(r.regions, r.opts.WANDelay, r.log)
		lc.Append(fx.Hook{OnStart: r.mirror.Start, OnStop: r.mirror.Stop})
	}
	return nil
}

// wireIndexers builds the indexers of regions 1.. (region 0's is the application's), each on
// its region's cluster with its region's remote lanes, started after the relays and stopped
// before them. Their metrics are not recorded: one process's metrics have one indexer.
func (r *replay) wireIndexers(lc fx.Lifecycle) error {
	for _, reg := range r.regions[1:] {
		ix, err := indexer.New(indexer.Params{Config: reg.cfg.Indexer, All: reg.cfg, Kafka: reg.cfg.Kafka, Connection: reg.conn,
			Logger: r.log.With(zap.String("region", reg.alias)), Shutdowner: r.sd})
		if err != nil {
			return fmt.Errorf("replay: indexer of region %s: %w", reg.alias, err)
		}
		reg.ix = ix
		lc.Append(fx.Hook{OnStart: ix.Start, OnStop: ix.Stop})
	}
	return nil
}

// regionsLive finishes the regions' figures at the end of the live run: query latency,
// visibility of local and remote stores (prs, by region), and the bytes of the mirror's flows
// out of each region against the KV bytes of its DCs (em). Nil in one region.
func (r *replay) regionsLive(rls []*RegionLive, prs []*prober, em *emitter) []*RegionLive {
	if rls == nil {
		return nil
	}
	for i, rl := range rls {
		reg := r.regions[i]
		slices.Sort(rl.queryLat)
		rl.QueryP50Ms, rl.QueryP99Ms = 1000*eval.Quantile(rl.queryLat, 0.5), 1000*eval.Quantile(rl.queryLat, 0.99)
		local := func(d int) bool { return r.regionOf[d] == i }
		for d := range rl.PerDC {
			rl.PerDC[d].DC, rl.PerDC[d].Local = d, local(d)
		}
		rl.VisibleLocal = prs[i].summariseOf(local)
		rl.VisibleRemote = prs[i].summariseOf(func(d int) bool { return !local(d) })
		for _, d := range reg.dcs {
			rl.KVBytes += em.kvBytes[d].Load()
		}
		for _, f := range r.mirror.flows {
			if f.from == reg {
				rl.SnapshotBytesOut += f.snapshot.Load()
				rl.DeltaBytesOut += f.delta.Load()
				rl.LaneBytesOut += f.snapshot.Load() + f.delta.Load() + f.laneOther.Load() + f.index.Load()
				rl.ControlBytesOut += f.control.Load()
				rl.MirroredRecords += f.records.Load()
				rl.MirrorFailures += f.failed.Load()
			}
		}
		rl.LaneBytesPerRegion = float64(rl.LaneBytesOut) / float64(len(rls)-1)
		if rl.KVBytes > 0 {
			rl.LaneOverKV = rl.LaneBytesPerRegion / float64(rl.KVBytes)
			rl.DeltaOverKV = float64(rl.DeltaBytesOut) / float64(len(rls)-1) / float64(rl.KVBytes)
		}
	}
	return rls
}
