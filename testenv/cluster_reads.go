package testenv

import (
	"context"
	"fmt"

	"github.com/twmb/franz-go/pkg/kadm"
)

// ListEndOffsets lists the end offsets of topics with adm; an error names the topic and the
// partition.
func ListEndOffsets(ctx context.Context, adm *kadm.Client, topics ...string) (kadm.ListedOffsets, error) {
	l, err := adm.ListEndOffsets(ctx, topics...)
	if err == nil {
		err = l.Error()
	}
	if err != nil {
		return nil, fmt.Errorf("end offsets of %v: %w", topics, err)
	}
	return l, nil
}

// ListCommittedOffsets lists the last stable offsets of topics with adm.
func ListCommittedOffsets(ctx context.Context, adm *kadm.Client, topics ...string) (kadm.ListedOffsets, error) {
	l, err := adm.ListCommittedOffsets(ctx, topics...)
	if err == nil {
		err = l.Error()
	}
	if err != nil {
		return nil, fmt.Errorf("last stable offsets of %v: %w", topics, err)
	}
	return l, nil
}
