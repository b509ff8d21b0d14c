package kafka

import (
	"context"
	"fmt"

	"github.com/ckf-stream/ckf-stream/app/config"
	"github.com/ckf-stream/ckf-stream/schemas"
	"github.com/twmb/franz-go/pkg/sr"
)

// NewCodec returns the codec of the product's records on the topic names t with the built-in
// schema ids: OpenCodec without a registry. It does no I/O.
func NewCodec(t config.Topics) (*schemas.Codec, error) {
	return OpenCodec(context.Background(), t, config.SchemaRegistry{})
}

// OpenCodec returns the codec of the product's records on the topic names t, every record type
// of the contract on its configured topic, so that each registry subject ("<topic>-value")
// follows the names the process actually uses, topic_prefix included. A record type without a
// topic name in t (a Topics that did not come from config.Load or config.DefaultTopics) is an
// error rather than a codec that silently falls back to the contract's default name.
//
// Without a registry (r.URLs empty, the default) the codec uses the built-in schema ids and does
// no I/O. With one, it registers (or, with r.LookupOnly, looks up) every record type's embedded
// schema under its subject before it returns, each request bounded by r.Timeout and ctx, and
// writes the registry's ids. A refusal is returned as it is: an error matching
// schemas.ErrRegistry (and schemas.ErrIncompatibleSchema for a schema the subject's
// compatibility level refuses) whose text names the subject, the registry and the registry's
// reason, for the process to print as it stops.
func OpenCodec(ctx context.Context, t config.Topics, r config.SchemaRegistry) (*schemas.Codec, error) {
	types := schemas.RecordTypes()
	opts := make([]schemas.Opt, 0, len(types)+4)
	for _, rt := range types {
		name := t.Of(rt)
		if name == "" {
			return nil, fmt.Errorf("kafka: codec: no topic name for %s records", rt)
		}
		opts = append(opts, schemas.Topic(rt, name))
	}
	if r.Enabled() {
		opts = append(opts, schemas.RegistryURLs(r.URLs...), schemas.RegistryTimeout(r.Timeout))
		if r.Username != "" {
			opts = append(opts, schemas.RegistryClientOpts(sr.BasicAuth(r.Username, r.Password.Reveal())))
		}
		if r.LookupOnly {
			opts = append(opts, schemas.LookupOnly())
		}
	}
	codec, err := schemas.NewCodec(ctx, opts...)
	if err != nil {
		return nil, fmt.Errorf("kafka: codec: %w", err)
	}
	return codec, nil
}
