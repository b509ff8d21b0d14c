package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ckf-stream/ckf-stream/app/config"
	"github.com/ckf-stream/ckf-stream/ckf"
	"github.com/ckf-stream/ckf-stream/ckf/producer"
	ckfworkers "github.com/ckf-stream/ckf-stream/ckf/workers"
	"github.com/ckf-stream/ckf-stream/schemas"
	"github.com/ckf-stream/ckf-stream/streams/relay"
	"github.com/ckf-stream/ckf-stream/testenv"
	"github.com/ckf-stream/ckf-stream/workerapi"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TestWorkerStageBesideRelay (real broker): processor relay and processor workers read one DC's
// KV topic as separate processes. The worker answers equal an index (ckf/workers) fed the same
// events; after the relay is killed (-9) the worker stage keeps answering the events written
// since; a killed worker stage restarts from its checkpoint and answers the same.
func TestWorkerStageBesideRelay(t *testing.T) {
	seeds := testenv.Brokers(t)
	bin, err := testenv.BuildProcessor(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	var d [32]byte
	_, _ = rand.Read(d[:])
	prefix := testenv.UniqueName(t, "ckfworkers") + "-"
	const dc = 0xdc01
	common := []string{"KAFKA_BROKERS=" + strings.Join(seeds, ","), "CKF_TOPIC_PREFIX=" + prefix,
		"CKF_INDEXER_DOMAIN=" + hex.EncodeToString(d[:16]) + ":" + hex.EncodeToString(d[16:]),
		fmt.Sprintf("CKF_INDEXER_LANES=0=%#x", dc), "CKF_RELAY_EXPECTED_BLOCKS=65536", "CKF_SHUTDOWN_TIMEOUT=10s"}
	logs := t.TempDir()
	rl := testenv.NewProcess(t, bin, logs, "relay", append(common, fmt.Sprintf("CKF_RELAY_DC_ID=%#x", dc)), "relay")
	rl.Start()
	rl.WaitReady(2 * time.Minute)
	wk := testenv.NewProcess(t, bin, logs, "workers", append(common, fmt.Sprintf("CKF_WORKERS_DC_ID=%#x", dc),
		"CKF_WORKERS_CHECKPOINT_INTERVAL=200ms", "CKF_WORKERS_LAG_COMMIT_INTERVAL=200ms"), "workers")
	wk.Start()
	wk.WaitReady(2 * time.Minute)

	codec, err := schemas.NewCodec(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	cl := testenv.Client(t)
	kv := config.DefaultTopics(prefix).KVEvents
	var all []producer.RouterEvent
	produce := func(evs []producer.RouterEvent) {
		t.Helper()
		for _, ev := range evs {
			b, _ := codec.EncodeKvEvent(relay.KvEventOf(ev))
			if err := cl.ProduceSync(context.Background(), &kgo.Record{Topic: kv, Key: []byte(strconv.FormatUint(uint64(ev.WorkerID), 10)), Value: b}).FirstErr(); err != nil {
				t.Fatal(err)
			}
		}
		all = append(all, evs...)
	}
	prompts := [][]ckf.LocalBlockHash{{1, 2, 3, 4, 5, 6}, {1, 2, 9, 10}, {20, 21, 22}}
	st := func(w ckf.WorkerID, rank ckf.DpRank, tier producer.StorageTier, p []ckf.LocalBlockHash, n int) producer.RouterEvent {
		ev := producer.RouterEvent{WorkerID: w, StorageTier: tier, Residency: producer.ResidencyWorker,
			Event: producer.KvCacheEvent{Kind: producer.KvEventStored, DpRank: rank}}
		for i := range n {
			ev.Event.Stored.Blocks = append(ev.Event.Stored.Blocks, producer.StoredBlock{BlockHash: ckf.ExternalBlockHash(uint64(p[0])<<20 + uint64(i)), TokensHash: p[i]})
		}
		return ev
	}
	rm := func(w ckf.WorkerID, tier producer.StorageTier, p []ckf.LocalBlockHash, from, to int) producer.RouterEvent {
		ev := producer.RouterEvent{WorkerID: w, StorageTier: tier, Residency: producer.ResidencyWorker, Event: producer.KvCacheEvent{Kind: producer.KvEventRemoved}}
		for i := from; i < to; i++ {
			ev.Event.Removed = append(ev.Event.Removed, ckf.ExternalBlockHash(uint64(p[0])<<20+uint64(i)))
		}
		return ev
	}
	client := &http.Client{Timeout: 5 * time.Second}
	ask := func(p []ckf.LocalBlockHash) ([]ckfworkers.Match, error) {
		hs := make([]uint64, len(p))
		for i, h := range p {
			hs[i] = uint64(h)
		}
		b, _ := json.Marshal(workerapi.WorkerMatchRequest{LocalBlockHashes: hs})
		resp, err := client.Post("http://"+wk.HTTP+workerapi.Path, "application/json", bytes.NewReader(b))
		if err != nil {
			return nil, err
		}
		defer resp.Body.Close()
		var a workerapi.WorkerMatchResponse
		if err := json.NewDecoder(resp.Body).Decode(&a); err != nil || a.Status != workerapi.StatusOK || a.DcID != ckf.DcID(dc).String() {
			return nil, fmt.Errorf("answer %+v: %v", a, err)
		}
		return workerapi.Matches(a.Sources), nil
	}
	agrees := func() bool {
		ix := ckfworkers.New()
		for _, ev := range all {
			_ = ix.Apply(ev)
		}
		for _, p := range prompts {
			var want ckfworkers.Result
			var chain []ckf.CanonicalHash
			ix.MatchLocal(p, ckfworkers.Options{}, &want, &chain)
			got, err := ask(p)
			if err != nil || !reflect.DeepEqual(got, append([]ckfworkers.Match{}, want.Matches...)) {
				return false
			}
		}
		return true
	}

	produce([]producer.RouterEvent{
		st(1, 0, producer.StorageTierDevice, prompts[0], 6), st(2, 0, producer.StorageTierDevice, prompts[0], 3),
		st(2, 0, producer.StorageTierHostPinned, prompts[0], 6), st(3, 1, producer.StorageTierDevice, prompts[1], 4),
		st(4, 0, producer.StorageTierDisk, prompts[2], 3), rm(1, producer.StorageTierDevice, prompts[0], 4, 6),
	})
	testenv.WaitUntil(t, time.Minute, "worker answers equal to the oracle's", agrees)
	code, out, errOut := runCmd(t, nil, "query", "--workers", "--http", "http://"+wk.HTTP, "--hashes", "1,2,3,4,5,6", "--top-k", "2")
	if code != exitOK || !strings.Contains(out, "OK from DC 000000000000dc01") || strings.Count(out, "\n") != 4 {
		t.Fatalf("processor query --workers: exit %d\n%s%s", code, out, errOut)
	}

	checkMetricsDocumented(t, "http://"+wk.HTTP+"/metrics")
	rl.Kill9()
	produce([]producer.RouterEvent{
		st(5, 0, producer.StorageTierDevice, prompts[2], 2), rm(2, producer.StorageTierHostPinned, prompts[0], 5, 6),
		st(1, 0, producer.StorageTierDevice, prompts[1], 2),
	})
	testenv.WaitUntil(t, time.Minute, "worker answers to the events written after the relay died", agrees)

	status := func() (s struct {
		CheckpointApplied uint64 `json:"checkpoint_applied"`
		Applied           uint64 `json:"applied"`
		Restored          bool   `json:"restored_from_checkpoint"`
	}) {
		resp, err := client.Get("http://" + wk.HTTP + workerapi.StatusPath)
		if err == nil {
			_ = json.NewDecoder(resp.Body).Decode(&s)
			resp.Body.Close()
		}
		return s
	}
	testenv.WaitUntil(t, time.Minute, "a checkpoint of every event", func() bool { return status().CheckpointApplied == uint64(len(all)) })
	wk.Kill9()
	wk.Start()
	wk.WaitReady(2 * time.Minute)
	if s := status(); !s.Restored || s.Applied != 0 {
		t.Fatalf("restarted worker stage: %+v; want it restored from its checkpoint with nothing to replay", s)
	}
	if !agrees() {
		t.Fatal("the restarted worker stage answers differently")
	}
}

// checkMetricsDocumented: the worker stage exports its metrics, and docs/metrics.md lists each.
func checkMetricsDocumented(t *testing.T, url string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	doc, err := os.ReadFile("../../docs/metrics.md")
	if err != nil {
		t.Fatal(err)
	}
	seen := 0
	for _, line := range strings.Split(string(body), "\n") {
		if !strings.HasPrefix(line, "ckf_workers_") {
			continue
		}
		name := line[:strings.IndexAny(line, "{ ")]
		for _, suf := range []string{"_bucket", "_sum", "_count"} {
			if base, ok := strings.CutSuffix(name, suf); ok && strings.HasSuffix(base, "_seconds") {
				name = base
			}
		}
		seen++
		if !strings.Contains(string(doc), "`"+name+"`") {
			t.Errorf("%s is exported but not in docs/metrics.md", name)
		}
	}
	if seen == 0 || !strings.Contains(string(body), "ckf_workers_ready 1") {
		t.Fatalf("no ckf_workers_ metric, or not ready, at %s", url)
	}
}
