package schemas

import (
	"errors"
	"testing"
)

func testSnapshotIndexEntries() map[string]SnapshotIndexEntry {
	return map[string]SnapshotIndexEntry{
		"single-chunk": {Lane: 0, Identity: testIdentity(), Sequence: 0, FirstOffset: 0, LastOffset: 0, ChunkCount: 1, WriteTime: testTime(1)},
		"lane-15":      {Lane: 15, Identity: testIdentity(), Sequence: 1<<64 - 1, FirstOffset: 1 << 40, LastOffset: 1<<40 + 32, ChunkCount: 33, WriteTime: testTime(1_700_000_000_000_000)},
	}
}

func TestRoundTripSnapshotIndexEntry(t *testing.T) {
	for name, e := range testSnapshotIndexEntries() {
		roundTrip(t, name, e, (*Codec).EncodeSnapshotIndexEntry, (*Codec).DecodeSnapshotIndexEntry)
	}
}

func TestSnapshotIndexEntryValidation(t *testing.T) {
	c := newTestCodec(t)
	good := testSnapshotIndexEntries()["lane-15"]
	for name, mut := range map[string]func(e *SnapshotIndexEntry){
		"lane":         func(e *SnapshotIndexEntry) { e.Lane = 64 },
		"first-offset": func(e *SnapshotIndexEntry) { e.FirstOffset = -1 },
		"last-offset":  func(e *SnapshotIndexEntry) { e.LastOffset = e.FirstOffset - 1 },
		"chunk-count":  func(e *SnapshotIndexEntry) { e.ChunkCount = 0 },
		"generation":   func(e *SnapshotIndexEntry) { e.Identity.LayoutGeneration = 0 },
	} {
		e := good
		mut(&e)
		if _, err := c.EncodeSnapshotIndexEntry(e); !errors.Is(err, ErrInvalidField) {
			t.Errorf("%s: encode error %v, want ErrInvalidField", name, err)
		}
	}
	b, err := c.EncodeSnapshotIndexEntry(good)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.DecodeSnapshotIndexEntry(b[:len(b)-3]); !errors.Is(err, ErrTruncated) && !errors.Is(err, ErrMalformed) {
		t.Errorf("truncated entry: %v, want ErrTruncated or ErrMalformed", err)
	}
	if _, err := c.DecodeLaneRecord(b); !errors.Is(err, ErrSchemaMismatch) {
		t.Errorf("entry decoded as a lane record: %v, want ErrSchemaMismatch", err)
	}
}

func FuzzDecodeSnapshotIndexEntry(f *testing.F) {
	fuzzDecoder(f, TypeSnapshotIndex, testSnapshotIndexEntries(), (*Codec).EncodeSnapshotIndexEntry, (*Codec).DecodeSnapshotIndexEntry, nil)
}

// TestImageRangeErrorIsTyped: an out-of-range delta image is rejected at decode with a typed
// detail naming the bucket, on the hand-written and the goavro path alike.
func TestImageRangeErrorIsTyped(t *testing.T) {
	for name, c := range map[string]*Codec{"fast": newTestCodec(t), "goavro": newTestCodec(t, disableFastPath())} {
		rec := testDelta(3)
		bc := rec.Identity.Format.BucketCount
		b, err := c.EncodeLaneRecord(rec)
		if err != nil {
			t.Fatal(err)
		}
		// Overwrite the last image's bucket (the 16-byte images end the body but for the one-byte
		// nulls of the appended fields) with bucket_count.
		img := b[len(b)-laneTrailerNulls-ImageSize:]
		for i := 0; i < 8; i++ {
			img[i] = byte(bc >> (8 * i))
		}
		_, err = c.DecodeLaneRecord(b)
		var ire *ImageRangeError
		if !errors.Is(err, ErrInvalidField) || !errors.As(err, &ire) || ire.Bucket != bc || ire.Index != 2 {
			t.Errorf("%s: decode error %v (%+v), want ErrInvalidField with ImageRangeError{Index: 2, Bucket: %d}", name, err, ire, bc)
		}
		// Two images out of range, the larger one last: the first is named.
		img = b[len(b)-laneTrailerNulls-2*ImageSize:]
		for i := 0; i < 8; i++ {
			img[i] = byte((bc + 1) >> (8 * i))
		}
		for i := 0; i < 8; i++ {
			img[ImageSize+i] = byte((bc + 7) >> (8 * i))
		}
		_, err = c.DecodeLaneRecord(b)
		if !errors.As(err, &ire) || ire.Bucket != bc+1 || ire.Index != 1 {
			t.Errorf("%s: decode error %v (%+v), want ImageRangeError{Index: 1, Bucket: %d}", name, err, ire, bc+1)
		}
	}
}
