// Package enumtest holds the helpers of the enum mapping tests of streams and streams/relay: the
// tests walk every value the source enum's generated String method names, so a constant added to
// a source enum (and generated) fails them until its table maps it. It imports nothing of
// streams, so the internal tests of every streams package may use it.
package enumtest

import (
	"reflect"
	"strconv"
	"strings"
	"testing"
)

// NamedEnum is an enum with a generated String method.
type NamedEnum interface {
	~uint8
	String() string
}

// NamedValues returns every value of E that has a name, in order: all 256 values except those
// String prints in stringer's form for a value without a name, "E(n)".
func NamedValues[E NamedEnum](t *testing.T) []E {
	t.Helper()
	typeName := reflect.TypeFor[E]().Name()
	var out []E
	for v := range 256 {
		if E(v).String() != typeName+"("+strconv.Itoa(v)+")" {
			out = append(out, E(v))
		}
	}
	if len(out) == 0 {
		t.Fatalf("%s has no named value: is its String method generated?", typeName)
	}
	return out
}

// WireName is the Avro symbol a snake_case name of package ckf stands for.
func WireName(v interface{ String() string }) string { return strings.ToUpper(v.String()) }
