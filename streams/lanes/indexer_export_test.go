package lanes

// SetBeforeRecord makes fn run on a lane's goroutine before the lane handles each record of its
// partition; a panic in fn is handled like a panic in the lane's own code. Call it before Run.
func SetBeforeRecord(ix *Indexer, fn func(lane uint8, offset int64)) { ix.hooks.beforeRecord = fn }
