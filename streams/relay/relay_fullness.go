package relay

// A filter that fills up omits the blocks it cannot place (capacity omissions): the DC still
// holds them, answers on its lane come out short, and the relay counts it only once it happens.
// fullness warns ahead of it, in the log, when the filter's occupancy crosses each of
// fullnessLevels upward, once per level, and says so again when it falls back below
// fullnessClear.
var fullnessLevels = [...]float64{0.90, 0.95, 0.99}

// fullnessClear is the occupancy below which every level may warn again.
const fullnessClear = 0.85

// fullness is the occupancy warning's state: how many levels have warned since the filter was
// last below fullnessClear. Owned by the relay's loop.
type fullness struct {
	warned int
}

// observe takes the occupancy now and returns the level it crossed upward since the last
// warning (0 when none: at most one, the highest, per call) and whether it fell below
// fullnessClear after a warning (cleared).
func (f *fullness) observe(occupancy float64) (crossed float64, cleared bool) {
	if occupancy < fullnessClear {
		cleared = f.warned > 0
		f.warned = 0
		return 0, cleared
	}
	for f.warned < len(fullnessLevels) && occupancy >= fullnessLevels[f.warned] {
		crossed = fullnessLevels[f.warned]
		f.warned++
	}
	return crossed, false
}
