package bridge

import "testing"

func TestRankEndpoint(t *testing.T) {
	for _, c := range []struct {
		ep   string
		rank int
		want string
	}{
		{"tcp://engine:5557", 0, "tcp://engine:5557"},
		{"tcp://engine:5557", 3, "tcp://engine:5560"},
		{"tcp://*:5557", 1, "tcp://*:5558"},
		{"tcp://[::1]:5557", 2, "tcp://[::1]:5559"},
		{"ipc:///tmp/kv", 1, "ipc:///tmp/kv_dp1"},
		{"", 4, ""},
	} {
		got, err := RankEndpoint(c.ep, c.rank)
		if err != nil || got != c.want {
			t.Errorf("RankEndpoint(%q, %d) = %q, %v; want %q", c.ep, c.rank, got, err, c.want)
		}
	}
	for _, bad := range []string{"tcp://engine", "tcp://engine:port", "udp://e:1"} {
		if _, err := RankEndpoint(bad, 1); err == nil {
			t.Errorf("RankEndpoint(%q, 1) accepted", bad)
		}
	}
	if got := listenAddr("tcp://*:5557"); got != "tcp://0.0.0.0:5557" {
		t.Errorf("listenAddr = %q", got)
	}
}
