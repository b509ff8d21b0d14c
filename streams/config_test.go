package streams_test

import (
	"testing"
	"time"

	"github.com/ckf-stream/ckf-stream/ckf"
	"github.com/ckf-stream/ckf-stream/streams"
	"github.com/ckf-stream/ckf-stream/streams/internal/streamtest"
)

// The validation tests of every configuration type: each illegal value of each field is a
// *streams.ConfigError naming the field (and nothing replaces it with a default), and each legal
// zero survives as zero in the component's configuration.

func TestLaneWriterConfigValidate(t *testing.T) {
	codec := streamtest.ConfigCodec(t)
	id := ckf.ProducerIdentity{Pool: streamtest.Pool(100), Incarnation: 1, LayoutGeneration: 1, Format: ckf.NewFormatIdentity(ckf.DefaultSeed, 1024)}
	base := func() streams.LaneWriterConfig {
		c := streams.DefaultLaneWriterConfig()
		c.LaneTopic, c.IndexTopic, c.Lane = "lanes", "index", 5
		return c
	}
	build := func(c streams.LaneWriterConfig) (*streams.LaneWriter, error) {
		return streams.NewLaneWriter(nil, codec, id, c) // the client is not used before a write
	}
	for _, tc := range []streamtest.IllegalCase[streams.LaneWriterConfig]{
		{Field: "LaneTopic", Set: func(c *streams.LaneWriterConfig) { c.LaneTopic = "" }},
		{Field: "Lane", Set: func(c *streams.LaneWriterConfig) { c.Lane = ckf.MaxLanes }},
		{Field: "ChunkWords", Set: func(c *streams.LaneWriterConfig) { c.ChunkWords = 0 }},
		{Field: "ChunkWords", Set: func(c *streams.LaneWriterConfig) { c.ChunkWords = -1 }},
		{Field: "WriteTimeout", Set: func(c *streams.LaneWriterConfig) { c.WriteTimeout = 0 }},
		{Field: "WriteTimeout", Set: func(c *streams.LaneWriterConfig) { c.WriteTimeout = -time.Second }},
		{Field: "MaxRecordBytes", Set: func(c *streams.LaneWriterConfig) { c.MaxRecordBytes = 0 }},
		{Field: "MaxRecordBytes", Set: func(c *streams.LaneWriterConfig) { c.MaxRecordBytes = streams.MinLaneRecordBytes - 1 }},
		{Field: "MaxRecordBytes", Set: func(c *streams.LaneWriterConfig) { c.MaxRecordBytes = streams.MaxLaneRecordBytes + 1 }},
	} {
		c := base()
		tc.Set(&c)
		_, err := build(c)
		streamtest.WantConfigError(t, err, "lane writer", tc.Field)
	}
	for _, tc := range []streamtest.LegalCase[streams.LaneWriterConfig]{
		{Name: "the defaults", Set: func(*streams.LaneWriterConfig) {}},
		{Name: "no snapshot index", Set: func(c *streams.LaneWriterConfig) { c.IndexTopic = "" }},
		{Name: "lane 0", Set: func(c *streams.LaneWriterConfig) { c.Lane = 0 }},
		{Name: "one word per chunk", Set: func(c *streams.LaneWriterConfig) { c.ChunkWords = 1 }},
		{Name: "the smallest records", Set: func(c *streams.LaneWriterConfig) { c.MaxRecordBytes = streams.MinLaneRecordBytes }},
		{Name: "the largest records", Set: func(c *streams.LaneWriterConfig) { c.MaxRecordBytes = streams.MaxLaneRecordBytes }},
	} {
		c := base()
		tc.Set(&c)
		if _, err := build(c); err != nil {
			t.Errorf("%s: %v", tc.Name, err)
		}
	}
}
