package relay_test

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/ckf-stream/ckf-stream/ckf"
	"github.com/ckf-stream/ckf-stream/streams/internal/streamtest"
	"github.com/ckf-stream/ckf-stream/streams/relay"
	"github.com/ckf-stream/ckf-stream/testenv"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.uber.org/zap"
)

type pfRelaysResult struct {
	Relays          int        `json:"relays"`
	OfferedPerSec   float64    `json:"offered_events_per_sec"`
	ProducedPerSec  float64    `json:"produced_events_per_sec"`
	AppliedPerSec   float64    `json:"applied_events_per_sec"` // all events over first produce .. last applied
	DrainSecs       float64    `json:"drain_secs"`             // last produce acknowledged .. last event applied
	AppliedOverProd float64    `json:"applied_over_produced"`
	Deltas, Images  uint64     `json:"-"`
	Snapshots       uint64     `json:"snapshots"`
	Transactions    uint64     `json:"transactions"`         // committed lane transactions of all relays
	TxnsPerSec      float64    `json:"transactions_per_sec"` // the same over the whole run
	LoadAvg         [3]float64 `json:"loadavg"`
}

// BenchmarkE2ERelays16: 16 relays in one process (one KV topic and one lane each, as in a
// 16-DC deployment served from one host) while KV events arrive at 100,000 per second in total
// for CKF_E2E_SECONDS (4 s), paced in 10 ms steps. They keep up when the applied rate over
// the whole run matches the produced rate and the drain after the last produce is short.
func BenchmarkE2ERelays16(b *testing.B) {
	const relays, rate = 16, 100_000
	secs := streamtest.PerfPhase().Seconds()
	total := int(rate * secs)
	per := total / relays
	var res pfRelaysResult
	res.Relays, res.OfferedPerSec = relays, rate
	b.ResetTimer()
	for range b.N {
		e := streamtest.NewEnv(b, 1<<18)
		type running struct {
			r    *relay.Relay
			stop func()
			recs []*kgo.Record
		}
		rs := make([]running, relays)
		for i := range rs {
			kvTopic := testenv.NewTopic(b, 2)
			recs, _ := pfKvEvents(b, e.Codec, kvTopic, per)
			lane := uint8(i)
			cfg := relay.DefaultRelayConfig()
			cfg.Topics = relay.RelayTopics{KVEvents: kvTopic, Lanes: e.Topics.Lanes, SnapshotIndex: e.Topics.SnapshotIndex,
				Control: e.Topics.Control}
			cfg.Pool, cfg.Lane, cfg.CKF = streamtest.Pool(100+uint64(lane)), lane, ckf.NewCkfConfig(e.Blocks)
			cfg.TransactionalID = testenv.UniqueName(b, "relays16-"+strconv.Itoa(i))
			r, stop, _ := pfStartRelay(b, e, cfg)
			rs[i] = running{r: r, stop: stop, recs: recs}
		}
		prod := testenv.Client(b, kgo.ProducerLinger(time.Millisecond))
		const step = 10 * time.Millisecond
		perStep := int(rate * step.Seconds())
		start := time.Now()
		sent := 0
		for sent < total {
			for k := 0; k < perStep && sent < total; k++ {
				x := rs[sent%relays]
				rec := x.recs[sent/relays]
				prod.Produce(context.Background(), rec, func(_ *kgo.Record, err error) {
					if err != nil {
						b.Error(err)
					}
				})
				sent++
			}
			if d := time.Until(start.Add(time.Duration(sent/perStep) * step)); d > 0 {
				time.Sleep(d)
			}
		}
		if err := prod.Flush(context.Background()); err != nil {
			b.Fatal(err)
		}
		produced := time.Since(start)
		testenv.WaitUntil(b, 5*time.Minute, fmt.Sprintf("16 relays apply %d events", total), func() bool {
			for _, x := range rs {
				if s := x.r.Stats(); s.Events+s.Undecodable < uint64(per) {
					return false
				}
			}
			return true
		})
		all := time.Since(start)
		for _, x := range rs {
			s := x.r.Stats()
			res.Deltas += s.Deltas
			res.Images += s.Images
			res.Snapshots += s.Snapshots
			res.Transactions += s.Transactions
			x.stop()
		}
		res.ProducedPerSec = float64(total) / produced.Seconds()
		res.AppliedPerSec = float64(total) / all.Seconds()
		res.DrainSecs = (all - produced).Seconds()
		res.AppliedOverProd = res.AppliedPerSec / res.ProducedPerSec
		res.TxnsPerSec = float64(res.Transactions) / all.Seconds()
	}
	b.StopTimer()
	res.LoadAvg = streamtest.PerfLoadAvg()
	b.ReportMetric(res.ProducedPerSec, "produced-events/s")
	b.ReportMetric(res.AppliedPerSec, "applied-events/s")
	b.ReportMetric(res.AppliedOverProd, "applied/produced")
	b.ReportMetric(res.DrainSecs, "drain-s")
	b.ReportMetric(res.TxnsPerSec, "transactions/s")
	streamtest.PerfWrite(b, "e2e-relays16.json", res)
}

// pfStartRelay builds a relay of cfg and runs it until the returned stop is called; it returns
// once the relay's start-up snapshot is committed, with the time that took from Run.
func pfStartRelay(b *testing.B, e *streamtest.Env, cfg relay.RelayConfig) (r *relay.Relay, stop func(), took time.Duration) {
	b.Helper()
	r, err := relay.NewRelay(relay.RelayParams{Config: cfg, Codec: e.Codec,
		ClientOpts: []kgo.Opt{kgo.SeedBrokers(testenv.Brokers(b)...)}, Log: zap.NewNop()})
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	start := time.Now()
	go func() { done <- r.Run(ctx) }()
	select {
	case <-r.Started():
	case err := <-done:
		b.Fatalf("relay stopped at start-up: %v", err)
	case <-time.After(5 * time.Minute):
		b.Fatal("relay did not start")
	}
	return r, func() { cancel(); <-done }, time.Since(start)
}

// pfProduceAll produces rs as fast as the client batches them (1 ms linger) and waits for every
// acknowledgement.
func pfProduceAll(b *testing.B, rs []*kgo.Record) {
	b.Helper()
	prod := testenv.Client(b, kgo.ProducerLinger(time.Millisecond))
	for _, rec := range rs {
		prod.Produce(context.Background(), rec, func(_ *kgo.Record, err error) {
			if err != nil {
				b.Error(err)
			}
		})
	}
	if err := prod.Flush(context.Background()); err != nil {
		b.Fatal(err)
	}
}
