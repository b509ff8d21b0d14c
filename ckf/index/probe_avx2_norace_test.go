//go:build !race

package index

// probeTestScale divides the iteration counts of the wide-kernel tests
// (see probe_avx2_race_test.go).
const probeTestScale = 1
