package main

import (
	"strings"
	"testing"
)

// TestRelayCommandConfigErrors: processor relay refuses, with exit status 2 and the field's
// name, a configuration without its pool's domain and a lane the lane map gives to another DC.
func TestRelayCommandConfigErrors(t *testing.T) {
	code, _, errOut := runCmd(t, nil, "relay", "--relay.dc_id=7")
	if code != exitUsage || !strings.Contains(errOut, "indexer.domain") {
		t.Errorf("relay without a domain: exit %d, %q", code, errOut)
	}
	code, _, errOut = runCmd(t, nil, "relay", "--relay.dc_id=7", "--relay.lane=1",
		"--indexer.domain=c5c5c5c5c5c5c5c5c5c5c5c5c5c5c5c5:5c5c5c5c5c5c5c5c5c5c5c5c5c5c5c5c", "--indexer.lanes=1=8,2=7")
	if code != exitUsage || !strings.Contains(errOut, "relay.lane") {
		t.Errorf("relay on a lane of another DC: exit %d, %q", code, errOut)
	}
}

// TestBridgeCommandConfigErrors: processor bridge refuses, with exit status 2 and the field's
// name, a configuration without the engine's endpoint, a malformed LoRA map, and no kafka.brokers.
func TestBridgeCommandConfigErrors(t *testing.T) {
	code, _, errOut := runCmd(t, nil, "bridge", "--bridge.worker_id=3")
	if code != exitUsage || !strings.Contains(errOut, "bridge.endpoint") {
		t.Errorf("bridge without an endpoint: exit %d, %q", code, errOut)
	}
	code, _, errOut = runCmd(t, nil, "bridge", "--bridge.endpoint=tcp://e:5557", "--bridge.lora_names=x")
	if code != exitUsage || !strings.Contains(errOut, "bridge.lora_names") {
		t.Errorf("bridge with a bad LoRA map: exit %d, %q", code, errOut)
	}
	// A bridge on a private embedded broker would write where no relay reads.
	code, _, errOut = runCmd(t, nil, "bridge", "--bridge.endpoint=tcp://e:5557")
	if code != exitUsage || !strings.Contains(errOut, "kafka.brokers: is required by bridge") {
		t.Errorf("bridge without kafka.brokers: exit %d, %q", code, errOut)
	}
}
