package query

import "github.com/twmb/franz-go/pkg/kgo"

// ServiceClientOpts returns the options s builds its client with, for the external tests.
func ServiceClientOpts(s *QueryService) []kgo.Opt { return s.clientOpts() }
