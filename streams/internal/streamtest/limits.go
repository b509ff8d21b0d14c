package streamtest

import (
	"testing"

	"github.com/ckf-stream/ckf-stream/ckf"
	"github.com/ckf-stream/ckf-stream/ckf/producer"
	"github.com/ckf-stream/ckf-stream/schemas"
	"github.com/ckf-stream/ckf-stream/streams"
)

// The record-size arithmetic of the tests of the lane writer's limits and the relay's splits.

// LimitIdentity returns a fresh exact state of cfg and the identity of pool DC 104 with its
// format.
func LimitIdentity(t *testing.T, cfg ckf.CkfConfig) (ckf.ProducerIdentity, *producer.DcState) {
	t.Helper()
	state, err := producer.NewDcState(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return ckf.ProducerIdentity{Pool: Pool(104), Incarnation: 1, LayoutGeneration: 1, Format: state.Format()}, state
}

// ClientlessWriter is a lane writer without a client (only its arithmetic is used).
func ClientlessWriter(t *testing.T, codec *schemas.Codec, id ckf.ProducerIdentity, maxRecordBytes, chunkWords int) *streams.LaneWriter {
	t.Helper()
	cfg := streams.DefaultLaneWriterConfig()
	cfg.LaneTopic, cfg.MaxRecordBytes, cfg.ChunkWords = "lanes", maxRecordBytes, chunkWords
	w, err := streams.NewLaneWriter(nil, codec, id, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return w
}

// ExactLimitFor returns the smallest record limit at which a delta carries n images.
func ExactLimitFor(t *testing.T, codec *schemas.Codec, id ckf.ProducerIdentity, n int) int {
	t.Helper()
	for limit := streams.MinLaneRecordBytes; limit < streams.MinLaneRecordBytes+schemas.ImageSize*(n+64); limit++ {
		if ClientlessWriter(t, codec, id, limit, streams.DefaultChunkWords).MaxDeltaImages() >= n {
			return limit
		}
	}
	t.Fatalf("no limit up to %d carries %d images", streams.MinLaneRecordBytes+schemas.ImageSize*(n+64), n)
	return 0
}
