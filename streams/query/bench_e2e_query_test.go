package query_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ckf-stream/ckf-stream/app/indexer"
	"github.com/ckf-stream/ckf-stream/ckf"
	"github.com/ckf-stream/ckf-stream/ckf/index"
	"github.com/ckf-stream/ckf-stream/queryapi"
	"github.com/ckf-stream/ckf-stream/schemas"
	"github.com/ckf-stream/ckf-stream/streams/internal/streamtest"
	"github.com/ckf-stream/ckf-stream/streams/lanes"
	"github.com/ckf-stream/ckf-stream/streams/query"
	"github.com/ckf-stream/ckf-stream/testenv"
	"github.com/twmb/franz-go/pkg/kgo"
)

// ---- 3. queries over Kafka, HTTP and in process ---------------------------------------------

var pfQueryDomain = ckf.IndexerDomainID{
	CacheSemantics: ckf.CacheSemanticsID{Digest: ckf.Digest128{0xBE}, Source: ckf.IdentityExplicit},
	RoutingScope:   ckf.RoutingScopeID{Digest: ckf.Digest128{0xEB}, Source: ckf.IdentityExplicit},
}

type pfQueryIndex struct {
	g      *index.GlobalIndexer
	ans    *query.Answerer
	chains [][]uint64 // 128-block chains: even ones cached by every lane to the end
	reqs   []schemas.QueryRequest
	bodies [][]byte // HTTP bodies of the same chains
	binary [][]byte // the same chains in the binary form (application/octet-stream)
}

var (
	pfQIOnce sync.Once
	pfQI     *pfQueryIndex
)

// pfQueryIndexOf builds (once) 16 ready lanes of 2^20 buckets: about 50 % random slot
// occupancy, plus 512 128-block chains; even chains are cached whole by every lane (shared
// prefixes), odd ones by a few lanes to depth 64+lane.
func pfQueryIndexOf(b *testing.B) *pfQueryIndex {
	pfQIOnce.Do(func() {
		const buckets = 1 << 20
		format := ckf.NewFormatIdentity(ckf.DefaultSeed, buckets)
		var ml index.ManifestLanes
		for l := range ckf.LaneCount {
			p := ckf.PoolID{Domain: pfQueryDomain, Dc: ckf.DcID(500 + l)}
			ml[l] = &p
		}
		m, _, err := index.NewManifest(91, pfQueryDomain, format, ml)
		if err != nil {
			b.Fatal(err)
		}
		g, err := index.NewGlobalIndexer(m, ckf.DefaultSearchConfig())
		if err != nil {
			b.Fatal(err)
		}
		addr := g.Addressing()
		rng := rand.New(rand.NewPCG(77, 78))
		lanes := make([][]uint64, ckf.LaneCount)
		for l := range lanes {
			w := make([]uint64, buckets)
			for i := range w {
				v := rng.Uint64()
				// keep about half of the slots: clear slots whose selector bit is 0
				sel := rng.Uint32()
				for s := 0; s < 4; s++ {
					if sel&(1<<s) == 0 {
						v &^= 0xFFFF << (16 * s)
					}
				}
				w[i] = v
			}
			lanes[l] = w
		}
		x := &pfQueryIndex{g: g}
		for c := 0; c < 512; c++ {
			chain := make([]uint64, 128)
			for i := range chain {
				chain[i] = rng.Uint64()
			}
			seqs := ckf.SequenceHashes(chain)
			for l := 0; l < ckf.LaneCount; l++ {
				depth := 128
				if c%2 == 1 && l%5 == 0 {
					depth = 64 + l
				}
				for i := 0; i < depth; i++ {
					pr := addr.Probe(seqs[i])
					placed := false
					for _, bk := range []uint64{pr.BucketA, pr.BucketB} {
						if s, ok := ckf.Bucket(lanes[l][bk]).FreeSlot(); ok && !placed {
							lanes[l][bk] = uint64(ckf.Bucket(lanes[l][bk]).WithSlot(s, pr.Fingerprint))
							placed = true
						}
					}
					if !placed {
						lanes[l][pr.BucketA] = uint64(ckf.Bucket(lanes[l][pr.BucketA]).WithSlot(rng.IntN(4), pr.Fingerprint))
					}
				}
			}
			x.chains = append(x.chains, chain)
			x.reqs = append(x.reqs, schemas.QueryRequest{Input: schemas.InputLocalBlockHashes, Hashes: schemas.AppendU64s(nil, chain)})
			body, _ := json.Marshal(queryapi.PrefixMatchRequest{LocalBlockHashes: chain})
			x.bodies = append(x.bodies, body)
			x.binary = append(x.binary, queryapi.AppendBinaryRequest(nil, chain))
		}
		for l := range ckf.LaneCount {
			in, err := g.ClaimLane(uint8(l))
			if err != nil {
				b.Fatal(err)
			}
			id := ckf.ProducerIdentity{Pool: *ml[l], Incarnation: 1, LayoutGeneration: 1, Format: format}
			lease := ckf.LaneLease{Consumer: 91, Lane: uint8(l), Epoch: 1}
			if err := in.Assign(id, lease); err != nil {
				b.Fatal(err)
			}
			if out := in.InstallSnapshot(&ckf.Snapshot{Identity: id, Lease: lease, Sequence: 1, Buckets: lanes[l]}); out.Kind != index.OutcomeSnapshotInstalled {
				b.Fatal(out)
			}
		}
		x.ans = query.NewAnswerer(g, nil)
		pfQI = x
	})
	if pfQI == nil {
		b.Fatal("query index not built")
	}
	return pfQI
}

type pfLoadPoint struct {
	Path       string       `json:"path"`
	Callers    int          `json:"callers"`
	Queries    int          `json:"queries"`
	Seconds    float64      `json:"seconds"`
	QPS        float64      `json:"queries_per_sec"`
	P50us      float64      `json:"p50_us"`
	P99us      float64      `json:"p99_us"`
	P999us     float64      `json:"p999_us"`
	CDF        [][2]float64 `json:"cdf_ms"`
	LoadAvg    [3]float64
	Errors     int64   `json:"errors"`
	BaselineUs float64 `json:"baseline_p50_us,omitempty"`
	Baseline   string  `json:"baseline,omitempty"`
}

// pfClosedLoop runs callers goroutines, each calling call(i) back to back for the phase
// (after a short warm-up), and returns the throughput and latency quantiles.
func pfClosedLoop(b *testing.B, path string, callers int, call func(worker, i int) error) pfLoadPoint {
	warm := time.Now().Add(300 * time.Millisecond)
	stopAt := warm.Add(streamtest.PerfPhase())
	lat := make([][]time.Duration, callers)
	var errs atomic.Int64
	var measStart, measEnd atomic.Int64
	var wg sync.WaitGroup
	for w := range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				t0 := time.Now()
				if t0.After(stopAt) {
					return
				}
				if err := call(w, i); err != nil {
					errs.Add(1)
					if errs.Load() > 100 {
						return
					}
					continue
				}
				if t0.After(warm) {
					lat[w] = append(lat[w], time.Since(t0))
				}
			}
		}()
	}
	measStart.Store(warm.UnixNano())
	wg.Wait()
	measEnd.Store(time.Now().UnixNano())
	var all []time.Duration
	for _, l := range lat {
		all = append(all, l...)
	}
	secs := float64(min(measEnd.Load(), stopAt.UnixNano())-measStart.Load()) / 1e9
	us := func(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e3 }
	if errs.Load() > 0 {
		b.Logf("%s callers=%d: %d errors", path, callers, errs.Load())
	}
	return pfLoadPoint{Path: path, Callers: callers, Queries: len(all), Seconds: secs, QPS: float64(len(all)) / secs,
		P50us: us(streamtest.PerfDurQuantile(all, 0.5)), P99us: us(streamtest.PerfDurQuantile(all, 0.99)), P999us: us(streamtest.PerfDurQuantile(all, 0.999)),
		CDF: streamtest.PerfCDF(all, 400), LoadAvg: streamtest.PerfLoadAvg(), Errors: errs.Load()}
}

func pfReportPoint(b *testing.B, pt pfLoadPoint) {
	b.ReportMetric(pt.QPS, "queries/s")
	b.ReportMetric(pt.P50us, "p50-µs")
	b.ReportMetric(pt.P99us, "p99-µs")
	b.ReportMetric(pt.P999us, "p99.9-µs")
	b.ReportMetric(pt.LoadAvg[0], "load1")
	if pt.BaselineUs > 0 {
		b.ReportMetric(pt.P50us/pt.BaselineUs, "p50/baseline")
	}
}

var pfCallers = []int{1, 4, 16, 64}

// pfInProcessP50 is the in-process Answer p50 (µs) of this run, the baseline of the HTTP path.
var pfInProcessP50 atomic.Uint64

// BenchmarkE2EQueryInProcess is the same-run baseline of the query paths: Answerer.Answer on
// the caller's goroutine (no transport).
func BenchmarkE2EQueryInProcess(b *testing.B) {
	x := pfQueryIndexOf(b)
	for _, callers := range []int{1, 2} {
		b.Run(fmt.Sprintf("callers=%d", callers), func(b *testing.B) {
			var pt pfLoadPoint
			for range b.N {
				scratch := make([]query.QueryScratch, callers)
				reqs := slices.Clone(x.reqs)
				for i := range reqs {
					reqs[i].CorrelationID = "in-process-" + strconv.Itoa(i)
				}
				pt = pfClosedLoop(b, "in-process", callers, func(w, i int) error {
					r := x.ans.Answer(&reqs[(i*7+w)%len(reqs)], &scratch[w])
					if r.Status != schemas.QueryOK {
						return fmt.Errorf("status %v", r.Status)
					}
					return nil
				})
			}
			if callers == 1 {
				pfInProcessP50.Store(uint64(pt.P50us * 1000))
			}
			pfReportPoint(b, pt)
			streamtest.PerfWrite(b, fmt.Sprintf("e2e-query-inprocess-callers=%d.json", callers), pt)
		})
	}
}

// BenchmarkE2EQueryHTTP: POST /v1/prefix-matches of the indexer's API (app/indexer) on a
// loopback server, 128-block queries by local block hashes, keep-alive net/http clients: the
// JSON form (callers=N) and the binary form (binary/callers=N, little-endian u64 hashes in,
// the binary reply out; app/indexer/http.md "Binary form").
func BenchmarkE2EQueryHTTP(b *testing.B) {
	x := pfQueryIndexOf(b)
	api, err := indexer.NewAPI(indexer.APIParams{Answerer: x.ans, Lanes: func() []lanes.LaneStatus { return nil }})
	if err != nil {
		b.Fatal(err)
	}
	mux := http.NewServeMux()
	for _, r := range api.Routes() {
		mux.Handle(r.Pattern, r.Handler)
	}
	srv := httptest.NewServer(mux)
	defer srv.Close()
	url := srv.URL + "/v1/prefix-matches"
	for _, form := range []struct {
		prefix, file, contentType string
		bodies                    [][]byte
	}{
		{"", "e2e-query-http", "application/json", x.bodies},
		{"binary/", "e2e-query-http-binary", queryapi.BinaryContentType, x.binary},
	} {
		for _, callers := range pfCallers {
			b.Run(fmt.Sprintf("%scallers=%d", form.prefix, callers), func(b *testing.B) {
				cl := &http.Client{Transport: &http.Transport{MaxIdleConns: callers, MaxIdleConnsPerHost: callers}}
				defer cl.CloseIdleConnections()
				var pt pfLoadPoint
				for range b.N {
					pt = pfClosedLoop(b, "http", callers, func(w, i int) error {
						resp, err := cl.Post(url, form.contentType, bytes.NewReader(form.bodies[(i*7+w)%len(form.bodies)]))
						if err != nil {
							return err
						}
						_, _ = io.Copy(io.Discard, resp.Body)
						resp.Body.Close()
						if resp.StatusCode != http.StatusOK {
							return fmt.Errorf("status %d", resp.StatusCode)
						}
						return nil
					})
				}
				if base := pfInProcessP50.Load(); base > 0 {
					pt.BaselineUs, pt.Baseline = float64(base)/1000, "in-process Answer p50, 1 caller"
				}
				pfReportPoint(b, pt)
				streamtest.PerfWrite(b, fmt.Sprintf("%s-callers=%d.json", form.file, callers), pt)
			})
		}
	}
}

// BenchmarkE2EQueryKafka: QueryClient -> ckf-queries -> QueryService (one replica, default
// batching) -> ckf-query-replies -> QueryClient, 128-block queries, one shared client.
func BenchmarkE2EQueryKafka(b *testing.B) {
	x := pfQueryIndexOf(b)
	codec, err := schemas.NewCodec(context.Background())
	if err != nil {
		b.Fatal(err)
	}
	tp := newQTopics(b, streamtest.BrokerKafka(b), 4)
	qcfg := query.DefaultQueryConfig()
	qcfg.RequestTopic, qcfg.ReplyTopic, qcfg.DeadLetterTopic = tp.requests, tp.replies, tp.deadLetters
	qcfg.Group = testenv.UniqueName(b, "bench-q")
	svc, err := query.NewQueryService(query.QueryServiceParams{
		Config:   qcfg,
		Answerer: x.ans, Codec: codec, ClientOpts: []kgo.Opt{kgo.SeedBrokers(tp.k.Seeds()...)},
	})
	if err != nil {
		b.Fatal(err)
	}
	if err := svc.Start(); err != nil {
		b.Fatal(err)
	}
	defer func() { _ = svc.Close(context.Background()) }()
	c := qNewClient(b, codec, tp, qClientConfig(30*time.Second))
	for i := range 30 { // group join, metadata, connections
		if _, err := c.Query(context.Background(), x.reqs[i%len(x.reqs)]); err != nil {
			b.Fatal(err)
		}
	}
	echo50, echo99 := qEchoFloor(b, tp.k, 500) // the floor under any request-reply over Kafka
	for _, callers := range pfCallers {
		b.Run(fmt.Sprintf("callers=%d", callers), func(b *testing.B) {
			var pt pfLoadPoint
			for range b.N {
				pt = pfClosedLoop(b, "kafka", callers, func(w, i int) error {
					r, err := c.Query(context.Background(), x.reqs[(i*7+w)%len(x.reqs)])
					if err != nil {
						return err
					}
					if r.Status != schemas.QueryOK || r.QueryBlocks != 128 {
						return fmt.Errorf("reply %v", r.Status)
					}
					return nil
				})
			}
			pt.BaselineUs, pt.Baseline = float64(echo50.Nanoseconds())/1e3, fmt.Sprintf("bare franz-go echo p50 (p99 %v)", echo99)
			pfReportPoint(b, pt)
			b.ReportMetric(float64(echo50.Nanoseconds())/1e3, "echo-p50-µs")
			streamtest.PerfWrite(b, fmt.Sprintf("e2e-query-kafka-callers=%d.json", callers), pt)
		})
	}
}
