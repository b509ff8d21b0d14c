package bridge_test

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/ckf-stream/ckf-stream/bridge"
	"github.com/ckf-stream/ckf-stream/bridge/kvevents"
	"github.com/ckf-stream/ckf-stream/schemas"
	"github.com/go-zeromq/zmq4"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"go.uber.org/zap/zaptest"
)

// TestBridgeStopsWhenKafkaRefusesARecord: a record the broker refuses for good leaves the
// converter holding what Kafka does not; the bridge stops with the cause instead of going on,
// so that its restart resumes from what Kafka has. (kfake injects the refusal.)
func TestBridgeStopsWhenKafkaRefusesARecord(t *testing.T) {
	fake, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "kv", "dlq"))
	if err != nil {
		t.Fatal(err)
	}
	defer fake.Close()
	fake.ControlKey(int16(kmsg.Produce), func(req kmsg.Request) (kmsg.Response, error, bool) {
		fake.KeepControl()
		r := req.(*kmsg.ProduceRequest)
		resp := r.ResponseKind().(*kmsg.ProduceResponse)
		for _, tp := range r.Topics {
			rt := kmsg.NewProduceResponseTopic()
			rt.Topic, rt.TopicID = tp.Topic, tp.TopicID
			for _, p := range tp.Partitions {
				rp := kmsg.NewProduceResponseTopicPartition()
				rp.Partition = p.Partition
				rp.ErrorCode = kerr.InvalidRecord.Code
				rt.Partitions = append(rt.Partitions, rp)
			}
			resp.Topics = append(resp.Topics, rt)
		}
		return resp, nil, true
	})
	prod, err := kgo.NewClient(kgo.SeedBrokers(fake.ListenAddrs()...), kgo.RecordPartitioner(bridge.KeyPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
	codec, err := schemas.NewCodec(context.Background(), schemas.Topic(schemas.TypeKvEvent, "kv"), schemas.Topic(schemas.TypeDeadLetter, "dlq"))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pub := zmq4.NewPub(ctx)
	defer pub.Close()
	if err := pub.Listen("tcp://127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	b, err := bridge.New(bridge.Params{Config: defaulted(bridge.Config{Endpoint: "tcp://" + pub.Addr().String(), WorkerID: 7, BlockSize: 4,
		KVTopic: "kv", DeadLetterTopic: "dlq"}), Codec: codec, Producer: prod, Log: zaptest.NewLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- b.Run(ctx) }()
	payload, err := os.ReadFile("kvevents/testdata/shapes/sglang_array.msgpack")
	if err != nil {
		t.Fatal(err)
	}
	// The PUB socket drops until the subscription reaches it: publish (sequence 0 again, a
	// duplicate to the bridge) until the bridge stops.
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case err := <-done:
			if err == nil || !strings.Contains(err.Error(), "not produced") || !strings.Contains(err.Error(), kerr.InvalidRecord.Message) {
				t.Fatalf("Run returned %v", err)
			}
			if b.Ready() == nil {
				t.Fatal("a stopped bridge reports ready")
			}
			return
		case <-tick.C: // the resend period while the subscription is set up, not a wait for an outcome
			if err := pub.Send(zmq4.NewMsgFrom([]byte{}, kvevents.SeqFrame(0), payload)); err != nil {
				t.Fatal(err)
			}
		case <-ctx.Done():
			t.Fatal("the bridge did not stop")
		}
	}
}
