package replay_test

import (
	"strings"
	"testing"
	"time"

	"github.com/ckf-stream/ckf-stream/app/config"
	"github.com/ckf-stream/ckf-stream/app/replay"
)

// TestReplayRegions replays two minutes of the trace with its four DCs split over two regions,
// each its own embedded cluster, the lanes crossing between them through the mirror with 20 ms
// of one-way delay: every region's indexer answers every request for every DC, each
// under-report explained by a store that indexer did not show yet; every store becomes visible
// in both regions, the other region's no sooner than the WAN delay; the lanes cross the WAN
// and the KV events do not (the mirror copies only lanes, snapshot index and control).
func TestReplayRegions(t *testing.T) {
	const delay = 20 * time.Millisecond
	o := options(t, 10*time.Minute, 2*time.Minute)
	o.Seeds, o.Regions, o.WANDelay = 1, 2, delay
	rep := runReplay(t, o)
	lv := rep.Live
	if len(lv.Regions) != 2 || lv.WANDelayMs != 20 {
		t.Fatalf("regions %d, WAN delay %v ms", len(lv.Regions), lv.WANDelayMs)
	}
	if lv.Answered != rep.Requests || lv.Result.Completed != rep.Requests {
		t.Errorf("%d requests, %d answered, %d completed", rep.Requests, lv.Answered, lv.Result.Completed)
	}
	for i, rl := range lv.Regions {
		if rl.Alias != replay.RegionAlias(i) || len(rl.DCs) != 2 || rl.DCs[0] != 2*i {
			t.Errorf("region %d: alias %q, DCs %v", i, rl.Alias, rl.DCs)
		}
		if rl.Queries != rep.Requests || rl.Answered != rl.Queries {
			t.Errorf("region %s: %d requests, %d asked, %d answered", rl.Alias, rep.Requests, rl.Queries, rl.Answered)
		}
		if rl.Compared != 4*rl.Answered || len(rl.PerDC) != 4 {
			t.Errorf("region %s: %d compared of %d answers, %d DCs", rl.Alias, rl.Compared, rl.Answered, len(rl.PerDC))
		}
		for _, d := range rl.PerDC {
			if un := d.UnderReports - d.UnderExplained; un != 0 {
				t.Errorf("region %s, DC %d: %d under-reports not explained by visibility", rl.Alias, d.DC, un)
			}
			if d.Local != (replay.RegionOf(d.DC, 4, 2) == i) || d.Exact == 0 {
				t.Errorf("region %s, DC %d: local %v, %d exact of %d", rl.Alias, d.DC, d.Local, d.Exact, d.Compared)
			}
		}
		for what, v := range map[string]replay.Visibility{"local": rl.VisibleLocal, "remote": rl.VisibleRemote} {
			if v.Events == 0 || v.NotSeen != 0 {
				t.Errorf("region %s, %s stores: %d seen, %d never", rl.Alias, what, v.Events, v.NotSeen)
			}
		}
		// A remote store crosses the mirror, which holds every record the WAN delay.
		if rl.VisibleRemote.P50Ms < 20 {
			t.Errorf("region %s: remote stores visible at p50 %.1f ms, under the WAN delay", rl.Alias, rl.VisibleRemote.P50Ms)
		}
		if rl.KVBytes == 0 || rl.DeltaBytesOut == 0 || rl.LaneBytesOut < rl.DeltaBytesOut+rl.SnapshotBytesOut || rl.ControlBytesOut == 0 || rl.MirrorFailures != 0 {
			t.Errorf("region %s: %d KV bytes, %d lane bytes (%d of deltas, %d of snapshots) and %d control bytes out, %d mirror failures",
				rl.Alias, rl.KVBytes, rl.LaneBytesOut, rl.DeltaBytesOut, rl.SnapshotBytesOut, rl.ControlBytesOut, rl.MirrorFailures)
		}
	}
	checkTwoStage(t, rep)
}

// TestReplayRegionsRefused: --regions beyond the DCs, with the bridges, negative, or with a
// negative WAN delay is refused before anything starts, naming the flag; so is a replay over
// several regions on a configured cluster.
func TestReplayRegionsRefused(t *testing.T) {
	for _, tc := range []struct {
		edit func(*replay.Options)
		want string
	}{
		{func(o *replay.Options) { o.Regions = 5 }, "--regions 5 is above --dcs 4"},
		{func(o *replay.Options) { o.Regions = -1 }, "--regions -1 is negative"},
		{func(o *replay.Options) { o.Regions, o.ViaBridge = 2, true }, "--regions 2 with --via-bridge"},
		{func(o *replay.Options) { o.Regions, o.WANDelay = 2, -time.Millisecond }, "--wan-delay -1ms is negative"},
	} {
		o := options(t, 10*time.Minute, time.Minute)
		o.Out = &syncBuffer{}
		tc.edit(&o)
		if err := o.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Validate = %v, want %q", err, tc.want)
		}
	}
}

// TestRegionConfigs: with the DCs over regions, Configure gives the application (region a) the
// other regions' lanes as remote, by their aliases under MirrorMaker's default policy, and the
// other regions as its relays' remote regions.
func TestRegionConfigs(t *testing.T) {
	o := options(t, 10*time.Minute, time.Minute)
	o.Regions, o.Fleet.DCs = 3, 6
	cfg := config.Default()
	replay.Configure(&cfg, o)
	if got := cfg.Indexer.RemoteLanes.String(); got != "2=b,3=b,4=c,5=c" {
		t.Errorf("remote lanes %q", got)
	}
	if got := cfg.Relay.RemoteRegions; len(got) != 2 || got[0] != "b" || got[1] != "c" {
		t.Errorf("remote regions %v", got)
	}
	if cfg.Indexer.MirrorPolicy != "default" {
		t.Errorf("mirror policy %q", cfg.Indexer.MirrorPolicy)
	}
	one := config.Default()
	o.Regions = 1
	replay.Configure(&one, o)
	if len(one.Indexer.RemoteLanes) != 0 || len(one.Relay.RemoteRegions) != 0 {
		t.Errorf("one region: remote lanes %v, remote regions %v", one.Indexer.RemoteLanes, one.Relay.RemoteRegions)
	}
}
