package eval

// Simulate replays reqs on a fleet of cfg placing requests with p, entirely in simulated time,
// with the warm start's shared prefix taken from reqs (SharedPrefix at WarmShare).
func Simulate(reqs []Request, cfg Config, p Policy) (*Result, error) {
	f, err := NewFleet(cfg, p)
	if err != nil {
		return nil, err
	}
	return f.Run(reqs, SharedPrefix(reqs, WarmShare), Hooks{})
}

// WarmShare is the share of requests a prefix must start to be preloaded by a warm start.
const WarmShare = 0.1
