package config_test

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/ckf-stream/ckf-stream/app/config"
	"github.com/ckf-stream/ckf-stream/streams"
)

// TestRemoteLanes: indexer.remote_lanes in a file, a variable and a flag; the lane sources it
// gives under both mirror policies (MirrorMaker's names, the library's rule); and each refusal
// names its setting.
func TestRemoteLanes(t *testing.T) {
	file := writeFile(t, "c.yaml", `
topic_prefix: p-
indexer:
  lanes: {0: 0xa1, 8: 0xb1, 9: 0xb2}
  remote_lanes: {8: eu, "9": eu}
`)
	cfg := mustLoad(t, []string{"--config", file}, nil)
	if want := (config.LaneRegions{8: "eu", 9: "eu"}); !reflect.DeepEqual(cfg.Indexer.RemoteLanes, want) {
		t.Fatalf("remote_lanes = %v, want %v", cfg.Indexer.RemoteLanes, want)
	}
	src := cfg.Indexer.LaneSources(cfg.Topics)
	want := streams.LaneSource{Region: "eu", Topic: "eu.p-ckf-lanes", SnapshotIndex: "eu.p-ckf-snapshot-index", Mirrored: true}
	if len(src) != 2 || src[8] != want || src[9] != want {
		t.Fatalf("lane sources %+v, want lanes 8 and 9 from %+v", src, want)
	}
	if _, local := src[0]; local {
		t.Fatal("lane 0 is local and has no source of its own")
	}

	// Variable and flag syntax; the flag wins; identity keeps the names.
	got := mustLoad(t, []string{"--indexer.remote_lanes=9=us", "--indexer.mirror_policy=identity", "--indexer.lanes=8=1,9=2"},
		map[string]string{"CKF_INDEXER_REMOTE_LANES": "8=eu"})
	if want := (config.LaneRegions{9: "us"}); !reflect.DeepEqual(got.Indexer.RemoteLanes, want) || got.Indexer.RemoteLanes.String() != "9=us" {
		t.Fatalf("flag remote_lanes = %v", got.Indexer.RemoteLanes)
	}
	if s := got.Indexer.LaneSources(got.Topics)[9]; s.Topic != got.Topics.Lanes || s.SnapshotIndex != got.Topics.SnapshotIndex || !s.Mirrored {
		t.Fatalf("identity policy: %+v", s)
	}
	if cfg := mustLoad(t, nil, nil); cfg.Indexer.MirrorPolicy != streams.MirrorPolicyDefault || cfg.Indexer.LaneSources(cfg.Topics) != nil {
		t.Fatalf("defaults: policy %q, sources %v", cfg.Indexer.MirrorPolicy, cfg.Indexer.LaneSources(cfg.Topics))
	}

	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--indexer.mirror_policy=Default"}, `config: indexer.mirror_policy: "Default" is not default or identity`},
		{[]string{"--indexer.lanes=8=1", "--indexer.remote_lanes=9=eu"}, "config: indexer.remote_lanes: lane 9 is not in indexer.lanes (8=0x1)"},
		{[]string{"--indexer.lanes=8=1", "--indexer.remote_lanes=8=eu.west"}, `config: indexer.remote_lanes: lane 8: region alias "eu.west" holds '.'`},
		{[]string{"--indexer.lanes=8=1", "--indexer.remote_lanes=8="}, "config: indexer.remote_lanes: lane 8: a region alias must not be empty"},
		{[]string{"--indexer.lanes=8=1", "--indexer.remote_lanes=8=" + strings.Repeat("x", 240)}, "above Kafka's 249"},
	} {
		_, err := config.Load(config.Sources{Args: tc.args, LookupEnv: env(nil)})
		if err == nil || !strings.Contains(err.Error(), tc.want) || !errors.Is(err, config.ErrInvalid) {
			t.Errorf("%v: %v, want %q", tc.args, err, tc.want)
		}
	}
	// Printed and loaded back, as YAML and as JSON.
	for _, format := range []string{"yaml", "json"} {
		out, err := cfg.Marshal(format)
		if err != nil {
			t.Fatal(err)
		}
		back := mustLoad(t, []string{"--config", writeFile(t, "printed."+format, string(out))}, nil)
		if !reflect.DeepEqual(back.Indexer.RemoteLanes, cfg.Indexer.RemoteLanes) {
			t.Fatalf("%s round trip: remote_lanes %v, want %v\n%s", format, back.Indexer.RemoteLanes, cfg.Indexer.RemoteLanes, out)
		}
	}
	for _, bad := range []string{"--indexer.remote_lanes=8", "--indexer.remote_lanes=x=eu", "--indexer.remote_lanes=8=a,8=b"} {
		if _, err := config.Load(config.Sources{Args: []string{bad}, LookupEnv: env(nil)}); err == nil {
			t.Errorf("%s accepted", bad)
		}
	}
}

// TestRelayRemoteRegions: relay.remote_regions names the copies of the other regions' control
// topics the relay reads; a bad or repeated alias is refused naming the setting.
func TestRelayRemoteRegions(t *testing.T) {
	cfg := mustLoad(t, []string{"--relay.remote_regions=eu, us"}, nil)
	if got, want := cfg.Relay.MirroredControl(cfg.Topics), []string{"eu." + cfg.Topics.Control, "us." + cfg.Topics.Control}; !reflect.DeepEqual(got, want) {
		t.Fatalf("mirrored control topics %v, want %v", got, want)
	}
	if got := mustLoad(t, nil, nil).Relay.MirroredControl(cfg.Topics); got != nil {
		t.Fatalf("no remote regions: %v", got)
	}
	for _, tc := range []struct{ arg, want string }{
		{"--relay.remote_regions=eu,eu", `config: relay.remote_regions: region "eu" is listed twice`},
		{"--relay.remote_regions=e.u", `config: relay.remote_regions: region alias "e.u" holds '.'`},
	} {
		_, err := config.Load(config.Sources{Args: []string{tc.arg}, LookupEnv: env(nil)})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", tc.arg, err, tc.want)
		}
	}
}
