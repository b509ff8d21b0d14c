package testenv

import (
	"fmt"
	"reflect"
)

// FieldDiffs lists the fields in which two values of one struct type differ, each with both
// values ("Name: configuration …, streams …", after the labels given). Tests that pin one
// component's defaults to another's use it to name every drifted field at once.
func FieldDiffs(a, b any, labelA, labelB string) []string {
	va, vb := reflect.ValueOf(a), reflect.ValueOf(b)
	var out []string
	for i := range va.NumField() {
		if !reflect.DeepEqual(va.Field(i).Interface(), vb.Field(i).Interface()) {
			out = append(out, fmt.Sprintf("%s: %s %+v, %s %+v", va.Type().Field(i).Name, labelA, va.Field(i), labelB, vb.Field(i)))
		}
	}
	return out
}
