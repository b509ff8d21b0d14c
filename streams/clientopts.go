package streams

import "github.com/twmb/franz-go/pkg/kgo"

// ClientOptsFunc returns the options of one Kafka client by its role ("lanes",
// "relay-input", ...). Components that build several clients take one, so that per-client
// options — franz-go hooks such as kprom's, which register collectors per client, or a logger
// naming the client — reach every client. The returned slice is not retained or modified.
type ClientOptsFunc func(role string) []kgo.Opt

// ClientOpts resolves a component's client options: the per-role function when the caller gave
// one, else the shared list, then the client's own extra options.
type ClientOpts struct {
	Shared  []kgo.Opt
	PerRole ClientOptsFunc
}

func (c ClientOpts) ForRole(role string, extra ...kgo.Opt) []kgo.Opt {
	var opts []kgo.Opt
	if c.PerRole != nil {
		opts = append(opts, c.PerRole(role)...)
	} else {
		opts = append(opts, c.Shared...)
	}
	return append(opts, extra...)
}
