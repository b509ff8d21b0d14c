package kafka_test

import (
	"context"
	"encoding/base64"
	"errors"
	"testing"
	"time"

	"github.com/ckf-stream/ckf-stream/app/config"
	"github.com/ckf-stream/ckf-stream/app/kafka"
	"github.com/ckf-stream/ckf-stream/schemas"
	"github.com/twmb/franz-go/pkg/sr/srfake"
)

// TestCodecFollowsTopicNames: with topic_prefix set, every record type's topic and registry
// subject in the codec are the configured names, the snapshot index's included.
func TestCodecFollowsTopicNames(t *testing.T) {
	cfg, err := config.Load(config.Sources{Args: []string{"--topic_prefix=staging.", "--topics.queries=q.v2"},
		LookupEnv: func(string) (string, bool) { return "", false }})
	if err != nil {
		t.Fatal(err)
	}
	codec, err := kafka.NewCodec(cfg.Topics)
	if err != nil {
		t.Fatal(err)
	}
	for _, rt := range schemas.RecordTypes() {
		want := cfg.Topics.Of(rt)
		if want == "" {
			t.Fatalf("%s: no configured topic", rt)
		}
		if got := codec.Topic(rt); got != want {
			t.Errorf("%s: codec topic %q, configured %q", rt, got, want)
		}
		if got := codec.Subject(rt); got != want+"-value" {
			t.Errorf("%s: registry subject %q, want %q", rt, got, want+"-value")
		}
	}
	if got := codec.Subject(schemas.TypeSnapshotIndex); got != "staging.ckf-snapshot-index-value" {
		t.Errorf("snapshot index subject %q", got)
	}
}

func TestCodecRefusesMissingTopic(t *testing.T) {
	topics := config.DefaultTopics("")
	topics.SnapshotIndex = ""
	if _, err := kafka.NewCodec(topics); err == nil {
		t.Fatal("a codec without the snapshot index topic was built")
	}
}

// TestOpenCodecUsesTheRegistrySettings: schema_registry's URL, basic-auth credentials and
// lookup_only reach the codec (on franz-go's in-process fake; the real registry's behaviour is
// tested in registry_test.go).
func TestOpenCodecUsesTheRegistrySettings(t *testing.T) {
	reg := srfake.New(srfake.WithAuth("Basic " + base64.StdEncoding.EncodeToString([]byte("svc:pw"))))
	defer reg.Close()
	topics := config.DefaultTopics("auth.")
	r := config.SchemaRegistry{URLs: []string{reg.URL()}, Timeout: 5 * time.Second}
	if _, err := kafka.OpenCodec(context.Background(), topics, r); !errors.Is(err, schemas.ErrRegistry) {
		t.Fatalf("without credentials: %v", err)
	}
	lookup := r
	lookup.Username, lookup.Password, lookup.LookupOnly = "svc", "pw", true
	if _, err := kafka.OpenCodec(context.Background(), topics, lookup); !errors.Is(err, schemas.ErrRegistry) {
		t.Fatalf("lookup_only before anything was registered: %v", err)
	}
	r.Username, r.Password = "svc", "pw"
	codec, err := kafka.OpenCodec(context.Background(), topics, r)
	if err != nil {
		t.Fatal(err)
	}
	looked, err := kafka.OpenCodec(context.Background(), topics, lookup)
	if err != nil {
		t.Fatal(err)
	}
	for _, rt := range schemas.RecordTypes() {
		ss, ok := reg.GetSchema(topics.Of(rt)+"-value", 1)
		if !ok || ss.ID != codec.SchemaID(rt) || looked.SchemaID(rt) != ss.ID || ss.ID == schemas.BuiltinID(rt) {
			t.Errorf("%s: registered %v (%+v), codec id %d, lookup id %d", rt, ok, ss, codec.SchemaID(rt), looked.SchemaID(rt))
		}
	}
	if builtin, err := kafka.NewCodec(topics); err != nil || builtin.SchemaID(schemas.TypeLaneRecord) != schemas.BuiltinID(schemas.TypeLaneRecord) {
		t.Fatalf("NewCodec: %v", err)
	}
}
