package relay

import "testing"

// TestFullnessWarnsAtEachLevelOnce: the occupancy warning crosses 90, 95 and 99 % once each on
// the way up (a jump warns at the highest level crossed), says nothing while the filter stays
// put or falls back above 85 %, and warns again after it fell below 85 %.
func TestFullnessWarnsAtEachLevelOnce(t *testing.T) {
	var f fullness
	for i, c := range []struct {
		occupancy float64
		crossed   float64
		cleared   bool
	}{
		{0.50, 0, false}, {0.90, 0.90, false}, {0.93, 0, false}, {0.998, 0.99, false}, {0.999, 0, false},
		{0.88, 0, false}, {0.96, 0, false}, {0.80, 0, true}, {0.80, 0, false}, {0.95, 0.95, false}, {0.91, 0, false},
	} {
		crossed, cleared := f.observe(c.occupancy)
		if crossed != c.crossed || cleared != c.cleared {
			t.Errorf("step %d, occupancy %v: crossed %v, cleared %v; want %v, %v", i, c.occupancy, crossed, cleared, c.crossed, c.cleared)
		}
	}
}
