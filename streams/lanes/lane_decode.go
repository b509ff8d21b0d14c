package lanes

import (
	"context"
	"fmt"

	"github.com/ckf-stream/ckf-stream/ckf"
	"github.com/ckf-stream/ckf-stream/schemas"
	"github.com/ckf-stream/ckf-stream/streams"
	"github.com/twmb/franz-go/pkg/kgo"
)

// The decode stage of a lane. Decoding a lane record (the Avro body, its contract checks, the
// producer identity, a delta's images) is a pure function of the record's bytes, so it runs on a
// goroutine of its own in front of the lane's owner: the owner applies one run of deltas while
// the next is decoded. The stage holds no lane state and makes no decision: a record it cannot
// decode travels on with its error, and the owner rejects it. On two cores this lifts the lane
// from decode-then-apply in series to the slower of the two (BenchmarkE2EIngestVsRaw).

// decodeRunRecords and decodeRunImages bound one decoded run: enough records to amortise the
// hand-over, few enough images (8,192 × 16 bytes = 128 KiB) that the owner applies them while
// they are still in cache. A single larger delta makes a run of its own.
const (
	decodeRunRecords = 256
	decodeRunImages  = 8192
)

// decodeBuffers is how many runs exist per lane: one the owner processes, one being decoded, one
// queued between them. The stage blocks when all are in use, stops taking records from the
// feed, and the feed pauses the partition: backpressure reaches Kafka.
const decodeBuffers = 3

// decodedRecord is one lane record as the decode stage leaves it.
type decodedRecord struct {
	rec *kgo.Record
	// err is the record's decode error (lr is then meaningless); idErr the error converting its
	// wire identity (id is then meaningless).
	err, idErr error
	lr         schemas.LaneRecord // its packed fields alias rec.Value
	id         ckf.ProducerIdentity
	images     []ckf.BucketImage // a delta's images, in the run's image buffer
	panicked   any               // not nil: decoding panicked with this value
}

// decodedRun is a run of consecutive records of one lane, decoded. The owner owns it from the
// moment it receives it until it gives it back (laneDecoder.release); the stage then reuses its
// memory.
type decodedRun struct {
	epoch  uint64 // the feed's seek epoch of the records (LaneBatch.Epoch)
	recs   []decodedRecord
	images []ckf.BucketImage // backing store of the deltas' images
}

// laneDecoder is the decode stage of one lane.
type laneDecoder struct {
	feed *LaneFeed
	// records decodes the lane's records; it remembers the producer identity they repeat
	// (schemas.LaneRecordDecoder), and wire, id and idErr are that identity's last conversion
	// (haveID: there is one), so an unchanged identity is neither decoded nor converted again.
	records *schemas.LaneRecordDecoder
	wire    schemas.ProducerIdentity
	id      ckf.ProducerIdentity
	idErr   error
	haveID  bool
	lane    int32
	out     chan *decodedRun // decoded runs, in offset order
	free    chan *decodedRun // runs the owner gave back
}

func newLaneDecoder(feed *LaneFeed, codec *schemas.Codec, lane uint8) *laneDecoder {
	d := &laneDecoder{feed: feed, records: codec.NewLaneRecordDecoder(), lane: int32(lane),
		out: make(chan *decodedRun, decodeBuffers), free: make(chan *decodedRun, decodeBuffers)}
	for range decodeBuffers {
		d.free <- &decodedRun{recs: make([]decodedRecord, 0, decodeRunRecords), images: make([]ckf.BucketImage, 0, decodeRunImages)}
	}
	return d
}

// release gives a run back to the stage. The owner must not touch it afterwards. The run's
// records are cleared first: a decoded record points into the fetched batch it came from (rec,
// and lr's packed fields alias rec.Value), so a slot left filled keeps that whole batch (a
// decompressed buffer of up to a producer batch) reachable, and a slot that later, shorter runs
// do not reach again keeps it for good: after the full runs of a catch-up (a restart, a broker
// outage), up to decodeBuffers × decodeRunRecords batches per lane.
func (d *laneDecoder) release(r *decodedRun) {
	clear(r.recs)
	r.recs = r.recs[:0]
	d.free <- r
}

// run decodes the lane's batches until ctx ends.
func (d *laneDecoder) run(ctx context.Context) {
	for {
		b, ok := d.feed.TryNext(d.lane)
		if !ok {
			select {
			case <-ctx.Done():
				return
			case <-d.feed.Ready(d.lane):
			}
			continue
		}
		for recs := b.Records; len(recs) > 0; {
			var r *decodedRun
			select {
			case <-ctx.Done():
				return
			case r = <-d.free:
			}
			recs = recs[d.fill(r, b.Epoch, recs):]
			select {
			case <-ctx.Done():
				return
			case d.out <- r:
			}
		}
	}
}

// fill decodes records from the front of recs into r, reusing r's memory, and returns how many
// it took: at least one, at most decodeRunRecords, and no delta whose images would overflow r's
// image buffer (unless it is the run's first record, for which the buffer grows).
func (d *laneDecoder) fill(r *decodedRun, epoch uint64, recs []*kgo.Record) int {
	r.epoch = epoch
	r.recs = r.recs[:0]
	r.images = r.images[:0]
	for _, rec := range recs {
		if len(r.recs) == decodeRunRecords {
			break
		}
		r.recs = r.recs[:len(r.recs)+1] // decoded in place: a decodedRecord is a few hundred bytes
		out := &r.recs[len(r.recs)-1]
		d.decode(out, rec)
		if out.deltaOK() {
			n := out.lr.Delta.Images.Len()
			if len(r.images)+n > cap(r.images) {
				if len(r.recs) > 1 {
					*out = decodedRecord{} // no reference left beyond the run's length (see release)
					r.recs = r.recs[:len(r.recs)-1]
					break // the next run starts with this record (decoding it again is cheap)
				}
				r.images = make([]ckf.BucketImage, 0, n)
			}
			start := len(r.images)
			r.images = r.images[:start+n]
			out.images = r.images[start : start+n : start+n]
			convertImages(out)
		}
	}
	return len(r.recs)
}

// deltaOK reports whether the record is a delta that decoded cleanly.
func (out *decodedRecord) deltaOK() bool {
	return out.err == nil && out.idErr == nil && out.panicked == nil && !out.rec.Attrs.IsControl() &&
		out.lr.Kind == schemas.LaneDelta
}

// decode decodes one record; a panic is recovered and handed to the owner with the record.
func (d *laneDecoder) decode(out *decodedRecord, rec *kgo.Record) {
	*out = decodedRecord{rec: rec}
	defer func() {
		if v := recover(); v != nil {
			out.panicked = fmt.Sprintf("decoding: %v", v)
		}
	}()
	if rec.Attrs.IsControl() {
		return // a transaction marker: nothing to decode
	}
	lr, err := d.records.Decode(rec.Value)
	if err != nil {
		out.err = err
		return
	}
	out.lr = lr
	if !d.haveID || lr.Identity != d.wire {
		d.wire, d.haveID = lr.Identity, true
		d.id, d.idErr = streams.CkfIdentity(lr.Identity)
	}
	out.id, out.idErr = d.id, d.idErr
}

// convertImages unpacks a delta's images into out.images (sized by the caller); a panic is
// recovered and handed to the owner with the record.
func convertImages(out *decodedRecord) {
	defer func() {
		if v := recover(); v != nil {
			out.panicked = fmt.Sprintf("decoding images: %v", v)
		}
	}()
	for i := range out.images {
		im := out.lr.Delta.Images.At(i)
		out.images[i] = ckf.BucketImage{Bucket: im.Bucket, Value: im.Value}
	}
}
