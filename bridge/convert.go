package bridge

import (
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/ckf-stream/ckf-stream/bridge/kvevents"
	"github.com/ckf-stream/ckf-stream/ckf"
	"github.com/ckf-stream/ckf-stream/schemas"
)

// Sentinels of a batch the converter refuses. A refused batch changes no state and is
// dead-lettered with its raw bytes; the errors are *RefusedError wrapping one of these.
var (
	// ErrBlockSize: a stored event's block size is not bridge.block_size, or its token ids are
	// not block size × blocks long. The engine hashes other blocks than the queries will.
	ErrBlockSize = errors.New("bridge: block size mismatch")
	// ErrLoraUnmapped: a stored event names a LoRA adapter only by its numeric id and
	// bridge.lora_names does not map that id; its blocks cannot be salted as queries will be.
	ErrLoraUnmapped = errors.New("bridge: LoRA id without a name")
	// ErrExtraKeys: a stored event's extra_keys is not one entry per block (the decoder refuses
	// such a batch already; this guards events built by hand).
	ErrExtraKeys = errors.New("bridge: extra keys do not match the blocks")
)

// RefusedError says which event of a batch was refused and why.
type RefusedError struct {
	Event  int // index in the batch
	Kind   error
	Detail string
}

func (e *RefusedError) Error() string {
	return fmt.Sprintf("%v: event %d: %s", e.Kind, e.Event, e.Detail)
}

// Unwrap returns the sentinel.
func (e *RefusedError) Unwrap() error { return e.Kind }

// MediumGPU is the medium of device-resident blocks; engines that send no medium only report
// device blocks.
const MediumGPU = "GPU"

// SpecFullAttention is the KV-cache spec kind of full-attention groups, the only groups whose
// blocks a prefix of tokens fully determines; others (sliding window, Mamba state) are skipped.
const SpecFullAttention = "full_attention"

// ConvertStats counts what one batch did.
type ConvertStats struct {
	Stored, Removed, Cleared int // engine events by kind, before filtering
	// Filtered are events of other media or non-full-attention groups (skipped), and partial
	// pages (a stored single block shorter than the block size: no query hashes it).
	Filtered int
	// ExtraCopies are stored blocks that were already held (another copy); HeldCopies removed
	// blocks that still have a copy. Neither is written.
	ExtraCopies, HeldCopies int
	// UnknownRemovals are removed blocks the bridge does not hold (dropped).
	UnknownRemovals int
	// Orphaned are stored events dropped because their parent block is not held on a rank
	// whose earlier history was lost (GuardOrphans).
	Orphaned int
}

// rankState is the converter's state of one data-parallel rank: how many copies of each
// engine block hash the engine holds on the device, and the hybrid-model groups it learned are
// not full attention.
type rankState struct {
	copies  map[kvevents.BlockHash]uint32
	skipped map[int64]bool
	// guard drops stores whose parent is not held (GuardOrphans), until a full clear.
	guard bool
}

// Converter turns decoded engine batches into KvEvent records for one worker. It keeps, per
// rank, the copy count of every device-resident block hash, so that a hash stored twice is
// written once and written as removed only when its last copy goes (the relay's lineage maps
// one external id once). Not safe for concurrent use.
type Converter struct {
	worker    uint64
	blockSize int
	loraNames map[int64]string
	ranks     map[uint32]*rankState
}

// NewConverter returns a converter for worker. blockSize is the only block size accepted;
// loraNames maps the numeric LoRA ids of engines that send no lora_name.
func NewConverter(worker uint64, blockSize int, loraNames map[int64]string) *Converter {
	return &Converter{worker: worker, blockSize: blockSize, loraNames: loraNames, ranks: map[uint32]*rankState{}}
}

func (c *Converter) rank(r uint32) *rankState {
	st := c.ranks[r]
	if st == nil {
		st = &rankState{copies: map[kvevents.BlockHash]uint32{}, skipped: map[int64]bool{}}
		c.ranks[r] = st
	}
	return st
}

// Held returns how many copies of h the converter counts on rank r.
func (c *Converter) Held(r uint32, h kvevents.BlockHash) uint32 {
	if st := c.ranks[r]; st != nil {
		return st.copies[h]
	}
	return 0
}

// HeldBlocks returns the number of distinct block hashes held on rank r.
func (c *Converter) HeldBlocks(r uint32) int {
	if st := c.ranks[r]; st != nil {
		return len(st.copies)
	}
	return 0
}

func (c *Converter) event(rank uint32, eventID uint64) schemas.KvEvent {
	return schemas.KvEvent{WorkerID: c.worker, DpRank: rank, EventID: eventID, StorageTier: schemas.TierDevice,
		ResidencyDomain: schemas.Some(schemas.ResidencyWorker)}
}

// Clear forgets everything held on rank r and returns the KvCleared event that tells the
// relay (engine restart, the engine's own AllBlocksCleared, lost history). It ends
// GuardOrphans.
func (c *Converter) Clear(rank uint32, eventID uint64) schemas.KvEvent {
	if st := c.ranks[rank]; st != nil {
		clear(st.copies)
		st.guard = false
	}
	ev := c.event(rank, eventID)
	ev.Kind = schemas.KvClearedEvent
	return ev
}

// GuardOrphans makes rank r drop stored events whose parent block it does not hold (on) until
// the next full clear, or stops it (off). After lost history the bridge no longer holds the
// blocks the engine stored meanwhile, and the relay refuses a store whose parent it does not
// know (a dead letter per store); the guard counts them (ConvertStats.Orphaned) instead.
func (c *Converter) GuardOrphans(r uint32, on bool) { c.rank(r).guard = on }

// loraName returns a stored event's LoRA name: lora_name, or the name bridge.lora_names maps
// its lora_id to; "" without a LoRA.
func (c *Converter) loraName(i int, ev *kvevents.Event) (string, error) {
	name := ev.LoraName
	if name == "" && ev.HasLoraID {
		n, ok := c.loraNames[ev.LoraID]
		if !ok {
			return "", &RefusedError{Event: i, Kind: ErrLoraUnmapped,
				Detail: fmt.Sprintf("lora_id %d has no lora_name and bridge.lora_names does not map it", ev.LoraID)}
		}
		name = n
	}
	return name, nil
}

// BlockExtraKeys returns the extra keys that enter the local hash of a stored block (producer
// §2.2): the engine's extra_keys entry of the block, less its first value when that value is
// the string loraName. vLLM puts the LoRA name first in every block's entry while a LoRA is
// active; the project salts by the LoRA name through the seed (ckf.BlockSaltSeed), so keeping
// it would salt twice and routers, which give the LoRA name on its own, would have to repeat
// it. The result aliases keys; an entry holding only the LoRA name yields an empty result (the
// block hashes as a text block of that LoRA).
func BlockExtraKeys(keys ckf.ExtraKeys, loraName string) ckf.ExtraKeys {
	if loraName != "" && len(keys) > 0 && keys[0].Kind == ckf.ExtraString && keys[0].Str == loraName {
		return keys[1:]
	}
	return keys
}

// WithCacheSalt returns the extra keys of a salted sequence's first block: keys with the salt
// string appended (a copy; keys is not changed). SGLang (0.5.18 and later) tells a salted
// store by its cache salt (kvevents.Event.CacheSalt) and keeps the request's whole radix path in
// the salt's namespace: its child keys and its event hashes are salted from the path's root,
// and two requests with the same tokens and different salts share no block. The project's
// chain gives the same namespaces with one salted block: the salt enters the local hash of the
// sequence's first block (a store without a parent), and every later block's canonical hash
// follows it through the chain (a later store names its parent, which is salted). That is where
// vLLM puts a request's cache_salt too (the first block's extra keys, after its multimodal
// items), so a router asks both engines alike: block_extra_keys with the salt as the first
// block's last key (producer §2.2, "Extra keys"). A router without the salt hashes another
// first block and matches none of the salted sequence.
func WithCacheSalt(keys ckf.ExtraKeys, salt string) ckf.ExtraKeys {
	return append(keys[:len(keys):len(keys)], ckf.ExtraStringValue(salt))
}

// outOfScope says whether ev, on its own, is outside the filter's scope: blocks on another
// medium than the device (compared without case: engines write "GPU", connectors other cases),
// or a store of a group that is not full attention. Such an event is filtered before its block
// size is checked (a hybrid model's Mamba state stores carry no tokens).
func outOfScope(ev *kvevents.Event) bool {
	if ev.Medium != "" && !strings.EqualFold(ev.Medium, MediumGPU) {
		return true
	}
	return ev.Kind == kvevents.KindStored && ev.SpecKind != "" && ev.SpecKind != SpecFullAttention
}

// partialPage says whether a stored event is one block shorter than the block size, whose
// tokens are all there: SGLang publishes the last, partial page of a sequence so. No query
// hashes a partial block (a router drops the trailing partial block), so it is filtered, not
// refused.
func (c *Converter) partialPage(ev *kvevents.Event) bool {
	return ev.Kind == kvevents.KindStored && len(ev.BlockHashes) == 1 && ev.BlockSize > 0 &&
		ev.BlockSize < c.blockSize && len(ev.TokenIDs) == ev.BlockSize
}

// skip says whether ev is outside the filter's scope: blocks on another medium than the
// device, or of a hybrid model's group that is not full attention. A stored event teaches the
// rank which groups to skip, so that their removals (which carry only the group index) are
// skipped too.
func (st *rankState) skip(ev *kvevents.Event) bool {
	if ev.Kind == kvevents.KindStored && ev.HasGroup && ev.SpecKind != "" {
		st.skipped[ev.GroupIdx] = ev.SpecKind != SpecFullAttention
	}
	if outOfScope(ev) {
		return true
	}
	if !ev.HasGroup {
		return false
	}
	if skip, known := st.skipped[ev.GroupIdx]; known {
		return skip
	}
	// A group no store has described yet: skip it when the full-attention group is known to be
	// another one (a hybrid model's other groups share the engine's block hashes, so applying
	// their removals would drop blocks the full-attention group still holds).
	for _, skip := range st.skipped {
		if !skip {
			return true
		}
	}
	return false
}

// GroupKinds encodes what rank r learned about its hybrid-model groups (for the
// ckf-bridge-groups record header, so a restarted bridge keeps filtering before a store
// describes the groups again): 9 bytes per group, the big-endian group index and 1 for a
// skipped group, 0 for full attention. Empty when nothing was learned.
func (c *Converter) GroupKinds(r uint32) []byte {
	st := c.ranks[r]
	if st == nil || len(st.skipped) == 0 {
		return nil
	}
	groups := make([]int64, 0, len(st.skipped))
	for g := range st.skipped {
		groups = append(groups, g)
	}
	slices.Sort(groups)
	out := make([]byte, 0, 9*len(groups))
	for _, g := range groups {
		out = binary.BigEndian.AppendUint64(out, uint64(g))
		flag := byte(0)
		if st.skipped[g] {
			flag = 1
		}
		out = append(out, flag)
	}
	return out
}

// learnGroupKinds applies a GroupKinds encoding to rank r; a malformed one is ignored.
func (c *Converter) learnGroupKinds(r uint32, b []byte) {
	if len(b)%9 != 0 {
		return
	}
	st := c.rank(r)
	for ; len(b) > 0; b = b[9:] {
		st.skipped[int64(binary.BigEndian.Uint64(b))] = b[8] == 1
	}
}

// Convert appends the KvEvent records of batch b (rank rank) to out. Event ids are
// firstEventID, firstEventID+1, ...; they are informative. The batch is checked whole before
// any state changes: a refused batch returns a *RefusedError, out unchanged and no state
// change.
//
// A stored event becomes one KvStored per run of blocks the rank did not hold yet (blocks
// already held are other copies, counted, not written), each run's parent being the engine
// block before it, so the relay's chain of canonical hashes is the engine's chain. Local block
// hashes are computed from the token ids with the event's LoRA salt and the block's extra keys
// (ckf.TokenBlockHashExtra with BlockExtraKeys: multimodal identifiers, cache salt); the
// engine's hashes are kept as the external ids.
func (c *Converter) Convert(out []schemas.KvEvent, b *kvevents.Batch, rank uint32, firstEventID uint64) ([]schemas.KvEvent, ConvertStats, error) {
	var stats ConvertStats
	salts := make([]uint64, len(b.Events))
	loras := make([]string, len(b.Events))
	for i := range b.Events {
		ev := &b.Events[i]
		if ev.Kind != kvevents.KindStored || outOfScope(ev) || c.partialPage(ev) {
			continue // filtered in the second pass, whatever its size
		}
		if ev.BlockSize != c.blockSize {
			return out, stats, &RefusedError{Event: i, Kind: ErrBlockSize,
				Detail: fmt.Sprintf("the engine's block size is %d, bridge.block_size is %d", ev.BlockSize, c.blockSize)}
		}
		if len(ev.TokenIDs) != len(ev.BlockHashes)*ev.BlockSize {
			return out, stats, &RefusedError{Event: i, Kind: ErrBlockSize,
				Detail: fmt.Sprintf("%d token ids for %d blocks of %d", len(ev.TokenIDs), len(ev.BlockHashes), ev.BlockSize)}
		}
		if ev.ExtraKeys != nil && len(ev.ExtraKeys) != len(ev.BlockHashes) {
			return out, stats, &RefusedError{Event: i, Kind: ErrExtraKeys,
				Detail: fmt.Sprintf("%d extra_keys entries for %d blocks", len(ev.ExtraKeys), len(ev.BlockHashes))}
		}
		name, err := c.loraName(i, ev)
		if err != nil {
			return out, stats, err
		}
		salts[i], loras[i] = ckf.BlockSaltSeed(name, ""), name
	}
	st := c.rank(rank)
	id := firstEventID
	next := func() schemas.KvEvent { ev := c.event(rank, id); id++; return ev }
	for i := range b.Events {
		ev := &b.Events[i]
		switch ev.Kind {
		case kvevents.KindStored:
			stats.Stored++
		case kvevents.KindRemoved:
			stats.Removed++
		case kvevents.KindCleared:
			stats.Cleared++
			clear(st.copies)
			st.guard = false
			kv := next()
			kv.Kind = schemas.KvClearedEvent
			out = append(out, kv)
			continue
		}
		if st.skip(ev) || c.partialPage(ev) {
			stats.Filtered++
			continue
		}
		if ev.Kind == kvevents.KindRemoved {
			var gone []uint64
			for _, h := range ev.BlockHashes {
				switch n := st.copies[h]; n {
				case 0:
					stats.UnknownRemovals++
				case 1:
					delete(st.copies, h)
					gone = append(gone, uint64(h))
				default:
					st.copies[h] = n - 1
					stats.HeldCopies++
				}
			}
			if len(gone) > 0 {
				kv := next()
				kv.Kind = schemas.KvRemovedEvent
				kv.Removed.BlockHashes = gone
				out = append(out, kv)
			}
			continue
		}
		if st.guard && ev.HasParent && st.copies[ev.Parent] == 0 {
			stats.Orphaned++
			continue
		}
		var run *schemas.KvEvent
		for k, h := range ev.BlockHashes {
			n := st.copies[h]
			st.copies[h] = n + 1
			if n > 0 {
				stats.ExtraCopies++
				run = nil
				continue
			}
			if run == nil {
				out = append(out, next())
				run = &out[len(out)-1]
				run.Kind = schemas.KvStoredEvent
				// The engine's block size travels with its blocks: the relay stamps its DC's size
				// on the lane, and the indexer refuses a token query of another size (consumer §6.5).
				run.Stored.BlockSize = uint32(ev.BlockSize)
				switch {
				case k > 0:
					run.Stored.ParentHash = schemas.Some(uint64(ev.BlockHashes[k-1]))
				case ev.HasParent:
					run.Stored.ParentHash = schemas.Some(uint64(ev.Parent))
				}
			}
			var extra ckf.ExtraKeys
			if ev.ExtraKeys != nil { // checked above: one entry per block
				extra = BlockExtraKeys(ev.ExtraKeys[k], loras[i])
			}
			if k == 0 && ev.HasCacheSalt && !ev.HasParent {
				extra = WithCacheSalt(extra, ev.CacheSalt)
			}
			local := ckf.TokenBlockHashExtra(ev.TokenIDs[k*ev.BlockSize:(k+1)*ev.BlockSize], extra, salts[i])
			run.Stored.Blocks = append(run.Stored.Blocks, schemas.KvBlock{BlockHash: uint64(h), TokensHash: uint64(local)})
		}
	}
	return out, stats, nil
}

// HeldHashes returns the block hashes held on rank r, sorted.
func (c *Converter) HeldHashes(r uint32) []uint64 {
	st := c.ranks[r]
	if st == nil {
		return nil
	}
	out := make([]uint64, 0, len(st.copies))
	for h := range st.copies {
		out = append(out, uint64(h))
	}
	slices.Sort(out)
	return out
}
