package streams

import (
	"reflect"
	"testing"

	"github.com/ckf-stream/ckf-stream/ckf"
	"github.com/ckf-stream/ckf-stream/ckf/index"
	"github.com/ckf-stream/ckf-stream/schemas"
	"github.com/ckf-stream/ckf-stream/streams/internal/enumtest"
)

// The enum mapping tests walk every value the source enum's generated String method names, so a
// constant added to a source enum (and generated) fails them until its table maps it.

func TestNamedValuesSeesOnlyNamedValues(t *testing.T) {
	got := enumtest.NamedValues[ckf.FailurePoint](t)
	if !reflect.DeepEqual(got, ckf.FailurePoints[:]) {
		t.Fatalf("named failure points %v, want %v", got, ckf.FailurePoints)
	}
}

func TestIdentitySourceMapsEveryValue(t *testing.T) {
	for _, s := range enumtest.NamedValues[ckf.IdentitySource](t) {
		w := wireSource(s)
		if int(s) >= len(wireSources) || w.String() != enumtest.WireName(s) {
			t.Errorf("ckf %v: wire %v", s, w)
		}
		if back := ckfSource(w); back != s {
			t.Errorf("ckf %v: back from the wire as %v", s, back)
		}
	}
	for _, w := range enumtest.NamedValues[schemas.IdentitySource](t) {
		if s := ckfSource(w); int(w) >= len(ckfSources) || enumtest.WireName(s) != w.String() {
			t.Errorf("wire %v: ckf %v", w, s)
		}
	}
}

func TestLaneFaultMapsEveryKind(t *testing.T) {
	// The payload each kind carries on the wire (expected, actual), from a fault with distinct
	// payload fields.
	f := index.LaneFault{Expected: 11, Actual: 12, HasActual: true, Base: 20, Sequence: 30, Installed: 40, Bucket: 50}
	some := schemas.Some[uint64]
	none := schemas.Optional[uint64]{}
	payload := map[index.FaultKind][2]schemas.Optional[uint64]{
		index.FaultWrongIdentity:              {none, none},
		index.FaultInvalidSnapshotBucketCount: {some(11), some(12)},
		index.FaultEmptyDelta:                 {none, none},
		index.FaultBaseSequenceMismatch:       {some(11), some(12)},
		index.FaultNonContiguousSequence:      {some(21), some(30)},
		index.FaultSequenceExhausted:          {none, none},
		index.FaultInvalidImageIndex:          {none, some(50)},
		index.FaultDuplicateImageIndex:        {none, some(50)},
		index.FaultSnapshotWhileReady:         {some(40), some(30)},
		index.FaultTerminalSequenceMismatch:   {some(11), some(12)},
	}
	for _, k := range enumtest.NamedValues[index.FaultKind](t) {
		f.Kind = k
		w := WireFault(f, 77)
		if int(k) >= len(laneFaultKinds) || w.Kind.String() != enumtest.WireName(k) || w.Kind == schemas.FaultUnknown {
			t.Errorf("ingestor fault %v: wire kind %v", k, w.Kind)
		}
		want, ok := payload[k]
		if !ok {
			t.Errorf("ingestor fault %v: no payload expectation in this test", k)
		}
		if w.Expected != want[0] || w.Actual != want[1] || w.Offset != schemas.Some[int64](77) || w.Detail != f.Error() {
			t.Errorf("ingestor fault %v: wire %+v, want expected %+v actual %+v", k, w, want[0], want[1])
		}
	}
	f = index.LaneFault{Kind: index.FaultTerminalSequenceMismatch, Expected: 5}
	if w := WireFault(f, 0); w.Actual.Valid {
		t.Errorf("terminal mismatch without an actual sequence: %+v", w)
	}
}

func TestAssignmentFaultMapsEveryKind(t *testing.T) {
	for _, k := range enumtest.NamedValues[index.AssignmentErrorKind](t) {
		err := &index.AssignmentError{Kind: k, MinimumExclusive: 6, Actual: 4}
		w := AssignmentFault(err, 9)
		if int(k) >= len(assignmentFaultKinds) || w.Kind.String() != enumtest.WireName(k) || w.Kind == schemas.FaultUnknown ||
			w.Detail != err.Error() || w.Offset != schemas.Some[int64](9) {
			t.Errorf("assignment error %v: wire %+v", k, w)
		}
		// Only the stale epoch compares two numbers: the lowest epoch accepted and the one refused.
		want := [2]schemas.Optional[uint64]{}
		if k == index.AssignStaleAssignmentEpoch {
			want = [2]schemas.Optional[uint64]{schemas.Some[uint64](7), schemas.Some[uint64](4)}
		}
		if w.Expected != want[0] || w.Actual != want[1] {
			t.Errorf("assignment error %v: expected %+v actual %+v, want %+v", k, w.Expected, w.Actual, want)
		}
	}
}

func TestFailureTableMapsEveryValue(t *testing.T) {
	for _, d := range enumtest.NamedValues[ckf.FailureDomain](t) {
		w := Lookup(wireDomains[:], d, schemas.Optional[schemas.FailureDomain]{})
		if int(d) >= len(wireDomains) || w.Valid != (d != ckf.NoRecoveryDomain) || w.Valid && w.Value.String() != enumtest.WireName(d) {
			t.Errorf("domain %v: wire %+v", d, w)
		}
	}
	for _, c := range enumtest.NamedValues[ckf.CommitState](t) {
		if w := Lookup(wireCommits[:], c, schemas.Optional[schemas.CommitState]{}); !w.Valid || w.Value.String() != enumtest.WireName(c) {
			t.Errorf("commit state %v: wire %+v", c, w)
		}
	}
	for _, a := range enumtest.NamedValues[ckf.FailureAction](t) {
		if w := Lookup(wireActions[:], a, schemas.Optional[schemas.FailureAction]{}); !w.Valid || w.Value.String() != enumtest.WireName(a) {
			t.Errorf("action %v: wire %+v", a, w)
		}
	}
	for _, p := range enumtest.NamedValues[ckf.FailurePoint](t) {
		d := ckf.DispositionOf(p)
		w := WireDisposition(p)
		if w == nil {
			t.Errorf("point %v: no wire disposition", p)
			continue
		}
		rd, hasRD := w.RecoveryDomain.Get()
		if w.Point.String() != enumtest.WireName(p) || w.Domain.String() != enumtest.WireName(d.Domain) || w.Commit.String() != enumtest.WireName(d.Commit) ||
			w.Action.String() != enumtest.WireName(d.Action) || hasRD != (d.RecoveryDomain != ckf.NoRecoveryDomain) || hasRD && rd.String() != enumtest.WireName(d.RecoveryDomain) {
			t.Errorf("point %v (%+v): wire %+v", p, d, w)
		}
	}
	for _, p := range []ckf.FailurePoint{0, ckf.FailurePoints[len(ckf.FailurePoints)-1] + 1} {
		if w := WireDisposition(p); w != nil {
			t.Errorf("undefined point %d: wire %+v", p, w)
		}
	}
}
