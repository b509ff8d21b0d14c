//go:build race

package index

// probeTestScale divides the iteration counts of the wide-kernel tests
// under the race detector, which runs the portable path (the assembly is
// tested without it, make test-norace) about 20 times slower.
const probeTestScale = 10
