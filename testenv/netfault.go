package testenv

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/Shopify/toxiproxy/v2/toxics"
	"github.com/rs/zerolog"
)

// FaultProxy is a TCP proxy on loopback in front of one broker listener, through which tests
// inject network faults (toxiproxy's toxics, run in the test process as a library): latency,
// bandwidth limits, blackholes, connection resets. Clients reach it because the broker
// advertises the proxy's address (LocalClusterConfig.ClientAdvertised, AltAdvertised and
// QueryAdvertised).
type FaultProxy struct {
	p *toxiproxy.Proxy
	// up and down count the bytes of each stream once CountBytes has added them.
	up, down *countToxic
}

// FaultProxies is a group of proxies (one route: every broker's listener of one kind), whose
// toxics are added and removed together.
type FaultProxies []*FaultProxy

// quietToxics keeps toxiproxy's toxics, which log to zerolog's global logger at trace level
// (one line per interrupted pipe), out of the test's output: the test reports the faults itself.
var quietToxics sync.Once

// newFaultServer is the toxiproxy server value the proxies share: it holds only the metrics
// container and logger the proxies' links use; no HTTP API is started.
func newFaultServer() *toxiproxy.ApiServer {
	quietToxics.Do(func() {
		zerolog.SetGlobalLevel(zerolog.WarnLevel)
		toxics.Register(countToxicType, new(countToxic))
	})
	return toxiproxy.NewServer(toxiproxy.NewMetricsContainer(nil), zerolog.Nop())
}

// StartFaultProxy starts a proxy named name listening on listen ("127.0.0.1:0" for a free
// port), forwarding to upstream (which need not answer yet: the proxy dials it for each accepted
// connection). The proxy is stopped when the test ends.
func StartFaultProxy(t testing.TB, name, listen, upstream string) *FaultProxy {
	t.Helper()
	p := toxiproxy.NewProxy(newFaultServer(), name, listen, upstream)
	if err := p.Start(); err != nil {
		t.Fatalf("fault proxy %s -> %s: %v", name, upstream, err)
	}
	t.Cleanup(p.Stop)
	return &FaultProxy{p: p}
}

// Addr is the proxy's listen address.
func (f *FaultProxy) Addr() string { return f.p.Listen }

// Toxic is one network fault on a proxy. Stream is "upstream" (client to broker) or
// "downstream" (broker to client).
type Toxic struct {
	Name       string         `json:"name"`
	Type       string         `json:"type"`
	Stream     string         `json:"stream"`
	Toxicity   float32        `json:"toxicity"`
	Attributes map[string]any `json:"attributes"`
}

// Latency delays every chunk by latency ± jitter.
func Latency(stream string, latency, jitter time.Duration) Toxic {
	return Toxic{Name: "latency-" + stream, Type: "latency", Stream: stream, Toxicity: 1,
		Attributes: map[string]any{"latency": latency.Milliseconds(), "jitter": jitter.Milliseconds()}}
}

// Bandwidth limits the stream to kibPerSecond KiB/s.
func Bandwidth(stream string, kibPerSecond int64) Toxic {
	return Toxic{Name: "bandwidth-" + stream, Type: "bandwidth", Stream: stream, Toxicity: 1,
		Attributes: map[string]any{"rate": kibPerSecond}}
}

// Blackhole drops every byte of the stream and keeps the connections open (toxiproxy's
// timeout toxic with no timeout): the peer sees silence, not an error.
func Blackhole(stream string) Toxic {
	return Toxic{Name: "blackhole-" + stream, Type: "timeout", Stream: stream, Toxicity: 1,
		Attributes: map[string]any{"timeout": 0}}
}

// Reset closes every connection with a TCP RST after after, from the first byte it carries.
func Reset(stream string, after time.Duration) Toxic {
	return Toxic{Name: "reset-" + stream, Type: "reset_peer", Stream: stream, Toxicity: 1,
		Attributes: map[string]any{"timeout": after.Milliseconds()}}
}

// countToxicType is the toxiproxy type name of countToxic.
const countToxicType = "ckf_count"

// countToxic passes every chunk on unchanged and counts its bytes. toxiproxy's own byte metrics
// are added only when a connection closes, and a mirror's connections stay open for the whole
// run; this counts as the bytes pass. One instance serves every connection of the proxy.
type countToxic struct {
	n atomic.Int64
}

func (t *countToxic) Pipe(stub *toxics.ToxicStub) {
	for {
		select {
		case <-stub.Interrupt:
			return
		case c := <-stub.Input:
			if c == nil {
				stub.Close()
				return
			}
			t.n.Add(int64(len(c.Data)))
			stub.Output <- c
		}
	}
}

// ProxyBytes are the bytes that entered a proxy since its counters started, per stream.
type ProxyBytes struct {
	// Up is from the clients to the listener behind the proxy (their requests).
	Up int64
	// Down is from that listener back to the clients (its responses).
	Down int64
}

// Total is Up plus Down.
func (b ProxyBytes) Total() int64 { return b.Up + b.Down }

// Sub is b minus earlier, stream by stream.
func (b ProxyBytes) Sub(earlier ProxyBytes) ProxyBytes {
	return ProxyBytes{Up: b.Up - earlier.Up, Down: b.Down - earlier.Down}
}

// CountBytes starts counting the bytes of both streams (Bytes). The counters are toxics ahead of
// every toxic added after them: a byte is counted as it enters the proxy, so bytes a later
// blackhole drops are counted (they left their sender, as on a cut link). Call it before the
// proxy carries traffic: a connection open before it is counted from then on.
func (f *FaultProxy) CountBytes() error {
	if f.up != nil {
		return nil
	}
	var counters [2]*countToxic
	for i, stream := range []string{"upstream", "downstream"} {
		name := "count-" + stream
		if err := f.Add(Toxic{Name: name, Type: countToxicType, Stream: stream, Toxicity: 1}); err != nil {
			return err
		}
		w := f.p.Toxics.GetToxic(name)
		c, ok := w.Toxic.(*countToxic)
		if !ok {
			return fmt.Errorf("proxy %s: toxic %s is a %T, not a byte counter", f.p.Name, name, w.Toxic)
		}
		counters[i] = c
	}
	f.up, f.down = counters[0], counters[1]
	return nil
}

// Bytes returns the bytes counted since CountBytes; zero without it.
func (f *FaultProxy) Bytes() ProxyBytes {
	if f.up == nil {
		return ProxyBytes{}
	}
	return ProxyBytes{Up: f.up.n.Load(), Down: f.down.n.Load()}
}

// Add adds the toxic to the proxy.
func (f *FaultProxy) Add(tx Toxic) error {
	b, err := json.Marshal(tx)
	if err != nil {
		return err
	}
	if _, err := f.p.Toxics.AddToxicJson(bytes.NewReader(b)); err != nil {
		return fmt.Errorf("proxy %s: toxic %s: %w", f.p.Name, tx.Name, err)
	}
	return nil
}

// Remove removes the named toxic from the proxy.
func (f *FaultProxy) Remove(name string) error {
	if err := f.p.Toxics.RemoveToxic(context.Background(), name); err != nil {
		return fmt.Errorf("proxy %s: remove toxic %s: %w", f.p.Name, name, err)
	}
	return nil
}

// Add adds the toxic to every proxy of the group.
func (g FaultProxies) Add(tx Toxic) error {
	for _, f := range g {
		if err := f.Add(tx); err != nil {
			return err
		}
	}
	return nil
}

// Remove removes the named toxic from every proxy of the group.
func (g FaultProxies) Remove(name string) error {
	for _, f := range g {
		if err := f.Remove(name); err != nil {
			return err
		}
	}
	return nil
}

// Addrs are the proxies' listen addresses.
func (g FaultProxies) Addrs() []string {
	out := make([]string, len(g))
	for i, f := range g {
		out[i] = f.Addr()
	}
	return out
}

// ProxiedCluster is a LocalCluster whose CLIENT, ALT, QUERY and REPLICATION listeners are
// reached through fault proxies: Client proxies the CLIENT route (Seeds), Alt the ALT route
// (AltSeeds), Query the QUERY route (QuerySeeds), and Replication the route the nodes reach each
// other by. Replication[i] carries every connection to node i+1 from its peers (their follower
// fetches from it, the transaction markers sent to it), so a toxic there cuts the node off from
// its followers and the markers of the other coordinators, while the node still reaches the
// others, its clients reach it, and the KRaft quorum (CONTROLLER listeners, never proxied) still
// hears it.
type ProxiedCluster struct {
	*LocalCluster
	Client, Alt, Query, Replication FaultProxies
}

// StartProxiedClusterT starts a cluster like StartLocalClusterT with one fault proxy per node in
// front of each of its CLIENT, ALT, QUERY and REPLICATION listeners, which the nodes advertise,
// so that every client seeded with Seeds, AltSeeds or QuerySeeds, and every node reaching a peer,
// stays behind the proxies.
func StartProxiedClusterT(t testing.TB, cfg LocalClusterConfig) *ProxiedCluster {
	t.Helper()
	if cfg.Nodes == 0 {
		cfg.Nodes = ClusterNodes
	}
	pc := &ProxiedCluster{}
	cfg.ClientPorts, cfg.AltPorts, cfg.QueryPorts, cfg.ReplicationPorts = nil, nil, nil, nil
	cfg.ClientAdvertised, cfg.AltAdvertised, cfg.QueryAdvertised, cfg.ReplicationAdvertised = nil, nil, nil, nil
	// Every port, the nodes' and the proxies', is chosen here at once, so that none is handed
	// out twice: four proxied listeners, two direct ones and four proxies per node.
	ports, err := freeLoopbackPorts(10 * cfg.Nodes)
	if err != nil {
		t.Fatal(err)
	}
	cfg.BrokerPorts, cfg.ControllerPorts = ports[4*cfg.Nodes:5*cfg.Nodes], ports[5*cfg.Nodes:6*cfg.Nodes]
	proxyPorts := ports[6*cfg.Nodes:]
	for i := range cfg.Nodes {
		for _, route := range []struct {
			name  string
			ports *[]int
			adv   *[]string
			group *FaultProxies
		}{{"client", &cfg.ClientPorts, &cfg.ClientAdvertised, &pc.Client}, {"alt", &cfg.AltPorts, &cfg.AltAdvertised, &pc.Alt},
			{"query", &cfg.QueryPorts, &cfg.QueryAdvertised, &pc.Query},
			{"replication", &cfg.ReplicationPorts, &cfg.ReplicationAdvertised, &pc.Replication}} {
			port, listen := ports[0], proxyPorts[0]
			ports, proxyPorts = ports[1:], proxyPorts[1:]
			p := StartFaultProxy(t, route.name+"-"+strconv.Itoa(i+1), "127.0.0.1:"+strconv.Itoa(listen), "127.0.0.1:"+strconv.Itoa(port))
			*route.ports = append(*route.ports, port)
			*route.adv = append(*route.adv, p.Addr())
			*route.group = append(*route.group, p)
		}
	}
	pc.LocalCluster = StartLocalClusterT(t, cfg)
	return pc
}
