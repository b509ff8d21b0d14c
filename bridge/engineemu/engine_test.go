package engineemu

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-zeromq/zmq4"
	"github.com/vmihailenco/msgpack/v5"

	"github.com/ckf-stream/ckf-stream/testenv"
)

// ---- a decoder of the wire shapes, independent of the encoder ---------------------------------

// decoded is one event as a consumer reads it.
type decoded struct {
	kind     string
	hashes   []string // each hash as a comparable key (its msgpack value, printed)
	parent   string   // "" for none
	tokens   []uint32
	bsize    int
	loraID   any
	medium   any
	loraName any
	group    any
}

func hashKey(v any) string {
	switch h := v.(type) {
	case nil:
		return ""
	case []byte:
		return fmt.Sprintf("b%x", h)
	default:
		return fmt.Sprintf("i%v", h)
	}
}

func asInt(t *testing.T, v any) int64 {
	t.Helper()
	switch n := v.(type) {
	case int8:
		return int64(n)
	case int16:
		return int64(n)
	case int32:
		return int64(n)
	case int64:
		return n
	case uint8:
		return int64(n)
	case uint16:
		return int64(n)
	case uint32:
		return int64(n)
	case uint64:
		return int64(n)
	}
	t.Fatalf("not an integer: %T %v", v, v)
	return 0
}

// decodeBatch reads one payload in the given shape and returns its events and rank (-1: none).
func decodeBatch(t *testing.T, w Wire, payload []byte) ([]decoded, int) {
	t.Helper()
	var v any
	if err := msgpack.Unmarshal(payload, &v); err != nil {
		t.Fatalf("decode: %v", err)
	}
	var rawEvents []any
	rank := -1
	switch w {
	case WireMap:
		m := v.(map[string]any)
		if _, ok := m["ts"].(float64); !ok {
			t.Fatalf("map batch without a float ts: %v", m)
		}
		rawEvents = m["events"].([]any)
		rank = int(asInt(t, m["data_parallel_rank"]))
	default:
		a := v.([]any)
		want := 3
		if w == WireArray5 {
			want = 2
		}
		if len(a) != want {
			t.Fatalf("%v batch of %d fields, want %d", w, len(a), want)
		}
		if _, ok := a[0].(float64); !ok {
			t.Fatalf("batch without a float ts: %v", a)
		}
		rawEvents = a[1].([]any)
		if w == WireArray {
			rank = int(asInt(t, a[2]))
		}
	}
	var out []decoded
	for _, re := range rawEvents {
		var d decoded
		var f map[string]any
		if w == WireMap {
			f = re.(map[string]any)
			d.kind = f["type"].(string)
		} else {
			a := re.([]any)
			d.kind = a[0].(string)
			names := map[string][]string{
				"BlockStored": {"block_hashes", "parent_block_hash", "token_ids", "block_size", "lora_id",
					"medium", "lora_name", "extra_keys", "group_idx", "kv_cache_spec_kind", "kv_cache_spec_sliding_window"},
				"BlockRemoved":     {"block_hashes", "medium", "group_idx"},
				"AllBlocksCleared": {},
			}[d.kind]
			if w == WireArray5 && d.kind == "BlockStored" && len(a) != 6 {
				t.Fatalf("five-field BlockStored with %d elements", len(a)-1)
			}
			if len(a)-1 > len(names) {
				t.Fatalf("%s with %d fields", d.kind, len(a)-1)
			}
			f = map[string]any{}
			for i, x := range a[1:] {
				f[names[i]] = x
			}
		}
		if hs, ok := f["block_hashes"].([]any); ok {
			for _, h := range hs {
				d.hashes = append(d.hashes, hashKey(h))
			}
		}
		d.parent = hashKey(f["parent_block_hash"])
		if ts, ok := f["token_ids"].([]any); ok {
			for _, x := range ts {
				d.tokens = append(d.tokens, uint32(asInt(t, x)))
			}
		}
		if bs, ok := f["block_size"]; ok {
			d.bsize = int(asInt(t, bs))
		}
		d.loraID, d.medium, d.loraName, d.group = f["lora_id"], f["medium"], f["lora_name"], f["group_idx"]
		out = append(out, d)
	}
	return out, rank
}

// ---- a reference consumer: resident GPU chains from the decoded events ------------------------

type refBlock struct {
	parent string
	tokens []uint32
	lora   string
}

type refRank struct {
	blocks map[string]refBlock // every stored GPU block by hash
	copies map[string]int      // resident copies
}

func newRefRank() *refRank {
	return &refRank{blocks: map[string]refBlock{}, copies: map[string]int{}}
}

func (r *refRank) apply(t *testing.T, d decoded) {
	t.Helper()
	deviceGPU := (d.medium == nil || d.medium == "GPU") && d.group == nil
	switch d.kind {
	case "BlockStored":
		if !deviceGPU {
			return
		}
		if len(d.tokens) != len(d.hashes)*d.bsize {
			t.Fatalf("BlockStored with %d hashes and %d tokens of block size %d", len(d.hashes), len(d.tokens), d.bsize)
		}
		lora, _ := d.loraName.(string)
		if d.loraName == nil && d.loraID != nil {
			// The five-field shape has only the id: the mapping a bridge is configured with.
			lora = map[int64]string{1: "adapter-a"}[asInt(t, d.loraID)]
		}
		parent := d.parent
		for i, h := range d.hashes {
			r.blocks[h] = refBlock{parent: parent, tokens: d.tokens[i*d.bsize : (i+1)*d.bsize], lora: lora}
			r.copies[h]++
			parent = h
		}
	case "BlockRemoved":
		if !deviceGPU {
			return
		}
		for _, h := range d.hashes {
			if r.copies[h] == 0 {
				t.Fatalf("removal of a block that is not resident")
			}
			r.copies[h]--
			if r.copies[h] == 0 {
				delete(r.copies, h)
			}
		}
	case "AllBlocksCleared":
		clear(r.copies)
	default:
		t.Fatalf("unknown event %q", d.kind)
	}
}

// prefixes returns every resident block as "lora|tokens of its chain".
func (r *refRank) prefixes(t *testing.T) map[string]bool {
	t.Helper()
	out := map[string]bool{}
	for h := range r.copies {
		var parts [][]uint32
		lora := r.blocks[h].lora
		for cur := h; cur != ""; cur = r.blocks[cur].parent {
			b, ok := r.blocks[cur]
			if !ok {
				t.Fatalf("a resident block's parent was never stored")
			}
			if r.copies[cur] == 0 {
				t.Fatalf("a resident block's parent is not resident: the pool is not prefix-closed")
			}
			parts = append(parts, b.tokens)
		}
		slices.Reverse(parts)
		out[fmt.Sprint(lora, "|", slices.Concat(parts...))] = true
	}
	return out
}

// modelPrefixes expands a rank model's resident leaf chains into every resident prefix.
func modelPrefixes(m RankModel, bs int) map[string]bool {
	out := map[string]bool{}
	for _, c := range m.Resident {
		for k := 1; k <= c.Blocks; k++ {
			out[fmt.Sprint(c.LoRAName, "|", c.Tokens[:k*bs])] = true
		}
	}
	return out
}

// ---- sockets ------------------------------------------------------------------------------------

type endpoints struct{ pub, replay int }

func newEngine(t *testing.T, ranks int, opts ...Opt) (*Engine, endpoints) {
	t.Helper()
	base := testenv.FreePortRun(t, 2*ranks)
	ep := endpoints{pub: base, replay: base + ranks}
	e, err := New(append([]Opt{Endpoint(fmt.Sprintf("tcp://*:%d", ep.pub)),
		ReplayEndpoint(fmt.Sprintf("tcp://*:%d", ep.replay)), Ranks(ranks)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Close() })
	return e, ep
}

// subscriber is a SUB socket that collects [topic, seq, payload] messages.
type subscriber struct {
	sock zmq4.Socket
	msgs chan zmq4.Msg
}

func subscribe(t *testing.T, port int, topic string) *subscriber {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	s := &subscriber{sock: zmq4.NewSub(ctx, zmq4.WithAutomaticReconnect(true), zmq4.WithDialerMaxRetries(-1),
		zmq4.WithDialerRetry(50*time.Millisecond)), msgs: make(chan zmq4.Msg, 100_000)}
	if err := s.sock.Dial(fmt.Sprintf("tcp://127.0.0.1:%d", port)); err != nil {
		t.Fatal(err)
	}
	if err := s.sock.SetOption(zmq4.OptionSubscribe, topic); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			m, err := s.sock.Recv()
			if err != nil {
				if ctx.Err() != nil {
					return
				}
				continue // the publisher went away (a restart); the socket reconnects
			}
			s.msgs <- m
		}
	}()
	t.Cleanup(func() { cancel(); _ = s.sock.Close(); <-done })
	return s
}

func (s *subscriber) next(t *testing.T) (seq uint64, payload []byte) {
	t.Helper()
	select {
	case m := <-s.msgs:
		if len(m.Frames) != 3 || len(m.Frames[1]) != 8 {
			t.Fatalf("live message of %d frames", len(m.Frames))
		}
		return binary.BigEndian.Uint64(m.Frames[1]), m.Frames[2]
	case <-time.After(30 * time.Second):
		t.Fatal("no live message within 30s")
	}
	return 0, nil
}

// replayFrom asks the replay socket for every batch from start and returns them in order.
func replayFrom(t *testing.T, port int, start uint64) (seqs []uint64, payloads [][]byte) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	d := zmq4.NewDealer(ctx, zmq4.WithID(zmq4.SocketIdentity(fmt.Sprintf("test-%d", rand.Uint64()))))
	defer d.Close()
	if err := d.Dial(fmt.Sprintf("tcp://127.0.0.1:%d", port)); err != nil {
		t.Fatal(err)
	}
	var sb [8]byte
	binary.BigEndian.PutUint64(sb[:], start)
	if err := d.Send(zmq4.NewMsgFrom(nil, sb[:])); err != nil {
		t.Fatal(err)
	}
	for {
		m, err := d.Recv()
		if err != nil {
			t.Fatalf("replay: %v", err)
		}
		if len(m.Frames) != 3 || len(m.Frames[0]) != 0 || len(m.Frames[1]) != 8 {
			t.Fatalf("replay reply of %d frames", len(m.Frames))
		}
		if int64(binary.BigEndian.Uint64(m.Frames[1])) == -1 {
			if len(m.Frames[2]) != 0 {
				t.Fatal("end marker with a payload")
			}
			return seqs, payloads
		}
		seqs = append(seqs, binary.BigEndian.Uint64(m.Frames[1]))
		payloads = append(payloads, m.Frames[2])
	}
}

func waitSubscribed(t *testing.T, e *Engine, ranks int) {
	t.Helper()
	testenv.WaitUntil(t, 30*time.Second, "subscriber joined every rank", func() bool {
		for r := range ranks {
			if !e.Subscribed(r) {
				return false
			}
		}
		return true
	})
}

// ---- tests --------------------------------------------------------------------------------------

// Live batches arrive in order with their sequence numbers, dropped ones only from the replay
// socket, which ends every answer with the end marker.
func TestLiveDropsAndReplay(t *testing.T) {
	e, ep := newEngine(t, 1, Topic("kv"))
	sub := subscribe(t, ep.pub, "kv")
	waitSubscribed(t, e, 1)
	drops := map[uint64]bool{3: true, 7: true, 19: true}
	if err := e.Publish(20, func(_ int, seq uint64) bool { return drops[seq] }); err != nil {
		t.Fatal(err)
	}
	var live []uint64
	for want := uint64(0); want < 20; want++ {
		if drops[want] {
			continue
		}
		seq, _ := sub.next(t)
		live = append(live, seq)
	}
	want := []uint64{0, 1, 2, 4, 5, 6, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18}
	if !slices.Equal(live, want) {
		t.Fatalf("live sequences %v, want %v", live, want)
	}
	seqs, payloads := replayFrom(t, ep.replay, 3)
	if len(seqs) != 17 || seqs[0] != 3 || seqs[16] != 19 {
		t.Fatalf("replay from 3 gave %v", seqs)
	}
	for _, p := range payloads {
		decodeBatch(t, WireMap, p)
	}
	if seqs, _ := replayFrom(t, ep.replay, 20); len(seqs) != 0 {
		t.Fatalf("replay past the end gave %v", seqs)
	}
	s := e.Stats()
	if s.DroppedLive != 3 || s.Batches != 20 || s.ReplayRequests != 2 || s.ReplayedBatches != 17 {
		t.Fatalf("stats %+v", s)
	}
}

// The buffer keeps the last BufferSteps batches; a truncated replay answers the first batch and
// the end marker, and the next request gets everything.
func TestReplayBufferBoundAndTruncation(t *testing.T) {
	e, ep := newEngine(t, 1, BufferSteps(10), ReplayTruncate(1))
	if err := e.Publish(25, nil); err != nil {
		t.Fatal(err)
	}
	if seqs, _ := replayFrom(t, ep.replay, 0); !slices.Equal(seqs, []uint64{15}) {
		t.Fatalf("truncated replay gave %v, want [15]", seqs)
	}
	seqs, _ := replayFrom(t, ep.replay, 0)
	if len(seqs) != 10 || seqs[0] != 15 || seqs[9] != 24 {
		t.Fatalf("replay of a 10-batch buffer gave %v", seqs)
	}
	if s := e.Stats(); s.ReplayTruncated != 1 {
		t.Fatalf("truncated replays %d, want 1", s.ReplayTruncated)
	}
}

// For every shape and hash format, the events a consumer decodes from the replayed stream (GPU
// full-attention blocks, copies counted) leave exactly the resident prefixes the model reports,
// on every rank; the shapes carry what they should (rank, medium, LoRA name, groups).
func TestModelEqualsDecodedStream(t *testing.T) {
	// The hash format is independent of the shape: every format in the map shape, one in each
	// other shape.
	cases := []struct {
		w Wire
		h HashFormat
	}{{WireMap, HashInt}, {WireMap, HashSigned}, {WireMap, HashBytes}, {WireArray, HashBytes}, {WireArray5, HashInt}}
	for _, c := range cases {
		w, h := c.w, c.h
		t.Run(w.String()+"-"+h.String(), func(t *testing.T) {
			const ranks, batches = 2, 600
			e, ep := newEngine(t, ranks, Shape(w), Hashes(h), Seed(uint64(10*int(w)+int(h))),
				Capacity(64), Hybrid(true), DupFraction(0.1), BlockSize(4))
			if err := e.Publish(batches, nil); err != nil {
				t.Fatal(err)
			}
			model := e.Model()
			sawCPU, sawLoRA, sawGroup, sawSigned := false, false, false, false
			for r := range ranks {
				seqs, payloads := replayFrom(t, ep.replay+r, 0)
				if len(seqs) != batches || seqs[0] != 0 {
					t.Fatalf("rank %d replayed %d batches from %v", r, len(seqs), seqs[:1])
				}
				ref := newRefRank()
				for _, p := range payloads {
					evs, rank := decodeBatch(t, w, p)
					if w != WireArray5 && rank != r {
						t.Fatalf("batch of rank %d says rank %d", r, rank)
					}
					for _, d := range evs {
						sawCPU = sawCPU || d.medium == "CPU"
						sawGroup = sawGroup || d.group != nil
						sawLoRA = sawLoRA || d.loraID != nil
						sawSigned = sawSigned || slices.ContainsFunc(d.hashes, func(k string) bool { return strings.HasPrefix(k, "i-") })
						if w == WireArray5 && (d.medium != nil || d.loraName != nil) {
							t.Fatal("a five-field event carries medium or lora_name")
						}
						if d.loraID != nil && w != WireArray5 && d.loraName != "adapter-a" {
							t.Fatalf("a LoRA event with lora_name %v", d.loraName)
						}
						ref.apply(t, d)
					}
				}
				got := ref.prefixes(t)
				want := modelPrefixes(model.Ranks[r], 4)
				if len(got) != len(want) || len(got) != model.Ranks[r].ResidentBlocks {
					t.Fatalf("rank %d: stream leaves %d resident blocks, model %d prefixes, %d blocks",
						r, len(got), len(want), model.Ranks[r].ResidentBlocks)
				}
				for k := range got {
					if !want[k] {
						t.Fatalf("rank %d: a resident block of the stream is not in the model", r)
					}
				}
				if len(model.Ranks[r].Absent) == 0 {
					t.Fatalf("rank %d: no absent chains", r)
				}
			}
			if !sawLoRA || (w != WireArray5 && (!sawCPU || !sawGroup)) {
				t.Fatalf("the workload did not cover LoRA %v, CPU %v, groups %v", sawLoRA, sawCPU, sawGroup)
			}
			if sawSigned != (h == HashSigned) {
				t.Fatalf("negative hashes seen %v with hash format %v", sawSigned, h)
			}
			if s := model.Stats; s.DuplicateStores == 0 || s.Removed == 0 {
				t.Fatalf("no duplicate stores or removals: %+v", s)
			}
		})
	}
}

// A restart starts the sequence again at 0 on new sockets, with no clear event and an empty
// pool; a subscriber that reconnects by itself sees sequence 0 again. Ranks use consecutive ports.
func TestRestart(t *testing.T) {
	e, ep := newEngine(t, 2)
	subs := []*subscriber{subscribe(t, ep.pub, ""), subscribe(t, ep.pub+1, "")}
	waitSubscribed(t, e, 2)
	if err := e.Publish(5, nil); err != nil {
		t.Fatal(err)
	}
	for r, s := range subs {
		for want := range uint64(5) {
			if seq, p := s.next(t); seq != want {
				t.Fatalf("rank %d: seq %d, want %d", r, seq, want)
			} else if _, rank := decodeBatch(t, WireMap, p); rank != r {
				t.Fatalf("rank %d's batch says rank %d", r, rank)
			}
		}
	}
	if err := e.Restart(1); err != nil {
		t.Fatal(err)
	}
	if m := e.Model(); m.Ranks[1].ResidentBlocks != 0 || m.Ranks[1].NextSeq != 0 || m.Ranks[0].NextSeq != 5 {
		t.Fatalf("after the restart of rank 1: %+v", m.Ranks)
	}
	waitSubscribed(t, e, 2)
	if err := e.Publish(1, nil); err != nil {
		t.Fatal(err)
	}
	if seq, _ := subs[0].next(t); seq != 5 {
		t.Fatalf("rank 0 seq %d after rank 1's restart, want 5", seq)
	}
	seq, p := subs[1].next(t)
	evs, _ := decodeBatch(t, WireMap, p)
	if seq != 0 || slices.ContainsFunc(evs, func(d decoded) bool { return d.kind == "AllBlocksCleared" }) {
		t.Fatalf("restarted rank: seq %d, events %v", seq, evs)
	}
	if seqs, _ := replayFrom(t, ep.replay+1, 0); !slices.Equal(seqs, []uint64{0}) {
		t.Fatalf("restarted rank's replay buffer %v, want [0]", seqs)
	}
}

// Clear publishes AllBlocksCleared and empties the pool.
func TestClear(t *testing.T) {
	e, ep := newEngine(t, 1)
	if err := e.Publish(50, nil); err != nil {
		t.Fatal(err)
	}
	if err := e.Clear(0); err != nil {
		t.Fatal(err)
	}
	if m := e.Model(); m.Ranks[0].ResidentBlocks != 0 || len(m.Ranks[0].Resident) != 0 {
		t.Fatalf("after a clear: %d resident", m.Ranks[0].ResidentBlocks)
	}
	_, payloads := replayFrom(t, ep.replay, 50)
	evs, _ := decodeBatch(t, WireMap, payloads[0])
	if len(evs) != 1 || evs[0].kind != "AllBlocksCleared" {
		t.Fatalf("clear batch %v", evs)
	}
}

// The PUB socket connects when told to (the bridge binds, bridge.bind) or when the endpoint is
// not a wildcard, as the engines decide.
func TestConnectMode(t *testing.T) {
	port := testenv.FreePort(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sub := zmq4.NewSub(ctx)
	defer sub.Close()
	if err := sub.Listen(fmt.Sprintf("tcp://127.0.0.1:%d", port)); err != nil {
		t.Fatal(err)
	}
	if err := sub.SetOption(zmq4.OptionSubscribe, ""); err != nil {
		t.Fatal(err)
	}
	e, err := New(Endpoint(fmt.Sprintf("tcp://127.0.0.1:%d", port)))
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	waitSubscribed(t, e, 1)
	if err := e.Publish(1, nil); err != nil {
		t.Fatal(err)
	}
	m, err := sub.Recv()
	if err != nil || len(m.Frames) != 3 || binary.BigEndian.Uint64(m.Frames[1]) != 0 {
		t.Fatalf("bound subscriber got %v, %v", m, err)
	}
}

func TestOptionsValidated(t *testing.T) {
	for name, opts := range map[string][]Opt{
		"no endpoint":     {Endpoint("")},
		"zero ranks":      {Ranks(0)},
		"block size":      {BlockSize(0)},
		"lora fraction":   {LoRA("x", 1, 1.5)},
		"lora without":    {LoRA("", 1, 0.5)},
		"rank offset":     {Endpoint("tcp://*:65535"), Ranks(2)},
		"replay offset":   {ReplayEndpoint("tcp://*:x"), Ranks(2)},
		"empty buffer":    {BufferSteps(0)},
		"cpu fraction":    {CPUFraction(0.9)},
		"events in batch": {MaxEvents(0)},
	} {
		if _, err := New(opts...); !errors.Is(err, ErrInvalidConfig) {
			t.Errorf("%s: %v, want ErrInvalidConfig", name, err)
		}
	}
	if _, err := ParseWire("msgpack"); !errors.Is(err, ErrInvalidConfig) {
		t.Errorf("ParseWire: %v", err)
	}
	if _, err := ParseHashFormat("hex"); !errors.Is(err, ErrInvalidConfig) {
		t.Errorf("ParseHashFormat: %v", err)
	}
	e, _ := newEngine(t, 1)
	_ = e.Close()
	if err := e.Publish(1, nil); !errors.Is(err, ErrClosed) {
		t.Errorf("Publish after Close: %v", err)
	}
}

// An engine on port 0 (the demo's) reports the ports it bound, and a subscriber there receives
// its batches. (Not inproc: zmq4 v0.17.0 panics reading an inproc connection.)
func TestEphemeralPorts(t *testing.T) {
	e, err := New(Endpoint("tcp://127.0.0.1:0"), ReplayEndpoint("tcp://127.0.0.1:0"), Mode(PubBind))
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	pub, replay := e.Endpoints(0)
	if !strings.HasPrefix(pub, "tcp://127.0.0.1:") || strings.HasSuffix(pub, ":0") || pub == replay {
		t.Fatalf("endpoints %q, %q", pub, replay)
	}
	port, _ := strconv.Atoi(pub[strings.LastIndexByte(pub, ':')+1:])
	sub := subscribe(t, port, "")
	waitSubscribed(t, e, 1)
	if err := e.Publish(1, nil); err != nil {
		t.Fatal(err)
	}
	if seq, _ := sub.next(t); seq != 0 {
		t.Fatalf("seq %d", seq)
	}
	rport, _ := strconv.Atoi(replay[strings.LastIndexByte(replay, ':')+1:])
	if seqs, _ := replayFrom(t, rport, 0); !slices.Equal(seqs, []uint64{0}) {
		t.Fatalf("replay %v", seqs)
	}
}
