package query

import (
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// ServiceClientOpts returns the options s builds its client with, for the external tests.
func ServiceClientOpts(s *QueryService) []kgo.Opt { return s.clientOpts() }

// SetAnswererClock replaces a's clock, for tests that check ages against a fixed time.
func SetAnswererClock(a *Answerer, now func() time.Time) { a.now = now }
