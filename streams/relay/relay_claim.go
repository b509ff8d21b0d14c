package relay

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"time"

	"github.com/ckf-stream/ckf-stream/streams"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.uber.org/zap"
)

// A pool claim is how a relay tells a newer instance of its pool from a fence nobody caused
// (relay.md, "Fences and the pool claim"). Every Run draws an instance id and, before its
// transactional id is initialised for the first time, writes a claim record to the snapshot
// index (key claimKeyPrefix + the transactional id, a small JSON value) and waits for its
// acknowledgement (acks=all). A newer instance therefore always claims before it can fence:
// initialising the id is what fences the older one. Before every later initialisation of the id
// (each recovery, after a fence or any uncertain write) the relay reads the latest claim under
// its key up to the high watermark: the claim of another instance means a newer instance of the
// pool runs, and the relay stops (ErrRelayFenced) without initialising the id, so it never
// fences that instance; its own claim means no newer instance has started, whatever the broker
// answered, and it recovers. A claim it cannot read (no leader for the index partition) is
// neither: the relay retries with its recovery backoff, initialising nothing meanwhile.
//
// The snapshot index is compacted, so the latest claim per key stays; its readers skip every key
// that is not a lane's (streams.ReadSnapshotIndexTopic), and a mirror of the index carries the
// claims as inert records.
const claimKeyPrefix = "relay-claim-"

// poolClaim is a claim record's value. Instance decides; the rest is for the operator who reads
// the stop's log line.
type poolClaim struct {
	Instance  string    `json:"instance"`
	Host      string    `json:"host,omitempty"`
	PID       int       `json:"pid,omitempty"`
	Pool      string    `json:"pool"`
	Lane      uint8     `json:"lane"`
	ClaimedAt time.Time `json:"claimed_at"`
}

// claimKey is the claim's record key for a transactional id: one claim per id, as one id is
// what instances fence each other on.
func claimKey(txnID string) []byte { return []byte(claimKeyPrefix + txnID) }

// newInstanceID draws a Run's instance id: 16 random bytes in hex.
func newInstanceID() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go 1.24+)
	return hex.EncodeToString(b[:])
}

// errClaimUnknown wraps why the pool's latest claim could not be written or read.
var errClaimUnknown = errors.New("streams: relay: the pool's claim is unknown")

// writeClaim writes this instance's claim and waits for its acknowledgement.
func (rl *relayLoop) writeClaim(ctx context.Context) error {
	host, _ := os.Hostname()
	v, err := json.Marshal(poolClaim{Instance: rl.instance, Host: host, PID: os.Getpid(), Pool: rl.cfg.Pool.String(),
		Lane: rl.cfg.Lane, ClaimedAt: rl.now().UTC()})
	if err != nil {
		return err
	}
	rec := &kgo.Record{Topic: rl.cfg.Topics.SnapshotIndex, Key: claimKey(rl.cfg.TransactionalID), Value: v}
	if err := rl.outCl.ProduceSync(ctx, rec).FirstErr(); err != nil {
		return fmt.Errorf("%w: writing the claim to %s: %w", errClaimUnknown, rl.cfg.Topics.SnapshotIndex, err)
	}
	return nil
}

// readClaim returns the latest claim under this relay's key, read from the start of the
// snapshot index up to each partition's high watermark as listed at the call (read_uncommitted:
// claims are not transactional, and a claim behind another relay's open snapshot transaction
// must be seen). ok is false when the index holds no claim under the key.
func (rl *relayLoop) readClaim(ctx context.Context) (c poolClaim, ok bool, err error) {
	topic := rl.cfg.Topics.SnapshotIndex
	adm := kadm.NewClient(rl.outCl)
	var ends, starts kadm.ListedOffsets
	err = streams.ListingWait{Log: rl.r.log}.Retry(ctx, "claims in "+topic, func() (err error) {
		if ends, err = adm.ListEndOffsets(ctx, topic); err == nil {
			err = ends.Error()
		}
		if err == nil {
			if starts, err = adm.ListStartOffsets(ctx, topic); err == nil {
				err = starts.Error()
			}
		}
		return err
	})
	if err != nil {
		return poolClaim{}, false, fmt.Errorf("%w: listing %s: %w", errClaimUnknown, topic, err)
	}
	endOf, startOf := map[int32]int64{}, map[int32]int64{}
	ends.Each(func(o kadm.ListedOffset) { endOf[o.Partition] = o.Offset })
	starts.Each(func(o kadm.ListedOffset) { startOf[o.Partition] = o.Offset })
	eol := streams.NewEndOfLog(topic, startOf, endOf)
	if eol.Reached() {
		return poolClaim{}, false, nil
	}
	assign := map[int32]kgo.Offset{}
	for p := range endOf {
		assign[p] = kgo.NewOffset().AtStart()
	}
	cl, err := kgo.NewClient(append(slices.Clip(rl.r.opts.ForRole("relay-claims")),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: assign}),
		kgo.FetchIsolationLevel(kgo.ReadUncommitted()), kgo.KeepControlRecords())...)
	if err != nil {
		return poolClaim{}, false, fmt.Errorf("%w: %w", errClaimUnknown, err)
	}
	defer cl.Close()
	key := claimKey(rl.cfg.TransactionalID)
	var latest *kgo.Record
	err = eol.ReadToEnd(ctx, cl, func(rec *kgo.Record) {
		if string(rec.Key) == string(key) && (latest == nil || rec.Offset > latest.Offset) {
			latest = rec
		}
	})
	if err != nil {
		return poolClaim{}, false, fmt.Errorf("%w: reading %s: %w", errClaimUnknown, topic, err)
	}
	if latest == nil || latest.Value == nil {
		return poolClaim{}, false, nil
	}
	if err := json.Unmarshal(latest.Value, &c); err != nil || c.Instance == "" {
		// Not a claim this code wrote: nothing proves a newer instance; the relay claims anew.
		rl.r.log.Warn("unreadable pool claim ignored", zap.String("topic", topic), zap.Int64("offset", latest.Offset), zap.Error(err))
		return poolClaim{}, false, nil
	}
	return c, true, nil
}

// holdsPool decides, before the transactional id is initialised (every new incarnation), whether
// this instance may do so. held true: it claimed the pool (the first time) or the latest claim
// is its own. held false with a nil error: the claim could not be written or read; the caller
// retries later. A non-nil error (ErrRelayFenced) stops the relay: a newer instance claimed the
// pool, or a fence came with no snapshot index to hold claims.
func (rl *relayLoop) holdsPool() (held bool, err error) {
	r, cfg := rl.r, rl.cfg
	fence := rl.fence
	if cfg.Topics.SnapshotIndex == "" {
		if fence != nil {
			// Without an index there is no claim to tell a newer instance from the brokers: stop
			// rather than fence a newer instance in turn.
			r.log.Error("relay fenced, and no snapshot index holds the pool's claims to tell a newer instance from the brokers; stopping",
				zap.Error(fence))
			rl.broken = true
			return false, fmt.Errorf("%w: %w", ErrRelayFenced, fence)
		}
		return true, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), cfg.WriteTimeout)
	defer cancel()
	if !rl.claimed {
		if err := rl.writeClaim(ctx); err != nil {
			r.log.Warn("relay could not claim its pool; retrying before its transactional id is initialised", zap.Error(err))
			return false, nil
		}
		rl.claimed = true
		r.log.Info("relay claimed its pool", zap.String("instance", rl.instance), zap.String("transactional_id", cfg.TransactionalID))
		return true, nil
	}
	c, ok, err := rl.readClaim(ctx)
	if err != nil {
		r.log.Warn("relay cannot read its pool's latest claim; retrying before its transactional id is initialised again",
			zap.Bool("after_fence", fence != nil), zap.Error(err))
		return false, nil
	}
	if ok && c.Instance != rl.instance {
		r.log.Error("a newer instance of the relay's pool claimed it; stopping without fencing it",
			zap.String("instance", rl.instance), zap.String("newer_instance", c.Instance), zap.String("newer_host", c.Host),
			zap.Int("newer_pid", c.PID), zap.Time("claimed_at", c.ClaimedAt), zap.NamedError("fence", fence))
		rl.broken = true
		cause := fence
		if cause == nil {
			cause = errors.New("claimed by a newer instance")
		}
		return false, fmt.Errorf("%w: instance %s (host %q, pid %d) claimed the pool at %s: %w", ErrRelayFenced, c.Instance, c.Host, c.PID,
			c.ClaimedAt.Format(time.RFC3339), cause)
	}
	if !ok {
		if err := rl.writeClaim(ctx); err != nil {
			r.log.Warn("relay's pool claim is gone and could not be written again; retrying", zap.Error(err))
			return false, nil
		}
		r.log.Warn("relay's pool claim was gone from the snapshot index; claimed again", zap.String("instance", rl.instance))
	}
	if fence != nil {
		r.c.fenceRecoveries.add(1)
		r.log.Warn("relay fenced with no newer instance of its pool (the latest claim is its own): the brokers' answer; recovering under a new incarnation",
			zap.String("instance", rl.instance), zap.Error(fence))
		rl.fence = nil
	}
	return true, nil
}

// failCause is why a lane write failed: the "cause" tag of ckf_relay_write_failures_total.
type failCause uint8

const (
	// causeTimeout: the write was still unanswered at its WriteTimeout (streams.ErrWriteUncertain,
	// or the write's deadline): the brokers took no decision in time, as when no partition leader
	// is left.
	causeTimeout failCause = iota
	// causeFence: the broker answered with a fence (isFenceError).
	causeFence
	// causeError: any other failure (a refusal, a closed connection, an injected fault).
	causeError
	numCauses
)

func (c failCause) String() string {
	switch c {
	case causeTimeout:
		return "timeout"
	case causeFence:
		return "fence"
	default:
		return "error"
	}
}

// failureCause classifies a failed lane write.
func failureCause(err error) failCause {
	switch {
	case isFenceError(err):
		return causeFence
	case errors.Is(err, streams.ErrWriteUncertain), errors.Is(err, context.DeadlineExceeded):
		return causeTimeout
	default:
		return causeError
	}
}

// writeFailure is the relay's last failed lane write, for Ready and RelayStats.
type writeFailure struct {
	write string
	cause failCause
	err   string
	at    time.Time
}

// String is the failure as Ready reports it.
func (f *writeFailure) String() string {
	what := "failed"
	switch f.cause {
	case causeTimeout:
		what = "unanswered within the write timeout"
	case causeFence:
		what = "fenced"
	}
	return fmt.Sprintf("%s write %s at %s: %s", f.write, what, f.at.UTC().Format(time.RFC3339), f.err)
}

// text is String, "" for no failure.
func (f *writeFailure) text() string {
	if f == nil {
		return ""
	}
	return f.String()
}
