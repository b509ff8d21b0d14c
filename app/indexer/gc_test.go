package indexer

import (
	"runtime/debug"
	"testing"

	"go.uber.org/zap"
)

func TestApplyGCPercent(t *testing.T) {
	restore := debug.SetGCPercent(100)
	defer debug.SetGCPercent(restore)
	noEnv := func(string) (string, bool) { return "", false }
	cases := []struct {
		name   string
		config int
		env    func(string) (string, bool)
		want   int
	}{
		{"configured", 250, noEnv, 250},
		{"zero keeps the runtime's", 0, noEnv, 100},
		{"GOGC in the environment wins", 250, func(k string) (string, bool) { return "50", k == "GOGC" }, 100},
	}
	for _, c := range cases {
		debug.SetGCPercent(100)
		ix := &Indexer{log: zap.NewNop(), gcPercent: c.config}
		ix.applyGCPercent(c.env)
		if got := debug.SetGCPercent(100); got != c.want {
			t.Errorf("%s: GC percent %d, want %d", c.name, got, c.want)
		}
	}
}
