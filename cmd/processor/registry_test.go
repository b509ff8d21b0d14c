package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ckf-stream/ckf-stream/schemas"
	"github.com/ckf-stream/ckf-stream/testenv"
)

// putJSON sends body as JSON to the registry's Confluent API and fails t unless it answers 200.
func putJSON(t *testing.T, method, path string, body any) {
	t.Helper()
	b, err := json.Marshal(body)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, testenv.Registry(t)+path, bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/vnd.schemaregistry.v1+json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("%s %s: %s", method, path, resp.Status)
	}
}

// TestRelayStopsOnAnIncompatibleSchema: processor relay, pointed at a registry (the real Apicurio
// Registry) whose lane-event subject holds, under BACKWARD compatibility, a version the
// contract's schema cannot read, stops before it starts with exit status 1 and prints the
// subject, the registry, the compatibility level and the registry's reason.
func TestRelayStopsOnAnIncompatibleSchema(t *testing.T) {
	registry := testenv.Registry(t)
	prefix := testenv.UniqueName(t, "sr") + "."
	subject := prefix + schemas.TypeLaneEvent.DefaultTopic() + "-value"
	putJSON(t, http.MethodPut, "/config/"+url.PathEscape(subject), map[string]string{"compatibility": "BACKWARD"})
	var top map[string]any
	if err := json.Unmarshal([]byte(schemas.TypeLaneEvent.Schema()), &top); err != nil {
		t.Fatal(err)
	}
	top["fields"] = slices.DeleteFunc(top["fields"].([]any), func(f any) bool { return f.(map[string]any)["name"] == "consumer_instance" })
	previous, err := json.Marshal(top)
	if err != nil {
		t.Fatal(err)
	}
	putJSON(t, http.MethodPost, "/subjects/"+url.PathEscape(subject)+"/versions", map[string]string{"schema": string(previous)})

	vars := map[string]string{
		"KAFKA_BROKERS":            strings.Join(testenv.Brokers(t), ","),
		"CKF_SCHEMA_REGISTRY_URLS": registry,
	}
	code, _, errOut := runCmd(t, vars, "relay", "--topic_prefix="+prefix, "--http.listen=127.0.0.1:0",
		"--indexer.domain="+testDomain, "--indexer.lanes=0=0x10", "--relay.dc_id=0x10", "--relay.lane=0")
	if code != exitFailure {
		t.Fatalf("relay: exit %d, want %d; stderr:\n%s", code, exitFailure, errOut)
	}
	for _, want := range []string{`registering subject "` + subject + `" at ` + registry,
		"refused as incompatible with the versions already registered under BACKWARD compatibility", "consumer_instance"} {
		if !strings.Contains(errOut, want) {
			t.Errorf("stderr lacks %q:\n%s", want, errOut)
		}
	}
}
