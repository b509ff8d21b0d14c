package kafka_test

import (
	"testing"

	"github.com/ckf-stream/ckf-stream/app/config"
	"github.com/ckf-stream/ckf-stream/app/kafka"
	"github.com/ckf-stream/ckf-stream/schemas"
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
