package schemas

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/linkedin/goavro/v2"
	"github.com/twmb/franz-go/pkg/sr"
)

// HeaderSize is the size of the Confluent frame header: magic byte 0 and a
// 4-byte big-endian schema id.
const HeaderSize = 5

// magic is the Confluent wire-format magic byte.
const magic = 0

// Codec encodes and decodes every record type of the contract in the
// Confluent wire format. It is safe for concurrent use; decoding takes no
// lock (the schema table is an immutable map behind an atomic pointer that
// is replaced, copy-on-write, when a new schema id is learned).
//
// Without a registry the codec writes BuiltinID(t) and reads only built-in
// ids. With a registry (RegistryURLs or RegistryClient) it registers (or,
// with LookupOnly, looks up) the embedded schema of every type under the
// subject "<topic>-value" when it is created, writes the registry's ids, and
// resolves unknown ids on read by fetching the writer's schema from the
// registry; built-in ids stay readable so a deployment can move to a
// registry without rewriting its topics.
type Codec struct {
	cfg    cfg
	client *sr.Client

	writeIDs [len(typeInfos)]int

	mu   sync.Mutex // serialises registry fetches and table updates
	byID atomic.Pointer[map[int]*schemaEntry]
}

// hasFastPath reports whether record type t has a hand-written codec for
// its embedded schema (see fastlane.go, fastquery.go and fastkv.go).
func hasFastPath(t RecordType) bool {
	return t == TypeLaneRecord || t == TypeQueryRequest || t == TypeQueryReply || t == TypeKvEvent
}

// schemaEntry is one schema id the codec can read.
type schemaEntry struct {
	id  int
	typ RecordType // 0: a schema that is none of ours
	// embedded: the schema has the parsing canonical form of typ's embedded
	// schema, so its binary layout is the one the hand-written readers know.
	embedded bool
	fast     bool // embedded, typ has a hand-written decoder, and it is enabled
	codec    *goavro.Codec
	tree     *node
	// previous is the embedded schema's previous revision (builtin.previous), for an embedded
	// entry; nil otherwise.
	previous *builtin
}

// newEntry returns the entry of schema id for t's embedded schema.
func (c *Codec) newEntry(id int, t RecordType) *schemaEntry {
	b := &builtins[t]
	return &schemaEntry{id: id, typ: t, embedded: true, fast: hasFastPath(t) && !c.cfg.disableFast, codec: b.codec, tree: b.tree, previous: b.previous}
}

type cfg struct {
	urls        []string
	clientOpts  []sr.ClientOpt
	client      *sr.Client
	lookupOnly  bool
	timeout     time.Duration
	topics      [len(typeInfos)]string
	prefix      string
	disableFast bool
}

func defaultCfg() cfg {
	c := cfg{timeout: 10 * time.Second}
	for _, t := range RecordTypes() {
		c.topics[t] = t.DefaultTopic()
	}
	return c
}

func (c *cfg) validate() error {
	if len(c.urls) > 0 && c.client != nil {
		return errors.New("schemas: RegistryURLs and RegistryClient are mutually exclusive")
	}
	if c.timeout <= 0 {
		return errors.New("schemas: RegistryTimeout must be positive")
	}
	for _, t := range RecordTypes() {
		if c.topics[t] == "" {
			return fmt.Errorf("schemas: empty topic for %s", t)
		}
	}
	return nil
}

// Opt configures a Codec.
type Opt func(*cfg)

// RegistryURLs makes the codec use the Confluent schema registry at urls
// (tried in order). Without it, and without RegistryClient, the codec uses
// the built-in id table and never touches the network.
func RegistryURLs(urls ...string) Opt { return func(c *cfg) { c.urls = append(c.urls, urls...) } }

// RegistryClientOpts passes options (TLS, basic auth, bearer token, HTTP
// client) to the registry client built from RegistryURLs.
func RegistryClientOpts(opts ...sr.ClientOpt) Opt {
	return func(c *cfg) { c.clientOpts = append(c.clientOpts, opts...) }
}

// RegistryClient makes the codec use an existing registry client instead of
// building one from RegistryURLs.
func RegistryClient(cl *sr.Client) Opt { return func(c *cfg) { c.client = cl } }

// LookupOnly makes the codec look up the embedded schemas instead of
// registering them. Use it where the registry is read-only for the service
// account and schemas are registered by a deployment step; NewCodec then fails
// with ErrRegistry if a schema is not registered. By default the codec
// registers, which is idempotent: an identical schema keeps its id.
func LookupOnly() Opt { return func(c *cfg) { c.lookupOnly = true } }

// RegistryTimeout bounds each registry request the codec makes: each
// registration or lookup in NewCodec (within NewCodec's context), and each
// fetch while decoding a record with a schema id it has not seen. Default
// 10s. During a fetch the decoding goroutine waits; afterwards the id is
// cached and never fetched again.
func RegistryTimeout(d time.Duration) Opt { return func(c *cfg) { c.timeout = d } }

// Topic overrides the topic of record type t; the registry subject is
// "<prefix><topic>-value".
func Topic(t RecordType, name string) Opt {
	return func(c *cfg) {
		if t.valid() {
			c.topics[t] = name
		}
	}
}

// TopicPrefix is prepended to every topic name (for example "staging.").
func TopicPrefix(prefix string) Opt { return func(c *cfg) { c.prefix = prefix } }

// disableFastPath makes the codec use goavro for every record type; tests
// compare both paths with it.
func disableFastPath() Opt { return func(c *cfg) { c.disableFast = true } }

// NewCodec builds a codec. With a registry configured it registers or looks
// up every embedded schema under ctx and fails with an *EncodeError of kind
// ErrRegistry if the registry refuses or does not answer; its cause is a
// *RegistryError (errors.As) naming the registry, the subject and the reason,
// and a schema refused as incompatible also matches ErrIncompatibleSchema.
// Without a registry it cannot fail unless an option is invalid.
func NewCodec(ctx context.Context, opts ...Opt) (*Codec, error) {
	c := &Codec{cfg: defaultCfg()}
	for _, o := range opts {
		o(&c.cfg)
	}
	if err := c.cfg.validate(); err != nil {
		return nil, err
	}
	c.client = c.cfg.client
	if c.client == nil && len(c.cfg.urls) > 0 {
		cl, err := sr.NewClient(append([]sr.ClientOpt{sr.URLs(c.cfg.urls...)}, c.cfg.clientOpts...)...)
		if err != nil {
			return nil, fmt.Errorf("schemas: building registry client: %w", err)
		}
		c.client = cl
	}
	table := make(map[int]*schemaEntry, 2*len(typeInfos))
	for _, t := range RecordTypes() {
		table[BuiltinID(t)] = c.newEntry(BuiltinID(t), t)
		c.writeIDs[t] = BuiltinID(t)
	}
	if c.client != nil {
		for _, t := range RecordTypes() {
			id, err := c.resolveWriterID(ctx, t)
			if err != nil {
				return nil, err
			}
			table[id] = c.newEntry(id, t)
			c.writeIDs[t] = id
		}
	}
	c.byID.Store(&table)
	return c, nil
}

// Subject returns the registry subject of record type t: "<topic>-value"
// (the topic-name strategy).
func (c *Codec) Subject(t RecordType) string { return c.Topic(t) + "-value" }

// Topic returns the configured topic of record type t, prefix included.
func (c *Codec) Topic(t RecordType) string {
	if !t.valid() {
		return ""
	}
	return c.cfg.prefix + c.cfg.topics[t]
}

// SchemaID returns the id the codec writes for record type t.
func (c *Codec) SchemaID(t RecordType) int {
	if !t.valid() {
		return -1
	}
	return c.writeIDs[t]
}

// resolveWriterID registers (or, with LookupOnly, looks up) t's embedded
// schema under its subject and returns the registry's id. Each request is
// bounded by RegistryTimeout. A refusal is an *EncodeError of kind ErrRegistry
// whose cause is a *RegistryError naming the registry, the subject and the
// registry's reason.
func (c *Codec) resolveWriterID(ctx context.Context, t RecordType) (int, error) {
	s := sr.Schema{Schema: t.Schema(), Type: sr.TypeAvro}
	subject := c.Subject(t)
	rctx, cancel := context.WithTimeout(ctx, c.cfg.timeout)
	defer cancel()
	var (
		id  int
		err error
	)
	op := "registering"
	if c.cfg.lookupOnly {
		op = "looking up"
		var ss sr.SubjectSchema
		ss, err = c.client.LookupSchema(rctx, subject, s)
		id = ss.ID
	} else {
		// One request: POST /subjects/{subject}/versions answers the id, which
		// is all the codec needs (sr's CreateSchema asks a second question).
		id, err = c.client.RegisterSchema(rctx, subject, s, -1, -1)
	}
	if err != nil {
		return 0, &EncodeError{Kind: ErrRegistry, Type: t, Err: c.registryError(rctx, op, subject, err)}
	}
	if id <= 0 || id > maxInt32 {
		return 0, &EncodeError{Kind: ErrRegistry, Type: t, Detail: op + " subject " + strconv.Quote(subject) + ": registry returned id " + strconv.Itoa(id)}
	}
	return id, nil
}

// lookup returns the entry for id, fetching the writer's schema from the
// registry if the id is new.
func (c *Codec) lookup(id int) (*schemaEntry, error) {
	if e, ok := (*c.byID.Load())[id]; ok {
		return e, nil
	}
	if c.client == nil {
		return nil, &DecodeError{Kind: ErrUnknownSchemaID, SchemaID: id, Detail: "not a built-in id and no registry is configured"}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := (*c.byID.Load())[id]; ok { // another goroutine fetched it
		return e, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), c.cfg.timeout)
	defer cancel()
	s, err := c.client.SchemaByID(ctx, id)
	if err != nil {
		var re *sr.ResponseError
		if errors.As(err, &re) && re.ErrorCode == sr.ErrSchemaNotFound.Code {
			return nil, &DecodeError{Kind: ErrUnknownSchemaID, SchemaID: id, Detail: "the registry does not know it", Err: err}
		}
		return nil, &DecodeError{Kind: ErrRegistry, SchemaID: id, Detail: "fetching the writer schema", Err: err}
	}
	e := &schemaEntry{id: id}
	if s.Type == sr.TypeAvro && len(s.References) == 0 {
		if b, err := compile(s.Schema); err == nil {
			e.codec, e.tree = b.codec, b.tree
			for _, t := range RecordTypes() {
				if b.tree.name == t.FullName() {
					e.typ = t
					// A schema whose parsing canonical form equals the
					// embedded one has the same binary layout (only docs,
					// defaults or formatting differ), so the hand-written
					// codec can read it.
					e.embedded = b.codec.CanonicalSchema() == builtins[t].codec.CanonicalSchema()
					e.fast = e.embedded && hasFastPath(t) && !c.cfg.disableFast
				}
			}
		}
	}
	// Ids are immutable in a registry, so the answer is cached for good,
	// including "not one of ours".
	old := *c.byID.Load()
	table := make(map[int]*schemaEntry, len(old)+1)
	for k, v := range old {
		table[k] = v
	}
	table[id] = e
	c.byID.Store(&table)
	return e, nil
}

// AppendHeader appends the Confluent frame header for schema id to dst.
func AppendHeader(dst []byte, id int) []byte {
	return binary.BigEndian.AppendUint32(append(dst, magic), uint32(id))
}

// ParseHeader splits a framed record into its schema id and Avro body.
func ParseHeader(b []byte) (id int, body []byte, err error) {
	if len(b) < HeaderSize || b[0] != magic {
		detail := "record shorter than the 5-byte header"
		if len(b) > 0 && b[0] != magic {
			detail = "magic byte " + strconv.Itoa(int(b[0]))
		}
		return 0, nil, &DecodeError{Kind: ErrUnknownMagic, SchemaID: -1, Detail: detail}
	}
	return int(binary.BigEndian.Uint32(b[1:HeaderSize])), b[HeaderSize:], nil
}

// body locates the schema entry of a framed record of type t.
func (c *Codec) body(t RecordType, b []byte) (*schemaEntry, []byte, error) {
	id, body, err := ParseHeader(b)
	if err != nil {
		err.(*DecodeError).Type = t
		return nil, nil, err
	}
	e, err := c.lookup(id)
	if err != nil {
		err.(*DecodeError).Type = t
		return nil, nil, err
	}
	if e.typ != t {
		what := "a schema that is not part of this contract"
		if e.typ != 0 {
			what = e.typ.FullName()
		}
		if e.codec == nil {
			what = "a schema this codec cannot parse"
		}
		return nil, nil, &DecodeError{Kind: ErrSchemaMismatch, Type: t, SchemaID: id, Detail: "id names " + what}
	}
	return e, body, nil
}

// native decodes body with goavro after the bounds check; a goavro panic is
// reported as ErrMalformed.
func (e *schemaEntry) native(t RecordType, body []byte) (v any, err error) {
	if err := skim(e.tree, body); err != nil {
		// A body of the embedded layout that ends too early may have been written with an
		// earlier revision of the schema, which lacks appended trailing fields: the newest
		// revision it fits reads it.
		for p := e.previous; p != nil && errors.Is(err, ErrTruncated); p = p.previous {
			if skim(p.tree, body) == nil {
				return (&schemaEntry{id: e.id, typ: e.typ, codec: p.codec, tree: p.tree}).native(t, body)
			}
		}
		de := err.(*DecodeError)
		de.Type, de.SchemaID = t, e.id
		return nil, de
	}
	defer func() {
		if p := recover(); p != nil {
			v, err = nil, &DecodeError{Kind: ErrMalformed, Type: t, SchemaID: e.id, Detail: fmt.Sprint("decoder panic: ", p)}
		}
	}()
	v, rest, gerr := e.codec.NativeFromBinary(body)
	if gerr != nil {
		return nil, &DecodeError{Kind: ErrMalformed, Type: t, SchemaID: e.id, Err: gerr}
	}
	if len(rest) != 0 {
		return nil, &DecodeError{Kind: ErrMalformed, Type: t, SchemaID: e.id, Detail: strconv.Itoa(len(rest)) + " trailing bytes"}
	}
	return v, nil
}

// finish turns conversion and validation failures into a *DecodeError.
func finish(t RecordType, id int, n *nat, validate func() error) error {
	if n.kind != nil {
		return &DecodeError{Kind: n.kind, Type: t, SchemaID: id, Field: n.field, Detail: n.detail}
	}
	if err := validate(); err != nil {
		return decodeFieldError(t, id, err)
	}
	return nil
}

func decodeFieldError(t RecordType, id int, err error) error {
	var fe *fieldError
	if errors.As(err, &fe) {
		return &DecodeError{Kind: ErrInvalidField, Type: t, SchemaID: id, Field: fe.field, Detail: fe.detail, Err: fe.cause}
	}
	return &DecodeError{Kind: ErrInvalidField, Type: t, SchemaID: id, Err: err}
}

func encodeFieldError(t RecordType, err error) error {
	var fe *fieldError
	if errors.As(err, &fe) {
		return &EncodeError{Kind: ErrInvalidField, Type: t, Field: fe.field, Detail: fe.detail}
	}
	return &EncodeError{Kind: ErrInvalidField, Type: t, Err: err}
}

// appendNative validates and encodes a record through goavro; a goavro
// panic is reported as an *EncodeError, never propagated.
func (c *Codec) appendNative(dst []byte, t RecordType, validate func() error, native func() map[string]any) (out []byte, err error) {
	if err := validate(); err != nil {
		return dst, encodeFieldError(t, err)
	}
	defer func() {
		if p := recover(); p != nil {
			out, err = dst, &EncodeError{Kind: ErrInvalidField, Type: t, Detail: fmt.Sprint("encoder panic: ", p)}
		}
	}()
	out, err = builtins[t].codec.BinaryFromNative(AppendHeader(dst, c.writeIDs[t]), native())
	if err != nil {
		// validate admits only values the schema can carry, so this is a
		// defect of this package, reported rather than hidden.
		return dst, &EncodeError{Kind: ErrInvalidField, Type: t, Detail: "goavro refused the record", Err: err}
	}
	return out, nil
}
