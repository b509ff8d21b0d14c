package streamtest

import (
	"context"
	"testing"

	"github.com/ckf-stream/ckf-stream/testenv"
	"github.com/twmb/franz-go/pkg/kadm"
)

// WaitTransactionsSettled waits until no transaction is open on topic: every partition's last
// stable offset equals its high watermark. EndTransaction returns once the coordinator has
// decided; the commit or abort markers reach the partitions after that. A test whose reader must
// find the markers inside the end it lists waits for them here.
func WaitTransactionsSettled(t testing.TB, adm *kadm.Client, topic string) {
	t.Helper()
	testenv.WaitUntil(t, Converge, "the transactions on "+topic+" settle", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), Converge)
		defer cancel()
		stable, err := adm.ListCommittedOffsets(ctx, topic)
		if err != nil || stable.Error() != nil {
			return false
		}
		high, err := adm.ListEndOffsets(ctx, topic)
		if err != nil || high.Error() != nil {
			return false
		}
		settled := true
		high.Each(func(o kadm.ListedOffset) {
			s, ok := stable.Lookup(o.Topic, o.Partition)
			settled = settled && ok && s.Offset == o.Offset
		})
		return settled
	})
}
