package query

import (
	"errors"
	"fmt"
	"math/bits"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/ckf-stream/ckf-stream/ckf"
	"github.com/ckf-stream/ckf-stream/ckf/index"
	"github.com/ckf-stream/ckf-stream/schemas"
	"github.com/zeebo/xxh3"
)

// The query path: one answer function (Answerer.Answer) shared by the Kafka query service
// (query_service.go) and the indexer's HTTP endpoint, so both paths give the same reply for the
// same request and the same table state.

// Reply texts of the non-OK outcomes that are not request errors. They are constants so that an
// UNAVAILABLE reply costs no allocation.
const (
	// unavailableNoEligible: the request's lane mask and the eligibility mask share no lane.
	unavailableNoEligible = "no requested lane is eligible (lane mask and freshness exclude every lane)"
	// unavailableNotReady: no eligible lane was ready when the query captured the ready mask.
	unavailableNotReady = "no eligible lane is ready"
	// unavailableTooOld: every eligible lane is older than the request's max_age_ms, or of no
	// known age.
	unavailableTooOld = "every eligible lane is older than max_age_ms"
)

// Answerer answers prefix-match queries against one ckf.GlobalIndexer. It holds no mutable state:
// any number of goroutines may call Answer concurrently, each with its own QueryScratch.
//
// The lanes a query may report are the intersection of three masks: the request's lane mask
// (absent = every lane), the eligibility mask (the caller's freshness policy: lanes lagging their
// partition beyond the policy are left out), and the ready mask the indexer captures once per
// query (ckf.GlobalIndexer.FindPrefixMatches). An empty intersection is an explicit UNAVAILABLE
// reply, never an empty OK.
type Answerer struct {
	g          *index.GlobalIndexer
	eligible   func() uint64
	incomplete func() uint64 // nil: no lane is known to be incomplete
	asOf       func(lane uint8) int64
	blockSize  func(mask uint64, size uint32) error
	now        func() time.Time
	// firstBlocks and holding count the searches that missed the first block (CountFirstBlocks).
	firstBlocks *FirstBlockStats
	holding     func() uint64
	// configured is the manifest's lane mask: the lanes a reply's LaneStates may list.
	configured uint64

	// pools and dcs are the display form and DC id of each configured lane's pool, computed once:
	// the manifest is immutable, so a reply can share these strings instead of formatting them.
	pools [ckf.MaxLanes]string
	dcs   [ckf.MaxLanes]uint64

	scratches sync.Pool // *QueryScratch, for AnswerPooled
}

// AnswererOpt configures an Answerer.
type AnswererOpt func(*Answerer)

// IncompleteLanes gives the Answerer the lanes whose answers may be short because their DC's
// filter omitted blocks for capacity (Indexer.IncompleteLanes); replies mark the searched ones
// (schemas.QueryReply.IncompleteLanes). fn is called once per OK answer, must be safe for
// concurrent use and should be cheap (an atomic load). Without it no lane is marked.
func IncompleteLanes(fn func() uint64) AnswererOpt { return func(a *Answerer) { a.incomplete = fn } }

// LaneAsOf gives the Answerer, for each lane, the time up to which the lane reflects its DC's KV
// events (schemas.LaneRecord.AsOf of the lane's latest applied record), in microseconds since
// the Unix epoch, 0 while the lane has none (Indexer.LaneAsOf). Replies then carry each lane's
// age (schemas.LaneState.AgeMillis), and a request's MaxAgeMillis answers older lanes
// schemas.LaneStale. fn is called once per selected lane per answer, must be safe for concurrent
// use and should be cheap (an atomic load). Without it lanes have no age, and a request with
// MaxAgeMillis finds every lane stale.
func LaneAsOf(fn func(lane uint8) int64) AnswererOpt { return func(a *Answerer) { a.asOf = fn } }

// CheckBlockSize gives the Answerer the rule of consumer §6.5: fn is called with the lanes a
// TokenIds request selects and its block size, and a non-nil error (naming both sizes and the
// lanes: lanes.Indexer.CheckBlockSize) makes the reply INVALID_REQUEST with that message.
func CheckBlockSize(fn func(mask uint64, size uint32) error) AnswererOpt {
	return func(a *Answerer) { a.blockSize = fn }
}

// CountFirstBlocks makes the Answerer count, in stats, each OK answer's searches of lanes that
// hold blocks (holding: bit l set while lane l's DC reports resident blocks, Indexer.HoldingLanes)
// and, of them, the ones that found not even the query's first block: the signal that the
// routers' hashes never meet the engines' (NeverMatch). Queries of no full block are not counted.
// holding is called once per counted answer, must be safe for concurrent use and should be cheap
// (an atomic load). Counting costs an atomic add per counted lane, on counters spread over a few
// cache lines.
func CountFirstBlocks(stats *FirstBlockStats, holding func() uint64) AnswererOpt {
	return func(a *Answerer) { a.firstBlocks, a.holding = stats, holding }
}

// NewAnswerer returns an Answerer over g. eligible returns the lanes the freshness policy allows
// in answers (bit l = lane l); it is called once per query, must be safe for concurrent use and
// should be cheap (an atomic load). A nil eligible makes every lane eligible. Masks are 64 bits
// whatever the table's lane count (consumer §16).
func NewAnswerer(g *index.GlobalIndexer, eligible func() uint64, opts ...AnswererOpt) *Answerer {
	a := &Answerer{g: g, eligible: eligible, now: time.Now}
	for _, o := range opts {
		o(a)
	}
	m := g.Manifest()
	for l := uint8(0); l < ckf.MaxLanes; l++ {
		if p, ok := m.PoolOf(l); ok {
			a.pools[l] = p.String()
			a.dcs[l] = uint64(p.Dc)
			a.configured |= 1 << l
		}
	}
	return a
}

// Indexer returns the indexer the answers come from.
func (a *Answerer) Indexer() *index.GlobalIndexer { return a.g }

// QueryScratch is the per-goroutine working memory of Answer: the unpacked local block hashes,
// the sequence-hash buffer of the search and the reply's lane entries. Reusing one scratch per
// goroutine makes Answer allocation-free once the buffers have grown to the longest query seen.
// A QueryScratch must not be used by two Answer calls at the same time; the zero value is ready
// to use.
type QueryScratch struct {
	local  []uint64
	seq    []uint64
	lanes  [ckf.MaxLanes]schemas.LaneMatch
	states [ckf.MaxLanes]schemas.LaneState
	ages   [ckf.MaxLanes]int64 // per lane, its age in ms, -1 when it has none
	shard  uint8               // FirstBlockStats' shard + 1, 0 until assigned
	block  []byte              // one block's tokens and extra keys (AnswerExtra)
}

// Answer answers req. It never fails: every outcome is a reply.
//
//   - OK: Lanes holds one entry {lane, dc, pool, depth} per reported lane in ascending lane order;
//     ReadyLanes is the captured ready mask restricted to the request's lane mask and the
//     eligibility mask; QueryBlocks is the number of full blocks in the query; IncompleteLanes
//     marks the reported lanes whose DC's filter omits blocks (see the IncompleteLanes option).
//   - UNAVAILABLE: no lane is left after that restriction (none requested, none eligible, or none
//     ready). ReadyLanes is 0 and Lanes empty; QueryBlocks still counts the query's blocks.
//   - INVALID_REQUEST: req breaks a rule of the QueryRequest contract (the codec's decoder has
//     already enforced them for requests read from Kafka; requests built by hand, as on the HTTP
//     path, are checked here). ErrorMessage says which.
//
// Input LocalBlockHashes is searched as is. Input TokenIds is cut into windows of BlockSize
// tokens, a trailing partial block dropped, and each window is hashed with the salt seed
// ckf.BlockSaltSeed(LoraName, CacheNamespace); the packed little-endian token bytes are exactly
// the bytes ckf.TokenBlockHash hashes, so they are hashed in place (the tests check the result
// against ckf.TokenBlockHashes).
// Blocks that carry extra keys (images, a cache salt) are hashed with them: req.BlockExtraKeys
// here, or the keys given to AnswerExtra.
//
// The reply's Lanes aliases sc: it is valid until the next Answer with the same scratch, so
// encode or copy the reply first. With a reused scratch, Answer does not allocate except for the
// error message of an invalid request. A nil sc allocates a fresh scratch.
func (a *Answerer) Answer(req *schemas.QueryRequest, sc *QueryScratch) schemas.QueryReply {
	return a.answer(req, nil, sc)
}

// AnswerExtra is Answer for a TokenIds request whose blocks carry extra keys (multimodal
// identifiers, a cache salt: producer §2.2): block i of the prompt is hashed with
// ckf.TokenBlockHashExtra and extra[i], as the bridge hashes an engine's block with its
// extra_keys entry (the LoRA name is not an extra key: it stays in req.LoraName). Blocks past
// the end of extra, and nil or empty entries, hash as text blocks; with no entry at all the
// answer is Answer's. extra may have one entry per window including a trailing partial block
// (which is dropped, its entry ignored); more entries than that, or extra keys with
// LocalBlockHashes input, are an INVALID_REQUEST reply (the rule is schemas.CheckBlockExtraKeys).
// With no extra given, req.BlockExtraKeys are used (the Kafka QueryRequest's block_extra_keys,
// which Answer therefore honours too); given extra, they replace req's. It allocates only while
// sc's block buffer grows and for an invalid request's message.
func (a *Answerer) AnswerExtra(req *schemas.QueryRequest, extra []ckf.ExtraKeys, sc *QueryScratch) schemas.QueryReply {
	return a.answer(req, extra, sc)
}

func (a *Answerer) answer(req *schemas.QueryRequest, extra []ckf.ExtraKeys, sc *QueryScratch) schemas.QueryReply {
	if sc == nil {
		sc = new(QueryScratch)
	}
	if len(extra) == 0 {
		extra = req.BlockExtraKeys // a Kafka request carries its blocks' extra keys in itself
	}
	if err := checkRequest(req); err != nil {
		return a.InvalidReply(replyIDFor(req.CorrelationID, err.Error()))
	}
	if err := schemas.CheckBlockExtraKeys(req, len(extra)); err != nil {
		return a.InvalidReply(replyIDFor(req.CorrelationID, fmt.Errorf("%w: %w", ErrInvalidQuery, err).Error()))
	}
	selected, err := a.selectLanes(req)
	if err != nil {
		return a.InvalidReply(replyIDFor(req.CorrelationID, err.Error()))
	}
	if a.blockSize != nil && req.Input == schemas.InputTokenIDs {
		if err := a.blockSize(selected, req.BlockSize); err != nil {
			return a.InvalidReply(replyIDFor(req.CorrelationID, fmt.Errorf("%w: %w", ErrInvalidQuery, err).Error()))
		}
	}
	now := a.now()
	reply := schemas.QueryReply{CorrelationID: req.CorrelationID, ReplyTime: now}

	// Local block hashes, in sc.local.
	local := sc.local[:0]
	switch req.Input {
	case schemas.InputLocalBlockHashes:
		local = req.Hashes.AppendTo(local)
	case schemas.InputTokenIDs:
		seed := ckf.BlockSaltSeed(req.LoraName, req.CacheNamespace)
		if len(extra) == 0 {
			local = appendTokenBlockHashes(local, req.Tokens, int(req.BlockSize), seed)
		} else {
			local = appendTokenBlockHashesExtra(local, req.Tokens, int(req.BlockSize), seed, extra, &sc.block)
		}
	}
	sc.local = local
	reply.QueryBlocks = uint32(len(local))

	eligible := selected
	if a.eligible != nil {
		eligible &= a.eligible()
	}
	// Ages, and the request's bound on them: a lane older than MaxAgeMillis, or of no known age,
	// is not searched.
	mask := eligible
	maxAge, bounded := req.MaxAgeMillis.Get()
	for m := selected; m != 0; m &= m - 1 {
		l := uint8(bits.TrailingZeros64(m))
		age := int64(-1)
		if a.asOf != nil {
			if at := a.asOf(l); at > 0 {
				age = max(now.UnixMicro()-at, 0) / 1000
			}
		}
		sc.ages[l] = age
		if bounded && (age < 0 || age > maxAge) {
			mask &^= 1 << l
		}
	}
	if mask == 0 {
		why := unavailableNoEligible
		if eligible != 0 {
			why = unavailableTooOld
		}
		return a.unavailable(reply, why, a.states(sc, selected, a.g.ReadyLanes64(), 0, 0))
	}
	res, err := a.g.FindPrefixMatches64(local, &sc.seq)
	if err != nil {
		// ErrUnavailable is the only error FindPrefixMatches64 returns today; any other error
		// also means "no answer from the table", which the router must hear about rather than
		// time out on.
		states := a.states(sc, selected, a.g.ReadyLanes64(), 0, 0)
		if errors.Is(err, index.ErrUnavailable) {
			return a.unavailable(reply, unavailableNotReady, states)
		}
		return a.unavailable(reply, err.Error(), states)
	}
	ready := res.ReadyLanes & mask
	if ready == 0 {
		return a.unavailable(reply, unavailableNotReady, a.states(sc, selected, res.ReadyLanes, 0, 0))
	}
	n := 0
	for m := ready; m != 0; m &= m - 1 {
		l := uint8(bits.TrailingZeros64(m))
		sc.lanes[n] = schemas.LaneMatch{Lane: l, DcID: a.dcs[l], Pool: a.pools[l], Depth: res.Depths[l]}
		n++
	}
	reply.Status = schemas.QueryOK
	var incomplete uint64
	if a.incomplete != nil {
		incomplete = a.incomplete() & ready
	}
	setReplyMasks(&reply, ready, incomplete)
	reply.Lanes = sc.lanes[:n]
	reply.LaneStates = a.states(sc, selected, res.ReadyLanes, ready, incomplete)
	if a.firstBlocks != nil && reply.QueryBlocks > 0 {
		if held := ready & a.holding(); held != 0 {
			var missed, stopped uint64
			for i := 0; i < n; i++ {
				switch sc.lanes[i].Depth {
				case 0:
					missed |= 1 << sc.lanes[i].Lane
				case 1:
					stopped |= 1 << sc.lanes[i].Lane
				}
			}
			chained := a.chainedHashes(req.Input, local, stopped&held)
			a.firstBlocks.add(a.firstBlocks.shard(sc), held, (missed|chained)&held, chained)
		}
	}
	return reply
}

// chainedHashes returns the lanes of stopped (searched lanes whose answer stopped after the
// query's first block) where the query's second hash, taken as it came, is itself the sequence
// hash of a block the lane holds. A router that sends sequence hashes where local hashes belong
// gets exactly that on every query: its first hash equals the first local hash, so the first
// block matches, and chaining its second hash again misses, while that hash as sent names the
// stored second block. Only local-hash queries are probed (token ids are hashed here), one
// membership probe per such answer (index.GlobalIndexer.LanesHolding, no allocation). A lane
// that merely holds the query's second block content as some other chain's first block reads
// chained too; the alarm's share over a window (NeverMatch) keeps such coincidences from raising
// it (consumer §6.6).
func (a *Answerer) chainedHashes(input schemas.QueryInputKind, local []uint64, stopped uint64) uint64 {
	if stopped == 0 || input != schemas.InputLocalBlockHashes || len(local) < 2 {
		return 0
	}
	return a.g.LanesHolding(local[1], stopped)
}

// states fills sc.states with one entry per selected lane, in lane order, and returns them: a
// lane not ready (as captured) is LaneUnavailable; ready but not searched (left out by the
// freshness policy or by the request's age bound), LaneStale; searched and incomplete,
// LaneIncomplete; searched, LaneExact. sc.ages holds every selected lane's age.
func (a *Answerer) states(sc *QueryScratch, selected, ready, searched, incomplete uint64) []schemas.LaneState {
	n := 0
	for m := selected; m != 0; m &= m - 1 {
		l := uint8(bits.TrailingZeros64(m))
		bit := uint64(1) << l
		st := schemas.LaneState{Lane: l}
		if age := sc.ages[l]; age >= 0 {
			st.AgeMillis = schemas.Some(age)
		}
		switch {
		case ready&bit == 0:
			st.State = schemas.LaneUnavailable
		case searched&bit == 0:
			st.State = schemas.LaneStale
		case incomplete&bit != 0:
			st.State = schemas.LaneIncomplete
		default:
			st.State = schemas.LaneExact
		}
		sc.states[n] = st
		n++
	}
	return sc.states[:n]
}

// AnswerPooled is Answer for callers without a goroutine of their own to keep a scratch in (an
// HTTP handler, say): it borrows a scratch from a pool and returns a reply that owns its Lanes,
// which costs one allocation for an OK reply (the lane entries) and none otherwise.
func (a *Answerer) AnswerPooled(req *schemas.QueryRequest) schemas.QueryReply {
	return a.AnswerPooledExtra(req, nil)
}

// AnswerPooledExtra is AnswerExtra with a pooled scratch, as AnswerPooled is Answer's.
func (a *Answerer) AnswerPooledExtra(req *schemas.QueryRequest, extra []ckf.ExtraKeys) schemas.QueryReply {
	sc, _ := a.scratches.Get().(*QueryScratch)
	if sc == nil {
		sc = new(QueryScratch)
	}
	r := a.answer(req, extra, sc)
	if len(r.Lanes) > 0 {
		r.Lanes = append([]schemas.LaneMatch(nil), r.Lanes...)
	}
	if len(r.LaneStates) > 0 {
		r.LaneStates = append([]schemas.LaneState(nil), r.LaneStates...)
	}
	a.scratches.Put(sc)
	return r
}

func (a *Answerer) unavailable(r schemas.QueryReply, why string, states []schemas.LaneState) schemas.QueryReply {
	r.Status = schemas.QueryUnavailable
	r.ErrorMessage = why
	r.LaneStates = states
	return r
}

// InvalidReply returns the INVALID_REQUEST reply for a request with the given correlation id,
// stamped with the current time. correlationID must already fit the contract (at most
// schemas.MaxCorrelationIDBytes bytes).
func (a *Answerer) InvalidReply(correlationID, why string) schemas.QueryReply {
	return schemas.QueryReply{CorrelationID: correlationID, Status: schemas.QueryInvalidRequest, ErrorMessage: why, ReplyTime: a.now()}
}

// ErrInvalidQuery is the kind of every request-rule violation Answer reports (the rules of the
// QueryRequest contract, see schemas.Codec.DecodeQueryRequest).
var ErrInvalidQuery = errors.New("streams: invalid query request")

// checkRequest applies the QueryRequest contract to a request that may not have come through the
// codec's decoder. It allocates only when it reports an error.
func checkRequest(q *schemas.QueryRequest) error {
	if n := len(q.CorrelationID); n == 0 || n > schemas.MaxCorrelationIDBytes || !utf8.ValidString(q.CorrelationID) {
		return fmt.Errorf("%w: correlation_id must be 1..%d bytes of UTF-8, got %d bytes", ErrInvalidQuery, schemas.MaxCorrelationIDBytes, n)
	}
	switch q.Input {
	case schemas.InputLocalBlockHashes:
		if len(q.Hashes)%schemas.WordSize != 0 {
			return fmt.Errorf("%w: input.hashes length %d is not a multiple of %d", ErrInvalidQuery, len(q.Hashes), schemas.WordSize)
		}
	case schemas.InputTokenIDs:
		if len(q.Tokens)%schemas.TokenSize != 0 {
			return fmt.Errorf("%w: input.tokens length %d is not a multiple of %d", ErrInvalidQuery, len(q.Tokens), schemas.TokenSize)
		}
		if !schemas.ValidBlockSize(q.BlockSize) {
			return fmt.Errorf("%w: input.block_size %d is not in [1, %d]", ErrInvalidQuery, q.BlockSize, schemas.MaxBlockSize)
		}
	default:
		return fmt.Errorf("%w: unknown input kind %d", ErrInvalidQuery, q.Input)
	}
	if q.ReplyPartition.Valid && q.ReplyPartition.Value < 0 {
		return fmt.Errorf("%w: reply_partition %d is negative", ErrInvalidQuery, q.ReplyPartition.Value)
	}
	if q.MaxAgeMillis.Valid && q.MaxAgeMillis.Value < 0 {
		return fmt.Errorf("%w: max_age_ms %d is negative", ErrInvalidQuery, q.MaxAgeMillis.Value)
	}
	return nil
}

// replyIDFor returns the correlation id and error message of an INVALID_REQUEST reply to a
// request with correlation id id that was refused for why: the id cut to fit when it is too long
// (schemas.FitCorrelationID), the cut noted in the message, or "" when the id is empty or not
// UTF-8 (a reply to nobody in particular, still written so the failure is visible on the reply
// topic).
func replyIDFor(id, why string) (string, string) {
	fit, truncated, _ := schemas.FitCorrelationID(id)
	if truncated {
		why = truncatedIDNote(len(fit), schemas.MaxCorrelationIDBytes) + why
	}
	return fit, why
}

// truncatedIDNote starts the error message of a reply whose correlation id, over limit bytes,
// was cut to its first kept bytes.
func truncatedIDNote(kept, limit int) string {
	return fmt.Sprintf("correlation_id longer than %d bytes cut to its first %d in this reply; ", limit, kept)
}

// appendTokenBlockHashes appends one local block hash per full window of blockSize tokens of the
// packed token ids: XXH3-64 of the window's little-endian bytes with saltSeed, which is
// ckf.TokenBlockHash's definition applied to the packed bytes in place (no unpacking, no
// per-block buffer). blockSize must be >= 1.
func appendTokenBlockHashes(dst []uint64, tokens schemas.PackedU32, blockSize int, saltSeed uint64) []uint64 {
	return appendTokenBlockHashesExtra(dst, tokens, blockSize, saltSeed, nil, nil)
}

// appendTokenBlockHashesExtra is appendTokenBlockHashes with per-block extra keys: a block
// whose entry of extra is non-empty is hashed as ckf.TokenBlockHashExtra defines it (its packed
// tokens followed by the entry's canonical encoding, assembled in *buf, which grows as needed);
// the others are hashed in place. blockSize must be >= 1.
func appendTokenBlockHashesExtra(dst []uint64, tokens schemas.PackedU32, blockSize int, saltSeed uint64, extra []ckf.ExtraKeys, buf *[]byte) []uint64 {
	stride := blockSize * schemas.TokenSize
	n := len(tokens) / stride
	if cap(dst)-len(dst) < n {
		grown := make([]uint64, len(dst), len(dst)+n)
		copy(grown, dst)
		dst = grown
	}
	for i := 0; i < n; i++ {
		window := tokens[i*stride : (i+1)*stride]
		if i >= len(extra) || len(extra[i]) == 0 {
			dst = append(dst, xxh3.HashSeed(window, saltSeed))
			continue
		}
		b := append((*buf)[:0], window...)
		b = extra[i].AppendCanonical(b)
		*buf = b
		dst = append(dst, xxh3.HashSeed(b, saltSeed))
	}
	return dst
}
