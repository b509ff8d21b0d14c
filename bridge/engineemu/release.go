package engineemu

import (
	"fmt"
	"strings"
)

// Release is an engine release line whose KV-event wire format the emulator speaks: the payload
// shape, the hashes, the replay framing and the CPU tier's medium. Each was read from the
// engine's own publisher (vllm/distributed/kv_events.py, sglang/srt/disaggregation/kv_events.py)
// in the released wheels named in Versions; bridge/README.md tables them.
type Release struct {
	// Name is what the emulators' command lines and Releases use ("vllm-0.26", "sglang", ...).
	Name string
	// Versions are the releases the line covers.
	Versions string
	Wire     Wire
	Hashes   HashFormat
	// ReplayTopicFrame: replay replies carry the topic frame (vLLM 0.26.0 and later, SGLang
	// 0.5.22 and later).
	ReplayTopicFrame bool
	// CPUMedium is the medium the release writes for its CPU tier.
	CPUMedium string
}

// Releases lists the release lines, oldest first. The live framing, [topic, sequence,
// payload], and the replay request, ["", start sequence], are the same in all of them.
var Releases = []Release{
	{Name: "vllm-0.9", Versions: "vLLM 0.9.0, 0.9.0.1", Wire: WireArray5, Hashes: HashSigned, CPUMedium: "CPU"},
	{Name: "vllm-0.11", Versions: "vLLM 0.10.2 to 0.13.0", Wire: WireArray6, Hashes: HashInt, CPUMedium: "CPU"},
	{Name: "vllm-0.15", Versions: "vLLM 0.14.1 to 0.16.0", Wire: WireArray7, Hashes: HashInt, CPUMedium: "CPU"},
	{Name: "vllm-0.22", Versions: "vLLM 0.22.0 to 0.23.0", Wire: WireArray, Hashes: HashInt, CPUMedium: "CPU"},
	{Name: "vllm-0.24", Versions: "vLLM 0.24.0 to 0.25.1", Wire: WireMapEvents, Hashes: HashBytes, CPUMedium: "CPU"},
	{Name: "vllm-0.26", Versions: "vLLM 0.26.0 to 0.34.0", Wire: WireMapEvents, Hashes: HashInt, ReplayTopicFrame: true, CPUMedium: "CPU"},
	{Name: "sglang-0.5.17", Versions: "SGLang 0.5.9 to 0.5.17", Wire: WireArray6, Hashes: HashSigned, CPUMedium: "CPU_PINNED"},
	{Name: "sglang", Versions: "SGLang 0.5.22 to 0.5.23", Wire: WireMapEvents, Hashes: HashSigned, ReplayTopicFrame: true, CPUMedium: "CPU_PINNED"},
}

// ReleaseNamed returns the release line called name.
func ReleaseNamed(name string) (Release, error) {
	names := make([]string, len(Releases))
	for i, r := range Releases {
		if r.Name == name {
			return r, nil
		}
		names[i] = r.Name
	}
	return Release{}, fmt.Errorf("%w: release %q (want one of %s)", ErrInvalidConfig, name, strings.Join(names, ", "))
}

// Opts returns the options that make the emulator speak r; options given after them override.
func (r Release) Opts() []Opt {
	return []Opt{Shape(r.Wire), Hashes(r.Hashes), ReplayTopicFrame(r.ReplayTopicFrame), CPUMedium(r.CPUMedium)}
}
