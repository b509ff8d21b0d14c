package schemas

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"strings"

	"github.com/twmb/franz-go/pkg/sr"
)

// ErrIncompatibleSchema means the registry refused to register an embedded schema
// because it breaks the compatibility level in force for the subject (HTTP
// 409, the Confluent API's error code 409, which Apicurio's ccompat API uses
// too). RegistryError.Compatibility names the level when the registry told it.
// It comes wrapped in a *RegistryError inside an *EncodeError of kind
// ErrRegistry, so errors.Is matches both sentinels.
var ErrIncompatibleSchema = errors.New("schemas: schema incompatible with the subject's registered versions")

// RegistryError is the cause of an ErrRegistry failure while the codec
// registered or looked up an embedded schema: which registry, which subject,
// what it was doing, and the registry's own words. Its text is meant to be
// read by whoever has to fix the deployment, so it names all of them.
type RegistryError struct {
	// Registry is the base URL of the registry (the configured URLs, comma
	// separated, or the URL of the request when the client came from
	// RegistryClient).
	Registry string
	// Subject is the subject of the request ("<topic>-value").
	Subject string
	// Op is what the codec was doing: "registering" or "looking up".
	Op string
	// StatusCode is the HTTP status of the refusal; 0 when no answer came
	// (the registry was unreachable or the request timed out).
	StatusCode int
	// ErrorCode is the Confluent API error code of the refusal (40401
	// subject not found, 40403 schema not found, 409 incompatible, 42201
	// invalid schema, ...); 0 when there was none.
	ErrorCode int
	// Compatibility is the compatibility level in force for the subject
	// (BACKWARD, FULL_TRANSITIVE, ...) when the schema was refused as
	// incompatible and the registry answered the follow-up question; empty
	// otherwise.
	Compatibility string
	// Reason is the registry's message, or the transport error's text.
	Reason string
	// Err is the underlying error: an *sr.ResponseError or a transport error.
	Err error
}

// Error renders "<op> subject <s> at <registry>: <what happened>: <reason>".
func (e *RegistryError) Error() string {
	var b strings.Builder
	b.WriteString(e.Op)
	b.WriteString(" subject ")
	b.WriteString(strconv.Quote(e.Subject))
	b.WriteString(" at ")
	b.WriteString(e.Registry)
	switch {
	case e.incompatible():
		b.WriteString(": refused as incompatible with the versions already registered")
		if e.Compatibility != "" {
			b.WriteString(" under ")
			b.WriteString(e.Compatibility)
			b.WriteString(" compatibility")
		}
	case e.StatusCode == 0:
		b.WriteString(": no answer")
	default:
		b.WriteString(": refused (HTTP ")
		b.WriteString(strconv.Itoa(e.StatusCode))
		if e.ErrorCode != 0 {
			b.WriteString(", error code ")
			b.WriteString(strconv.Itoa(e.ErrorCode))
		}
		b.WriteString(")")
	}
	if e.Reason != "" {
		b.WriteString(": ")
		b.WriteString(e.Reason)
	}
	return b.String()
}

func (e *RegistryError) incompatible() bool {
	return e.StatusCode == http.StatusConflict || e.ErrorCode == sr.ErrIncompatibleSchema.Code
}

// Unwrap returns the cause and, for a refusal as incompatible,
// ErrIncompatibleSchema.
func (e *RegistryError) Unwrap() []error {
	var out []error
	if e.incompatible() {
		out = append(out, ErrIncompatibleSchema)
	}
	if e.Err != nil {
		out = append(out, e.Err)
	}
	return out
}

// registryError describes err, returned by the registry for op on subject.
// For a refusal as incompatible it asks the registry which compatibility level
// is in force (the subject's, else the global one), so that the message says
// which rule the schema broke; that question is best effort.
func (c *Codec) registryError(ctx context.Context, op, subject string, err error) *RegistryError {
	re := &RegistryError{Registry: strings.Join(c.cfg.urls, ","), Subject: subject, Op: op, Reason: err.Error(), Err: err}
	var resp *sr.ResponseError
	if errors.As(err, &resp) {
		re.StatusCode, re.ErrorCode = resp.StatusCode, resp.ErrorCode
		if re.Registry == "" {
			re.Registry = resp.URL
		}
	}
	if re.Registry == "" {
		re.Registry = "the schema registry"
	}
	if re.incompatible() {
		for _, r := range c.client.Compatibility(sr.WithParams(ctx, sr.DefaultToGlobal), subject) {
			if r.Err == nil && r.Level != 0 {
				re.Compatibility = r.Level.String()
			}
		}
	}
	return re
}
