package streams_test

import (
	"strings"
	"testing"

	"github.com/ckf-stream/ckf-stream/streams"
)

// TestMirroredNames: MirrorMaker's default policy prefixes the source region's alias, the
// identity policy keeps the name; the rules refuse an unknown policy, an alias a dot would split
// and a mirrored name beyond Kafka's 249 characters.
func TestMirroredNames(t *testing.T) {
	if got := streams.MirroredTopic(streams.MirrorPolicyDefault, "eu", "ckf-lanes"); got != "eu.ckf-lanes" {
		t.Fatalf("default policy: %q", got)
	}
	if got := streams.MirroredTopic(streams.MirrorPolicyIdentity, "eu", "ckf-lanes"); got != "ckf-lanes" {
		t.Fatalf("identity policy: %q", got)
	}
	if got := streams.MirroredTopic(streams.MirrorPolicyDefault, "eu", ""); got != "" {
		t.Fatalf("an unused topic: %q", got)
	}
	src := streams.MirroredLaneSource(streams.MirrorPolicyDefault, "eu", "p-ckf-lanes", "p-ckf-snapshot-index")
	if src.Topic != "eu.p-ckf-lanes" || src.SnapshotIndex != "eu.p-ckf-snapshot-index" || !src.Mirrored || src.Region != "eu" {
		t.Fatalf("source %+v", src)
	}
	if s := src.String(); s != "eu.p-ckf-lanes (mirrored from eu)" {
		t.Fatalf("String %q", s)
	}
	for _, ok := range []string{streams.MirrorPolicyDefault, streams.MirrorPolicyIdentity} {
		if err := streams.CheckMirrorPolicy(ok); err != nil {
			t.Fatalf("%s: %v", ok, err)
		}
	}
	if err := streams.CheckMirrorPolicy("Default"); err == nil || !strings.Contains(err.Error(), `"Default"`) {
		t.Fatalf("unknown policy: %v", err)
	}
	for _, bad := range []string{"", "eu.west", "eu west", "eu/1"} {
		if err := streams.CheckRegionAlias(bad); err == nil {
			t.Fatalf("alias %q accepted", bad)
		}
	}
	if err := streams.CheckRegionAlias("us-east_1"); err != nil {
		t.Fatal(err)
	}
	if err := streams.CheckMirroredTopic(strings.Repeat("x", 250)); err == nil {
		t.Fatal("a 250-character name accepted")
	}
}
