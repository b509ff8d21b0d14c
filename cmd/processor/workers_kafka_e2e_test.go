package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"net/http"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ckf-stream/ckf-stream/app/config"
	"github.com/ckf-stream/ckf-stream/ckf"
	"github.com/ckf-stream/ckf-stream/ckf/producer"
	"github.com/ckf-stream/ckf-stream/schemas"
	"github.com/ckf-stream/ckf-stream/streams/relay"
	streamworkers "github.com/ckf-stream/ckf-stream/streams/workers"
	"github.com/ckf-stream/ckf-stream/testenv"
	"github.com/ckf-stream/ckf-stream/workerapi"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TestWorkerQueriesOverKafka (real broker): two replicas of one DC's worker stage (processor
// workers, separate processes) answer worker queries over Kafka; the answers equal the HTTP
// route's, field for field, and processor query --workers without --http prints them. Then one
// replica is killed (-9) while requests keep arriving on every partition of the query topic: every
// request is answered, by the survivor once the group moves the dead member's partitions. The test
// logs how long requests went unanswered (the figure of docs/RELIABILITY.md); it asserts only that
// answers resume.
func TestWorkerQueriesOverKafka(t *testing.T) {
	seeds := testenv.Brokers(t)
	bin, err := testenv.BuildProcessor(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	prefix := testenv.UniqueName(t, "ckfwq") + "-"
	var rb [4]byte
	_, _ = rand.Read(rb[:])
	dc := ckf.DcID(0xd0000000_00000000 | uint64(binary.LittleEndian.Uint32(rb[:]))) // a DC (so a query group) of this run only
	env := []string{"KAFKA_BROKERS=" + strings.Join(seeds, ","), "CKF_TOPIC_PREFIX=" + prefix, fmt.Sprintf("CKF_WORKERS_DC_ID=%#x", uint64(dc)),
		"CKF_WORKERS_LAG_COMMIT_INTERVAL=0s", "CKF_SHUTDOWN_TIMEOUT=10s"}
	topics := config.DefaultTopics(prefix)
	// No relay runs here, so the KV topic is the test's to create (the worker stage creates its
	// checkpoint and query topics).
	if _, err := testenv.Admin(t).CreateTopic(context.Background(), 2, -1, nil, topics.KVEvents); err != nil {
		t.Fatal(err)
	}
	logs := t.TempDir()
	a := testenv.NewProcess(t, bin, logs, "workers-a", env, "workers")
	b := testenv.NewProcess(t, bin, logs, "workers-b", env, "workers")
	a.Start()
	a.WaitReady(2 * time.Minute)
	b.Start()
	b.WaitReady(2 * time.Minute)

	codec, err := schemas.NewCodec(context.Background(), schemas.TopicPrefix(prefix))
	if err != nil {
		t.Fatal(err)
	}
	cl := testenv.Client(t, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	prompts := [][]uint64{{1, 2, 3, 4, 5, 6}, {1, 2, 9, 10}, {20, 21, 22}}
	var recs []*kgo.Record
	for _, ev := range []producer.RouterEvent{
		workerStore(1, 0, producer.StorageTierDevice, prompts[0], 6), workerStore(2, 1, producer.StorageTierDevice, prompts[0], 3),
		workerStore(2, 1, producer.StorageTierHostPinned, prompts[0], 6), workerStore(3, 0, producer.StorageTierDevice, prompts[1], 4),
		workerStore(4, 0, producer.StorageTierDisk, prompts[2], 3),
	} {
		v, err := codec.EncodeKvEvent(relay.KvEventOf(ev))
		if err != nil {
			t.Fatal(err)
		}
		recs = append(recs, &kgo.Record{Topic: topics.KVEvents, Partition: int32(ev.WorkerID % 2), Key: []byte(strconv.FormatUint(uint64(ev.WorkerID), 10)), Value: v})
	}
	if err := cl.ProduceSync(context.Background(), recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	client := &http.Client{Timeout: 5 * time.Second}
	askHTTP := func(p []uint64, topK int) (workerapi.WorkerMatchResponse, error) {
		body, _ := json.Marshal(workerapi.WorkerMatchRequest{LocalBlockHashes: p, TopK: topK})
		resp, err := client.Post("http://"+a.HTTP+workerapi.Path, "application/json", bytes.NewReader(body))
		if err != nil {
			return workerapi.WorkerMatchResponse{}, err
		}
		defer resp.Body.Close()
		var out workerapi.WorkerMatchResponse
		return out, json.NewDecoder(resp.Body).Decode(&out)
	}
	testenv.WaitUntil(t, time.Minute, "both replicas applied every event", func() bool {
		for _, p := range []*testenv.Process{a, b} {
			m, err := p.Metrics()
			if err != nil || m["ckf_workers_events_total"] != float64(len(recs)) {
				return false
			}
		}
		return true
	})

	// Kafka answers equal HTTP answers (the replicas hold the same events; which one answers over
	// Kafka depends on the partition).
	ask := func(id string, p []uint64, topK uint32, timeout time.Duration) ([]schemas.WorkerQueryReply, error) {
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		rcl := testenv.Client(t)
		defer rcl.Close()
		return streamworkers.Ask(ctx, rcl, codec, schemas.WorkerQueryRequest{CorrelationID: id, Input: schemas.InputLocalBlockHashes,
			Hashes: schemas.AppendU64s(nil, p), TopK: topK, DcIDs: []uint64{uint64(dc)}}, 1)
	}
	for i, p := range prompts {
		for _, k := range []int{0, 1} {
			id := fmt.Sprintf("eq-%d-%d", i, k)
			replies, err := ask(id, p, uint32(k), time.Minute)
			if err != nil || len(replies) != 1 {
				t.Fatalf("%s: %v %+v", id, err, replies)
			}
			got := workerapi.FromKafkaReply(&replies[0])
			want, err := askHTTP(p, k)
			if err != nil {
				t.Fatal(err)
			}
			got.CorrelationID, want.CorrelationID = "", ""
			got.Age, want.Age = workerapi.ReplicaAge{}, workerapi.ReplicaAge{}
			got.ReplyTime, want.ReplyTime = time.Time{}, time.Time{}
			if !reflect.DeepEqual(got, want) || got.Status != workerapi.StatusOK || got.State != workerapi.StateExact || len(got.Sources) == 0 {
				t.Fatalf("%s: Kafka %+v, HTTP %+v", id, got, want)
			}
		}
	}
	vars := map[string]string{"KAFKA_BROKERS": strings.Join(seeds, ","), "CKF_TOPIC_PREFIX": prefix}
	code, out, errOut := runCmd(t, vars, "query", "--workers", "--hashes", "1,2,3,4,5,6", "--top-k", "2", "--dcs", dc.String(), "--timeout", "30s")
	if code != exitOK || !strings.Contains(out, "OK from DC "+dc.String()+" via Kafka") || strings.Count(out, "\n") != 4 {
		t.Fatalf("processor query --workers over Kafka: exit %d\n%s%s", code, out, errOut)
	}
	checkMetricsDocumented(t, "http://"+a.HTTP+"/metrics")

	// Failover: a request every 50 ms, round robin over the query topic's partitions, from before
	// the kill until every request sent has been answered and at least 40 were sent after it.
	adm := kadm.NewClient(cl)
	parts := int32(0)
	if td, err := adm.ListTopics(context.Background(), topics.WorkerQueries); err == nil {
		parts = int32(len(td[topics.WorkerQueries].Partitions))
	}
	if parts == 0 {
		t.Fatalf("the worker query topic %s has no partitions", topics.WorkerQueries)
	}
	rcl := testenv.Client(t)
	ends, err := adm.ListEndOffsets(context.Background(), topics.WorkerQueryReplies)
	if err != nil {
		t.Fatal(err)
	}
	end, _ := ends.Lookup(topics.WorkerQueryReplies, 0)
	rcl.AddConsumePartitions(map[string]map[int32]kgo.Offset{topics.WorkerQueryReplies: {0: kgo.NewOffset().At(end.Offset)}})
	var mu sync.Mutex
	sent, answered := map[string]time.Time{}, map[string]time.Time{}
	readCtx, stopRead := context.WithCancel(context.Background())
	defer stopRead()
	go func() {
		for readCtx.Err() == nil {
			for _, r := range rcl.PollFetches(readCtx).Records() {
				mu.Lock()
				if _, ok := answered[string(r.Key)]; !ok {
					answered[string(r.Key)] = time.Now()
				}
				mu.Unlock()
			}
		}
	}()
	send := func(n int) {
		id := "fo-" + strconv.Itoa(n)
		v, err := codec.EncodeWorkerQueryRequest(schemas.WorkerQueryRequest{CorrelationID: id, Input: schemas.InputLocalBlockHashes,
			Hashes: schemas.AppendU64s(nil, prompts[0]), ReplyPartition: schemas.Some[int32](0)})
		if err != nil {
			t.Fatal(err)
		}
		mu.Lock()
		sent[id] = time.Now()
		mu.Unlock()
		if err := cl.ProduceSync(context.Background(), &kgo.Record{Topic: topics.WorkerQueries, Partition: int32(n) % parts, Key: []byte(id), Value: v}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	n := 0
	for ; n < 2*int(parts); n++ { // every partition answers before the kill
		send(n)
	}
	allAnswered := func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(answered) == len(sent)
	}
	testenv.WaitUntil(t, time.Minute, "every partition answering before the kill", allAnswered)
	killed := time.Now()
	a.Kill9()
	// Send until every partition has answered a request sent after the kill (the dead member's
	// partitions only once the group has moved them), then a round more, then wait for every
	// answer.
	partOf := map[string]int32{}
	resumedAll := func() bool {
		mu.Lock()
		defer mu.Unlock()
		seen := map[int32]bool{}
		for id, at := range sent {
			if _, ok := answered[id]; ok && at.After(killed) {
				seen[partOf[id]] = true
			}
		}
		return len(seen) == int(parts)
	}
	deadline := time.Now().Add(3 * time.Minute)
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for more := 2 * int(parts); more > 0; n++ {
		if time.Now().After(deadline) {
			mu.Lock()
			t.Fatalf("answers did not resume on every partition after the kill: %d of %d requests answered", len(answered), len(sent))
		}
		<-tick.C
		mu.Lock()
		partOf["fo-"+strconv.Itoa(n)] = int32(n) % parts
		mu.Unlock()
		send(n)
		if resumedAll() {
			more--
		}
	}
	testenv.WaitUntil(t, time.Minute, "every request sent after the kill answered", allAnswered)
	stopRead()
	var waits []time.Duration
	var resumed time.Time
	mu.Lock()
	for id, at := range sent {
		if at.After(killed) {
			waits = append(waits, answered[id].Sub(at))
			if answered[id].After(resumed) {
				resumed = answered[id]
			}
		}
	}
	mu.Unlock()
	slices.Sort(waits)
	// The last answer to a request sent before the survivor took over: from the kill, how long the
	// dead member's partitions went unanswered.
	var gapEnd time.Time
	mu.Lock()
	for id, at := range sent {
		if at.After(killed) && answered[id].Sub(at) > waits[len(waits)/2]*4 && answered[id].After(gapEnd) {
			gapEnd = answered[id]
		}
	}
	mu.Unlock()
	t.Logf("failover: %d requests after kill -9 of one of 2 replicas, all answered; reply delay p50 %v, max %v; "+
		"the dead replica's partitions answered again %v after the kill (session timeout %v)",
		len(waits), waits[len(waits)/2].Round(time.Millisecond), waits[len(waits)-1].Round(time.Millisecond),
		gapEnd.Sub(killed).Round(time.Millisecond), 6*time.Second)
}

// workerStore is a store of blocks p[0..n) by worker w, rank r, on tier, with ids derived from p.
func workerStore(w ckf.WorkerID, r ckf.DpRank, tier producer.StorageTier, p []uint64, n int) producer.RouterEvent {
	ev := producer.RouterEvent{WorkerID: w, StorageTier: tier, Residency: producer.ResidencyWorker,
		Event: producer.KvCacheEvent{Kind: producer.KvEventStored, DpRank: r}}
	for i := range n {
		ev.Event.Stored.Blocks = append(ev.Event.Stored.Blocks, producer.StoredBlock{BlockHash: ckf.ExternalBlockHash(p[0]<<20 + uint64(i)), TokensHash: ckf.LocalBlockHash(p[i])})
	}
	return ev
}
