package ckf

// BucketImage is one absolute bucket word of a delta: after applying it the
// consumer's word for Bucket equals Value. Images are never relative.
type BucketImage struct {
	Bucket uint64
	Value  uint64
}

// Snapshot is DcCkfSnapshot: the complete word array of one producer
// generation at Sequence, addressed to one lease. len(Buckets) equals
// Identity.Format.BucketCount; word order is bucket index order.
//
// A snapshot tagged N is continued by the delta N -> N+1 under the same
// lease (sequences are per producer generation, not per lease).
type Snapshot struct {
	Identity ProducerIdentity
	Lease    LaneLease
	Sequence uint64
	Buckets  []uint64
}

// Delta is DcCkfDelta: the absolute images that move a consumer from
// BaseSequence to Sequence (= BaseSequence+1). A producer never emits an
// empty delta, a duplicate bucket or a bucket >= BucketCount; Images are in
// publication order (a bucket that received a relocated fingerprint before
// the bucket it left; producer.DcState.drain), which a consumer keeps by
// storing them in list order.
type Delta struct {
	Identity     ProducerIdentity
	Lease        LaneLease
	BaseSequence uint64
	Sequence     uint64
	Images       []BucketImage
}

// DrainMarker is ConsumerDrainMarker: proof request that the consumer on
// Lease has installed exactly ExpectedSequence (detects a lost final delta).
type DrainMarker struct {
	Lease            LaneLease
	ExpectedSequence uint64
}
