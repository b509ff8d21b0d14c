package schemas

import (
	"encoding/json"
	"io/fs"
	"reflect"
	"strings"
	"testing"

	"github.com/linkedin/goavro/v2"
)

// Every embedded file parses, declares the package namespace, is the schema
// of exactly one record type, and documents every named type and field.
func TestSchemaFilesGolden(t *testing.T) {
	files, err := fs.Glob(schemaFiles, "*.avsc")
	if err != nil {
		t.Fatal(err)
	}
	if len(files) != len(RecordTypes()) {
		t.Fatalf("%d .avsc files for %d record types", len(files), len(RecordTypes()))
	}
	seen := map[string]bool{}
	for _, rt := range RecordTypes() {
		raw, err := schemaFiles.ReadFile(rt.SchemaFile())
		if err != nil {
			t.Fatal(err)
		}
		if _, err := goavro.NewCodec(string(raw)); err != nil {
			t.Fatalf("%s: goavro: %v", rt.SchemaFile(), err)
		}
		var top map[string]any
		if err := json.Unmarshal(raw, &top); err != nil {
			t.Fatal(err)
		}
		if top["namespace"] != Namespace || top["name"] != rt.String() {
			t.Fatalf("%s: declares %v.%v, want %s", rt.SchemaFile(), top["namespace"], top["name"], rt.FullName())
		}
		if !strings.HasSuffix(Namespace, ".v1") || SchemaVersion != 1 {
			t.Fatalf("namespace %s and SchemaVersion %d disagree", Namespace, SchemaVersion)
		}
		checkDocs(t, rt.SchemaFile(), top, "")
		seen[rt.SchemaFile()] = true
	}
	for _, f := range files {
		if !seen[f] {
			t.Fatalf("%s is embedded but belongs to no record type", f)
		}
	}
}

// checkDocs walks a schema and requires a non-empty doc on every named type
// and every field, and no namespace other than the package's.
func checkDocs(t *testing.T, file string, v any, path string) {
	t.Helper()
	switch s := v.(type) {
	case []any:
		for _, b := range s {
			checkDocs(t, file, b, path)
		}
	case map[string]any:
		switch s["type"] {
		case "record", "enum", "fixed":
			if doc, _ := s["doc"].(string); doc == "" {
				t.Errorf("%s: %s %v has no doc", file, s["type"], s["name"])
			}
			if ns, ok := s["namespace"]; ok && ns != Namespace {
				t.Errorf("%s: %v declares namespace %v", file, s["name"], ns)
			}
			if name, _ := s["name"].(string); strings.Contains(name, ".") {
				t.Errorf("%s: %s uses a dotted name", file, name)
			}
		}
		if fields, ok := s["fields"].([]any); ok {
			for _, f := range fields {
				fm := f.(map[string]any)
				if doc, _ := fm["doc"].(string); doc == "" {
					t.Errorf("%s: field %s.%v has no doc", file, path, fm["name"])
				}
				checkDocs(t, file, fm["type"], path+"."+fm["name"].(string))
			}
		}
		if items, ok := s["items"]; ok {
			checkDocs(t, file, items, path+"[]")
		}
	}
}

// Named types defined in several files (PoolId in the lane record, lane
// event and control record) must be defined identically.
func TestSharedNamedTypesAgree(t *testing.T) {
	defs := map[string]any{}
	where := map[string]string{}
	for _, rt := range RecordTypes() {
		raw, _ := schemaFiles.ReadFile(rt.SchemaFile())
		var top any
		_ = json.Unmarshal(raw, &top)
		collectNamed(top, func(name string, def map[string]any) {
			if prev, ok := defs[name]; ok && !reflect.DeepEqual(prev, def) {
				t.Errorf("%s is defined differently in %s and %s", name, where[name], rt.SchemaFile())
			}
			defs[name], where[name] = def, rt.SchemaFile()
		})
	}
	if _, ok := defs["PoolId"]; !ok {
		t.Fatal("PoolId not found")
	}
}

func collectNamed(v any, fn func(string, map[string]any)) {
	switch s := v.(type) {
	case []any:
		for _, b := range s {
			collectNamed(b, fn)
		}
	case map[string]any:
		if name, ok := s["name"].(string); ok && (s["type"] == "record" || s["type"] == "enum" || s["type"] == "fixed") {
			def := map[string]any{}
			for k, x := range s {
				if k != "namespace" {
					def[k] = x
				}
			}
			fn(name, def)
		}
		for _, k := range []string{"type", "items", "values"} {
			if x, ok := s[k]; ok {
				collectNamed(x, fn)
			}
		}
		if fields, ok := s["fields"].([]any); ok {
			for _, f := range fields {
				collectNamed(f, fn)
			}
		}
	}
}

// The Go enum tables must list the Avro symbols in schema order.
func TestEnumSymbolsMatchSchemas(t *testing.T) {
	tables := map[string][]string{
		"IdentitySource": identitySourceSymbols, "QueryStatus": queryStatusSymbols,
		"LaneEventKind": laneEventKindSymbols, "LaneFaultKind": laneFaultKindSymbols,
		"FailurePoint": failurePointSymbols, "FailureDomain": failureDomainSymbols,
		"CommitState": commitStateSymbols, "FailureAction": failureActionSymbols,
		"SnapshotRequestReason": snapshotRequestReasonSymbols, "DeadLetterReason": deadLetterReasonSymbols,
		"StorageTier": storageTierSymbols, "LaneAnswerState": laneAnswerStateSymbols,
	}
	found := map[string]bool{}
	for _, rt := range RecordTypes() {
		raw, _ := schemaFiles.ReadFile(rt.SchemaFile())
		var top any
		_ = json.Unmarshal(raw, &top)
		collectNamed(top, func(name string, def map[string]any) {
			if def["type"] != "enum" {
				return
			}
			want, ok := tables[name]
			if !ok {
				t.Errorf("enum %s has no Go table", name)
				return
			}
			var got []string
			for _, s := range def["symbols"].([]any) {
				got = append(got, s.(string))
			}
			if !reflect.DeepEqual(got, want) {
				t.Errorf("enum %s: schema %v, Go %v", name, got, want)
			}
			if d, ok := def["default"]; ok && d != "UNKNOWN" && want[0] != "UNKNOWN" {
				t.Errorf("enum %s: default %v must be the first symbol UNKNOWN", name, d)
			}
			found[name] = true
		})
	}
	for name := range tables {
		if !found[name] {
			t.Errorf("Go table %s matches no schema enum", name)
		}
	}
}

// The generated names of the record-kind enums are the Avro record names of
// their union's branches, in schema order (kind 1 is the first branch).
func TestUnionKindNamesMatchSchemas(t *testing.T) {
	for _, u := range []struct {
		rt    RecordType
		field string
		names func(i int) string // the Go name of branch i
	}{
		{TypeLaneRecord, "body", func(i int) string { return LaneRecordKind(i + 1).String() }},
		{TypeQueryRequest, "input", func(i int) string { return QueryInputKind(i + 1).String() }},
		{TypeControlRecord, "body", func(i int) string { return ControlKind(i + 1).String() }},
		{TypeKvEvent, "data", func(i int) string { return KvEventKind(i + 1).String() }},
	} {
		var top map[string]any
		if err := json.Unmarshal([]byte(u.rt.Schema()), &top); err != nil {
			t.Fatal(err)
		}
		var branches []any
		for _, f := range top["fields"].([]any) {
			if fm := f.(map[string]any); fm["name"] == u.field {
				branches = fm["type"].([]any)
			}
		}
		if len(branches) == 0 {
			t.Fatalf("%s has no union field %s", u.rt, u.field)
		}
		for i, b := range branches {
			name, _ := b.(string)
			if m, ok := b.(map[string]any); ok {
				name, _ = m["name"].(string)
			}
			if got := u.names(i); got != name {
				t.Errorf("%s.%s branch %d is %s, Go names it %s", u.rt, u.field, i, name, got)
			}
		}
		if extra := u.names(len(branches)); !strings.Contains(extra, "(") {
			t.Errorf("%s.%s: Go names a kind %s beyond the schema's %d branches", u.rt, u.field, extra, len(branches))
		}
	}
}

func TestBuiltinIDs(t *testing.T) {
	ids := map[int]RecordType{}
	for _, rt := range RecordTypes() {
		id := BuiltinID(rt)
		if prev, ok := ids[id]; ok {
			t.Fatalf("%s and %s share built-in id %d", prev, rt, id)
		}
		ids[id] = rt
		if id>>16 != 0x434B || id>>8&0xFF != SchemaVersion {
			t.Fatalf("%s: built-in id %#x outside the CK/v%d range", rt, id, SchemaVersion)
		}
	}
	if BuiltinID(TypeLaneRecord) != 0x434B0101 {
		t.Fatalf("lane record built-in id changed to %#x: built-in ids are part of the wire contract", BuiltinID(TypeLaneRecord))
	}
}

// The bounds checker's parser must agree with goavro about every embedded
// schema's top-level name.
func TestSkimParserNames(t *testing.T) {
	for _, rt := range RecordTypes() {
		if got := builtins[rt].tree.name; got != rt.FullName() {
			t.Fatalf("%s parsed as %s", rt, got)
		}
	}
}
