//go:build race

package peer

// raceEnabled reports a -race build, whose instrumentation makes the 2^20
// steady-state fill (3.8 M stores) take about 20 s.
const raceEnabled = true
