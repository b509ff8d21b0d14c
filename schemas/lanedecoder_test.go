package schemas

import (
	"bytes"
	"reflect"
	"testing"
)

// unvalidatedLaneRecord frames rec with the embedded lane-record schema without the contract
// checks AppendLaneRecord makes first, so a test can build a record that breaks them.
func unvalidatedLaneRecord(c *Codec, rec LaneRecord) []byte {
	return appendLaneRecordBody(AppendHeader(nil, c.writeIDs[TypeLaneRecord]), &rec)
}

// sameDecoding fails t unless the decoder's result for data is the codec's: the same record, or
// an error with the same text.
func sameDecoding(t *testing.T, c *Codec, d *LaneRecordDecoder, what string, data []byte) {
	t.Helper()
	want, wantErr := c.DecodeLaneRecord(data)
	got, err := d.Decode(data)
	switch {
	case (err == nil) != (wantErr == nil):
		t.Fatalf("%s: decoder error %v, codec error %v", what, err, wantErr)
	case err != nil && err.Error() != wantErr.Error():
		t.Fatalf("%s: decoder error %q, codec error %q", what, err, wantErr)
	case !reflect.DeepEqual(got, want):
		t.Fatalf("%s: decoder %+v, codec %+v", what, got, want)
	}
}

// TestLaneRecordDecoderMatchesCodec decodes a stream that changes identity, breaks the contract
// in the identity and after it (while the identity before is remembered), cuts records short
// and names an unknown schema, and holds every result to Codec.DecodeLaneRecord's.
func TestLaneRecordDecoderMatchesCodec(t *testing.T) {
	c := newTestCodec(t)
	enc := func(rec LaneRecord) []byte {
		b, err := c.EncodeLaneRecord(rec)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	delta := testDelta(16)
	otherIncarnation := testDelta(16)
	otherIncarnation.Identity.Incarnation++
	badIdentity := testDelta(4)
	badIdentity.Identity.Format.BucketCount = 3 << 10 // not a power of two
	badImage := testDelta(4)
	badImage.Delta.Images = AppendImage(nil, badImage.Identity.Format.BucketCount, 1) // bucket out of range
	unknownSchema := bytes.Clone(enc(delta))
	unknownSchema[4] ^= 0x55

	d := c.NewLaneRecordDecoder()
	steps := []struct {
		name string
		data []byte
	}{
		{"first delta", enc(delta)},
		{"the same identity again", enc(testDelta(3))},
		{"a heartbeat of the same identity", enc(testLaneRecords()["heartbeat"])},
		{"an image out of range after the remembered identity", unvalidatedLaneRecord(c, badImage)},
		{"cut inside the remembered identity", enc(delta)[:20]},
		{"cut after the remembered identity", enc(delta)[:len(enc(delta))-5]},
		{"another incarnation", enc(otherIncarnation)},
		{"the first identity again", enc(delta)},
		{"an identity breaking a contract rule", unvalidatedLaneRecord(c, badIdentity)},
		{"that identity again", unvalidatedLaneRecord(c, badIdentity)},
		{"an unknown schema id", unknownSchema},
		{"no header", []byte{0, 1}},
		{"a snapshot chunk", enc(testSnapshot(64))},
		{"a delta with capacity", enc(testLaneRecords()["delta-capacity"])},
		{"the first delta again", enc(delta)},
	}
	for _, s := range steps {
		sameDecoding(t, c, d, s.name, s.data)
	}
	if d.known.id != delta.Identity {
		t.Fatalf("remembered identity %+v, want the last accepted record's %+v", d.known.id, delta.Identity)
	}
	// A rejected identity is never remembered: after the bad one, the good one is still known.
	if _, err := d.Decode(unvalidatedLaneRecord(c, badIdentity)); err == nil {
		t.Fatal("a record breaking the identity rules decoded")
	}
	if d.known.id != delta.Identity {
		t.Fatalf("a rejected record replaced the remembered identity: %+v", d.known.id)
	}
}

// TestLaneRecordDecoderGoavroPath checks a codec without the hand-written path: the decoder
// then defers every record to it.
func TestLaneRecordDecoderGoavroPath(t *testing.T) {
	c := newTestCodec(t, disableFastPath())
	d := c.NewLaneRecordDecoder()
	for name, rec := range testLaneRecords() {
		b, err := c.EncodeLaneRecord(rec)
		if err != nil {
			t.Fatal(err)
		}
		sameDecoding(t, c, d, name, b)
		sameDecoding(t, c, d, name+" again", b)
	}
}

// FuzzLaneRecordDecoder primes a decoder with a valid record and then prime, and holds its
// decoding of data (twice, so data's own identity may be remembered the second time) to
// Codec.DecodeLaneRecord's.
func FuzzLaneRecordDecoder(f *testing.F) {
	c := newTestCodec(f)
	seed, err := c.EncodeLaneRecord(testDelta(4))
	if err != nil {
		f.Fatal(err)
	}
	for _, rec := range testLaneRecords() {
		if rec.Kind == LaneSnapshotChunk {
			rec.Snapshot.Words = rec.Snapshot.Words[:64]
		}
		b, err := c.EncodeLaneRecord(rec)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(seed, b)
		f.Add(b, b[:len(b)-3])
		f.Add(b, b[:len(b)/2])
	}
	f.Fuzz(func(t *testing.T, prime, data []byte) {
		d := c.NewLaneRecordDecoder()
		sameDecoding(t, c, d, "seed", seed)
		sameDecoding(t, c, d, "prime", prime)
		sameDecoding(t, c, d, "data", data)
		sameDecoding(t, c, d, "data again", data)
	})
}
