package streamtest

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/ckf-stream/ckf-stream/schemas"
	"github.com/ckf-stream/ckf-stream/streams"
)

// WantConfigError fails unless err is a *streams.ConfigError of config naming field, matching
// streams.ErrInvalidConfig, with a message that starts with both.
func WantConfigError(t *testing.T, err error, config, field string) {
	t.Helper()
	var ce *streams.ConfigError
	if !errors.As(err, &ce) || !errors.Is(err, streams.ErrInvalidConfig) {
		t.Fatalf("got %v, want a *streams.ConfigError matching ErrInvalidConfig", err)
	}
	if ce.Config != config || ce.Field != field {
		t.Fatalf("%q names %s config field %s, want %s config field %s", err, ce.Config, ce.Field, config, field)
	}
	if prefix := "streams: " + config + " config: " + field + " "; !strings.HasPrefix(err.Error(), prefix) {
		t.Fatalf("%q does not start with %q", err, prefix)
	}
}

func ConfigCodec(t *testing.T) *schemas.Codec {
	t.Helper()
	codec, err := schemas.NewCodec(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return codec
}

// IllegalCase sets one field of a configuration of type C to an illegal value.
type IllegalCase[C any] struct {
	Field string // the field the error must name
	Set   func(*C)
}

// LegalCase sets fields of a configuration of type C to legal values, zeros mostly.
type LegalCase[C any] struct {
	Name string
	Set  func(*C)
}
