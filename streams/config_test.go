package streams_test

import (
	"testing"
	"time"

	"github.com/ckf-stream/ckf-stream/ckf"
	"github.com/ckf-stream/ckf-stream/streams"
	"github.com/ckf-stream/ckf-stream/streams/internal/streamtest"
)

// illegalCase sets one field of a configuration of type C to an illegal value.
type illegalCase[C any] struct {
	field string // the field the error must name
	set   func(*C)
}

// legalCase sets fields of a configuration of type C to legal values, zeros mostly.
type legalCase[C any] struct {
	name string
	set  func(*C)
}

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
	for _, tc := range []illegalCase[streams.LaneWriterConfig]{
		{"LaneTopic", func(c *streams.LaneWriterConfig) { c.LaneTopic = "" }},
		{"Lane", func(c *streams.LaneWriterConfig) { c.Lane = ckf.LaneCount }},
		{"ChunkWords", func(c *streams.LaneWriterConfig) { c.ChunkWords = 0 }},
		{"ChunkWords", func(c *streams.LaneWriterConfig) { c.ChunkWords = -1 }},
		{"WriteTimeout", func(c *streams.LaneWriterConfig) { c.WriteTimeout = 0 }},
		{"WriteTimeout", func(c *streams.LaneWriterConfig) { c.WriteTimeout = -time.Second }},
		{"MaxRecordBytes", func(c *streams.LaneWriterConfig) { c.MaxRecordBytes = 0 }},
		{"MaxRecordBytes", func(c *streams.LaneWriterConfig) { c.MaxRecordBytes = streams.MinLaneRecordBytes - 1 }},
		{"MaxRecordBytes", func(c *streams.LaneWriterConfig) { c.MaxRecordBytes = streams.MaxLaneRecordBytes + 1 }},
	} {
		c := base()
		tc.set(&c)
		_, err := build(c)
		streamtest.WantConfigError(t, err, "lane writer", tc.field)
	}
	for _, tc := range []legalCase[streams.LaneWriterConfig]{
		{"the defaults", func(*streams.LaneWriterConfig) {}},
		{"no snapshot index", func(c *streams.LaneWriterConfig) { c.IndexTopic = "" }},
		{"lane 0", func(c *streams.LaneWriterConfig) { c.Lane = 0 }},
		{"one word per chunk", func(c *streams.LaneWriterConfig) { c.ChunkWords = 1 }},
		{"the smallest records", func(c *streams.LaneWriterConfig) { c.MaxRecordBytes = streams.MinLaneRecordBytes }},
		{"the largest records", func(c *streams.LaneWriterConfig) { c.MaxRecordBytes = streams.MaxLaneRecordBytes }},
	} {
		c := base()
		tc.set(&c)
		if _, err := build(c); err != nil {
			t.Errorf("%s: %v", tc.name, err)
		}
	}
}
