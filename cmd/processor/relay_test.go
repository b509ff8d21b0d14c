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
