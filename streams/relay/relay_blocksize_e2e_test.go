package relay_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ckf-stream/ckf-stream/bridge"
	"github.com/ckf-stream/ckf-stream/bridge/engineemu"
	"github.com/ckf-stream/ckf-stream/bridge/kvevents"
	"github.com/ckf-stream/ckf-stream/schemas"
	"github.com/ckf-stream/ckf-stream/streams/internal/streamtest"
	"github.com/ckf-stream/ckf-stream/streams/query"
	"github.com/ckf-stream/ckf-stream/testenv"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TestBlockSizeFromEngineToQuery (consumer §6.5) runs the block size's whole path: the bridge's
// test engine with blocks of 16 tokens, its batches read back from its replay socket by the
// bridge's client, decoded and converted as the bridge does, the KV events on a Kafka topic, the
// relay that stamps 16 on its lane records, the indexer's lane that keeps it, and the answerer
// of both query paths (directly, as HTTP uses it, and over Kafka): a token query of one of the engine's resident prompts
// with block_size 32 is refused naming 32, 16, the lane and its DC; with 16 it is answered with
// the prompt's depth.
func TestBlockSizeFromEngineToQuery(t *testing.T) {
	t.Parallel()
	const blockSize, lane = 16, 9
	e := newRelayEnv(t, 4096, 1)
	eng, err := engineemu.New(engineemu.Endpoint("tcp://127.0.0.1:0"), engineemu.ReplayEndpoint("tcp://127.0.0.1:0"),
		engineemu.Mode(engineemu.PubBind), engineemu.Ranks(1), engineemu.Topic("kv@emu"),
		engineemu.BlockSize(blockSize), engineemu.Capacity(64), engineemu.Seed(16))
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Close()
	if err := eng.Publish(40, func(int, uint64) bool { return true }); err != nil {
		t.Fatal(err)
	}
	bridgeToKafka(t, e, eng, blockSize)

	ri := e.StartIndexer(e.Manifest(61, lane), e.IndexerConfig())
	rr := e.startRelay(e.relayConfig(lane, testenv.UniqueName(t, "relay")), true)
	waitRelayLane(t, ri, rr, lane)
	ix := ri.Indexer
	testenv.WaitUntil(t, streamtest.Converge, "the lane knows its engines' block size", func() bool { return ix.LaneBlockSize(lane) == blockSize },
		func() string {
			return fmt.Sprintf("lane block size %d, relay stats %+v", ix.LaneBlockSize(lane), rr.r.Stats())
		})

	var prompt []uint32
	var blocks int
	for _, c := range eng.Model().Ranks[0].Resident {
		if c.LoRAName == "" && len(c.ExtraKeys) == 0 && c.Blocks > blocks {
			prompt, blocks = c.Tokens, c.Blocks
		}
	}
	if blocks == 0 {
		t.Fatal("the engine holds no plain resident prompt")
	}
	ans := query.NewAnswerer(ix.GlobalIndexer(), ix.EligibleLanes, query.CheckBlockSize(ix.CheckBlockSize))
	ask := func(size uint32) schemas.QueryReply {
		return ans.Answer(&schemas.QueryRequest{CorrelationID: "q", Input: schemas.InputTokenIDs,
			Tokens: schemas.AppendU32s(nil, prompt), BlockSize: size}, nil)
	}
	dc := streamtest.Pool(100 + lane).Dc.String()
	if r := ask(32); r.Status != schemas.QueryInvalidRequest ||
		!strings.Contains(r.ErrorMessage, "block_size 32, but the engines of lane 9 (dc "+dc+") publish blocks of 16 tokens") {
		t.Fatalf("block size 32: %v %q", r.Status, r.ErrorMessage)
	}
	r := ask(blockSize)
	if r.Status != schemas.QueryOK || len(r.Lanes) != 1 || r.Lanes[0].Depth != uint32(blocks) {
		t.Fatalf("block size 16: %v %q, lanes %+v; want the prompt's %d blocks", r.Status, r.ErrorMessage, r.Lanes, blocks)
	}

	// The same two queries over Kafka: the query service's answers are the answerer's.
	requests, replyTopic := e.Cluster.NewTopic(t, 1), e.Cluster.NewTopic(t, 1)
	opts := []kgo.Opt{kgo.SeedBrokers(e.Cluster.Seeds()...)}
	qcfg := query.DefaultQueryConfig()
	qcfg.RequestTopic, qcfg.ReplyTopic, qcfg.DeadLetterTopic = requests, replyTopic, e.Topics.DeadLetter
	qcfg.Group = testenv.UniqueName(t, "g")
	svc, err := query.NewQueryService(query.QueryServiceParams{Config: qcfg, Answerer: ans, Codec: e.Codec, ClientOpts: opts})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- svc.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("query service: %v", err)
		}
	}()
	ccfg := query.DefaultQueryClientConfig()
	ccfg.RequestTopic, ccfg.ReplyTopic, ccfg.CallTimeout = requests, replyTopic, 30*time.Second
	cl, err := query.NewQueryClient(context.Background(), query.QueryClientParams{Config: ccfg, Codec: e.Codec, ClientOpts: opts})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	for _, size := range []uint32{32, blockSize} {
		r, err := cl.Query(context.Background(), schemas.QueryRequest{Input: schemas.InputTokenIDs, Tokens: schemas.AppendU32s(nil, prompt), BlockSize: size})
		switch {
		case err != nil:
			t.Fatalf("block size %d over Kafka: %v", size, err)
		case size == 32 && (r.Status != schemas.QueryInvalidRequest || !strings.Contains(r.ErrorMessage, "block_size 32, but the engines of lane 9 (dc "+dc+") publish blocks of 16 tokens")):
			t.Fatalf("block size 32 over Kafka: %v %q", r.Status, r.ErrorMessage)
		case size == blockSize && (r.Status != schemas.QueryOK || len(r.Lanes) != 1 || r.Lanes[0].Depth != uint32(blocks)):
			t.Fatalf("block size 16 over Kafka: %v %q, lanes %+v", r.Status, r.ErrorMessage, r.Lanes)
		}
	}
}

// bridgeToKafka reads the whole history of eng's rank 0 from its replay socket with the
// bridge's client, decodes and converts it as the bridge does (worker 7, blocks of blockSize
// tokens) and produces the KV events on e's KV topic.
func bridgeToKafka(t *testing.T, e *relayEnv, eng *engineemu.Engine, blockSize int) {
	t.Helper()
	_, replay := eng.Endpoints(0)
	replies, complete, err := bridge.NewReplayer(replay, "kv@", 30*time.Second).Replay(context.Background(), 0)
	if err != nil || !complete {
		t.Fatalf("replay from the engine: complete %v, %v", complete, err)
	}
	conv := bridge.NewConverter(7, blockSize, nil)
	var recs []*kgo.Record
	var id uint64
	for _, r := range replies {
		b, err := kvevents.Decode(r.Payload)
		if err != nil {
			t.Fatal(err)
		}
		evs, _, err := conv.Convert(nil, &b, 0, id)
		if err != nil {
			t.Fatal(err)
		}
		id += uint64(len(evs))
		for i := range evs {
			v, err := e.Codec.EncodeKvEvent(evs[i])
			if err != nil {
				t.Fatal(err)
			}
			recs = append(recs, &kgo.Record{Topic: e.kvTopic, Key: []byte(strconv.FormatUint(evs[i].WorkerID, 10)), Value: v})
		}
	}
	e.produceRaw(recs...)
}
