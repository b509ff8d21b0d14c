package schemas

import (
	"embed"
	"encoding/json"
	"fmt"
	"reflect"
	"strconv"
	"strings"

	"github.com/linkedin/goavro/v2"
)

// Namespace is the Avro namespace of every schema in this package. Its last
// component is the major version: a change that breaks compatibility gets a
// new namespace (io.ckfstream.v2), new subjects and new built-in ids.
const Namespace = "io.ckfstream.v1"

// SchemaVersion is the major version named by Namespace.
const SchemaVersion = 1

// RecordType names one top-level record of the contract.
type RecordType uint8

// The top-level record types, one per topic.
const (
	TypeLaneRecord RecordType = iota + 1
	TypeQueryRequest
	TypeQueryReply
	TypeLaneEvent
	TypeControlRecord
	TypeDeadLetter
	TypeKvEvent
	TypeSnapshotIndex
	TypeWorkerQueryRequest
	TypeWorkerQueryReply
)

type typeInfo struct {
	name  string // Avro record name
	file  string // .avsc file
	topic string // default topic
}

var typeInfos = [...]typeInfo{
	TypeLaneRecord:         {"LaneRecord", "lane_record.avsc", "ckf-lanes"},
	TypeQueryRequest:       {"QueryRequest", "query_request.avsc", "ckf-queries"},
	TypeQueryReply:         {"QueryReply", "query_reply.avsc", "ckf-query-replies"},
	TypeLaneEvent:          {"LaneEvent", "lane_event.avsc", "ckf-lane-events"},
	TypeControlRecord:      {"ControlRecord", "control_record.avsc", "ckf-control"},
	TypeDeadLetter:         {"DeadLetter", "dead_letter.avsc", "ckf-dead-letter"},
	TypeKvEvent:            {"KvEvent", "kv_event.avsc", "kv-events"},
	TypeSnapshotIndex:      {"SnapshotIndexEntry", "snapshot_index.avsc", "ckf-snapshot-index"},
	TypeWorkerQueryRequest: {"WorkerQueryRequest", "worker_query_request.avsc", "ckf-worker-queries"},
	TypeWorkerQueryReply:   {"WorkerQueryReply", "worker_query_reply.avsc", "ckf-worker-query-replies"},
}

// RecordTypes returns every record type in id order.
func RecordTypes() []RecordType {
	return []RecordType{TypeLaneRecord, TypeQueryRequest, TypeQueryReply, TypeLaneEvent, TypeControlRecord, TypeDeadLetter, TypeKvEvent, TypeSnapshotIndex, TypeWorkerQueryRequest, TypeWorkerQueryReply}
}

func (t RecordType) valid() bool { return t >= TypeLaneRecord && t <= TypeWorkerQueryReply }

// String returns the Avro record name, for example "LaneRecord".
func (t RecordType) String() string {
	if !t.valid() {
		return fmt.Sprintf("RecordType(%d)", uint8(t))
	}
	return typeInfos[t].name
}

// FullName returns the Avro full name, for example
// "io.ckfstream.v1.LaneRecord".
func (t RecordType) FullName() string { return Namespace + "." + t.String() }

// DefaultTopic returns the topic the record type is written to unless
// configured otherwise (see Topic and TopicPrefix).
func (t RecordType) DefaultTopic() string {
	if !t.valid() {
		return ""
	}
	return typeInfos[t].topic
}

// SchemaFile returns the name of the embedded .avsc file.
func (t RecordType) SchemaFile() string {
	if !t.valid() {
		return ""
	}
	return typeInfos[t].file
}

// Schema returns the embedded Avro schema text of the record type, exactly
// as it is registered with a schema registry.
func (t RecordType) Schema() string {
	if !t.valid() {
		return ""
	}
	return builtins[t].text
}

// BuiltinID returns the schema id written for t when no registry is
// configured: 0x434B0000 ("CK") | SchemaVersion<<8 | t. The range sits far
// above the ids a registry assigns (which count up from 1), so built-in and
// registry ids cannot be confused when a deployment moves to a registry.
func BuiltinID(t RecordType) int {
	return 0x434B0000 | SchemaVersion<<8 | int(t)
}

//go:embed *.avsc
var schemaFiles embed.FS

// builtin is one embedded schema, parsed once at start-up.
type builtin struct {
	text  string
	codec *goavro.Codec
	tree  *node
	// previous is the schema's previous revision within the major version (the embedded schema
	// without the last of its appendedFields; its own previous lacks the one before, and so
	// on), or nil when it has none. The revisions share the built-in id, so a body of the
	// built-in id that is too short for the current revision is read with the newest earlier
	// revision it fits (see schemaEntry.native).
	previous *builtin
}

// appendedFields lists, per record type, the optional top-level fields added at the end of its
// v1 schema after its first release. A writer of the previous revision stamps the same built-in
// id, so the readers accept a body that ends before these fields and read them as their
// defaults; a reader of the previous revision refuses the new fields as trailing bytes, so
// readers are upgraded before writers (as for a new union branch). With a registry, each
// revision has its own id and none of this applies. A name "field/Record/name" is a field
// appended to the record branch Record of the union of the last top-level field, which ends
// the body as a top-level field would (KvStored.block_size: data is KvEvent's last field).
var appendedFields = map[RecordType][]string{
	TypeKvEvent:      {"data/KvStored/block_size"},
	TypeLaneRecord:   {"capacity", "sources", "as_of", "block_size"},
	TypeLaneEvent:    {"capacity"},
	TypeQueryRequest: {"max_age_ms", "block_extra_keys", "lane_mask64"},
	TypeQueryReply:   {"incomplete_lanes", "lane_states", "ready_lanes64", "incomplete_lanes64"},

	TypeWorkerQueryRequest: {"block_extra_keys", "max_age_ms"},
	TypeWorkerQueryReply:   {"state"},
}

var builtins = loadBuiltins()

// loadBuiltins parses every embedded schema. A failure is a defect of the
// build (the golden tests catch it), so it panics like regexp.MustCompile.
func loadBuiltins() [len(typeInfos)]builtin {
	var out [len(typeInfos)]builtin
	for _, t := range RecordTypes() {
		raw, err := schemaFiles.ReadFile(typeInfos[t].file)
		if err != nil {
			panic("schemas: missing embedded schema: " + err.Error())
		}
		b, err := compile(string(raw))
		if err != nil {
			panic("schemas: embedded schema " + typeInfos[t].file + ": " + err.Error())
		}
		if b.tree.name != t.FullName() {
			panic("schemas: embedded schema " + typeInfos[t].file + " defines " + b.tree.name + ", not " + t.FullName())
		}
		cur := &b
		all := appendedFields[t]
		for k := len(all) - 1; k >= 0; k-- {
			prev, err := withoutTrailingFields(string(raw), all[k:])
			if err != nil {
				panic("schemas: embedded schema " + typeInfos[t].file + ": previous revision: " + err.Error())
			}
			cur.previous = &prev
			cur = cur.previous
		}
		out[t] = b
	}
	return out
}

// withoutTrailingFields compiles text without its last fields, which must be names, in order
// (each a top-level field, or "field/Record/name" for the last field of a record branch of the
// last top-level field's union; see appendedFields).
func withoutTrailingFields(text string, names []string) (builtin, error) {
	var top map[string]any
	if err := json.Unmarshal([]byte(text), &top); err != nil {
		return builtin{}, err
	}
	for i := len(names) - 1; i >= 0; i-- {
		rec, name := top, names[i]
		if path := strings.Split(name, "/"); len(path) == 3 {
			rec, name = unionBranch(top, path[0], path[1]), path[2]
			if rec == nil {
				return builtin{}, fmt.Errorf("no record branch %s in the union of the last field %s", path[1], path[0])
			}
		}
		fields, _ := rec["fields"].([]any)
		if len(fields) == 0 {
			return builtin{}, fmt.Errorf("no field left for %q", names[i])
		}
		if m, _ := fields[len(fields)-1].(map[string]any); m == nil || m["name"] != name {
			return builtin{}, fmt.Errorf("last field is not %q", names[i])
		}
		rec["fields"] = fields[:len(fields)-1]
	}
	out, err := json.Marshal(top)
	if err != nil {
		return builtin{}, err
	}
	return compile(string(out))
}

// unionBranch returns the record named record among the branches of the union of top's last
// field, which must be named field; nil when there is none.
func unionBranch(top map[string]any, field, record string) map[string]any {
	fields, _ := top["fields"].([]any)
	if len(fields) == 0 {
		return nil
	}
	last, _ := fields[len(fields)-1].(map[string]any)
	if last == nil || last["name"] != field {
		return nil
	}
	branches, _ := last["type"].([]any)
	for _, b := range branches {
		if m, _ := b.(map[string]any); m != nil && m["name"] == record {
			return m
		}
	}
	return nil
}

// compile parses a schema with goavro (the decoder) and with the bounds
// checker's own parser.
func compile(text string) (builtin, error) {
	c, err := goavro.NewCodec(text)
	if err != nil {
		return builtin{}, err
	}
	tree, err := parseSchema(text)
	if err != nil {
		return builtin{}, err
	}
	return builtin{text: text, codec: c, tree: tree}, nil
}

const (
	maxInt32 = 1<<31 - 1
	maxInt64 = 1<<63 - 1
)

// enumSymbols lists the names the generated String method gives E's values
// 0, 1, 2, ... up to the first value it has no name for: an Avro enum's
// symbols in schema order, taken from the constants' line comments so that a
// constant added (and generated) is a symbol with no second list to update.
// TestEnumSymbolsMatchSchemas holds every list to its .avsc.
func enumSymbols[E interface {
	~uint8
	String() string
}]() []string {
	typeName := reflect.TypeFor[E]().Name()
	var out []string
	for v := range 256 {
		s := E(v).String()
		if s == typeName+"("+strconv.Itoa(v)+")" { // stringer's form for a value without a name
			break
		}
		out = append(out, s)
	}
	return out
}
