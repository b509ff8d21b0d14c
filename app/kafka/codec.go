package kafka

import (
	"context"
	"fmt"

	"github.com/ckf-stream/ckf-stream/app/config"
	"github.com/ckf-stream/ckf-stream/schemas"
)

// NewCodec returns the codec of the product's records on the topic names t, every record type of
// the contract on its configured topic, so that each registry subject ("<topic>-value") follows
// the names the process actually uses, topic_prefix included. The codec uses the built-in schema
// ids and does no I/O. A record type without a topic name in t (a Topics that did not come from
// config.Load or config.DefaultTopics) is an error rather than a codec that silently falls back
// to the contract's default name.
func NewCodec(t config.Topics) (*schemas.Codec, error) {
	types := schemas.RecordTypes()
	opts := make([]schemas.Opt, 0, len(types))
	for _, rt := range types {
		name := t.Of(rt)
		if name == "" {
			return nil, fmt.Errorf("kafka: codec: no topic name for %s records", rt)
		}
		opts = append(opts, schemas.Topic(rt, name))
	}
	codec, err := schemas.NewCodec(context.Background(), opts...)
	if err != nil {
		return nil, fmt.Errorf("kafka: codec: %w", err)
	}
	return codec, nil
}
