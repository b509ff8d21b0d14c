//go:build !amd64 || race || purego

package index

import (
	"fmt"
	"sync/atomic"

	"github.com/ckf-stream/ckf-stream/ckf"
)

// storeImages stores a delta's images into lane's column: the word of
// (image.Bucket, lane) becomes image.Value, one atomic 64-bit store per
// image, in list order (store_image, consumer §5.2). Every bucket must be <
// buckets (ApplyDelta validates the delta first); an image out of range, a
// broken precondition, panics after the images before it were stored, as
// the assembly path does. amd64 builds without race or purego use plain
// stores instead (table_storeimages_amd64.go explains why that is
// equivalent there); this loop is what the race detector sees.
func (t *transposedTable) storeImages(lane int, images []ckf.BucketImage) {
	if uint(lane) >= uint(t.stride) {
		panic(fmt.Sprintf("index: storeImages lane %d out of range", lane))
	}
	col := t.words[lane:]
	for i := range images {
		b := images[i].Bucket
		if b >= t.buckets { // b*stride could wrap around into range
			panic(fmt.Sprintf("index: storeImages bucket %d out of range [0, %d)", b, t.buckets))
		}
		atomic.StoreUint64(&col[b*uint64(t.stride)], images[i].Value)
	}
}
