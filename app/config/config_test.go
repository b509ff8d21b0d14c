package config_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/ckf-stream/ckf-stream/app/config"
	"github.com/ckf-stream/ckf-stream/ckf"
	"github.com/ckf-stream/ckf-stream/schemas"
	"gopkg.in/yaml.v3"
)

// env returns a LookupEnv over m only, so that the test's own environment (KAFKA_BROKERS points
// at the test broker) never leaks into a Load.
func env(m map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

func writeFile(t *testing.T, name, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func mustLoad(t *testing.T, args []string, vars map[string]string) config.Config {
	t.Helper()
	cfg, err := config.Load(config.Sources{Args: args, LookupEnv: env(vars)})
	if err != nil {
		t.Fatalf("Load(%q, %v): %v", args, vars, err)
	}
	return cfg
}

func TestLoadWithNothingIsDefault(t *testing.T) {
	got := mustLoad(t, nil, nil)
	if want := config.Default(); !reflect.DeepEqual(got, want) {
		t.Fatalf("Load() = %+v\nwant Default() = %+v", got, want)
	}
	if err := got.Validate(); err != nil {
		t.Fatalf("defaults do not validate: %v", err)
	}
	if got.HTTP.Listen != "127.0.0.1:8080" || got.ShutdownTimeout != 30*time.Second || len(got.Kafka.Brokers) != 0 ||
		got.Indexer.VerificationWindow != 2 || got.Topics.Lanes != "ckf-lanes" || !got.Kafka.CreateTopics ||
		got.Kafka.TopicReplicationFactor != 0 || got.Kafka.TopicMinInsyncReplicas != 0 {
		t.Fatalf("unexpected defaults: %+v", got)
	}
}

// TestPrecedence sets fields in several layers: file < environment < flags, and a field set only
// in a lower layer keeps that layer's value.
func TestPrecedence(t *testing.T) {
	file := writeFile(t, "c.yaml", `
http:
  listen: 127.0.0.1:1111
log:
  level: debug
indexer:
  verification_window: 3
  query_batch_size: 17
  freshness:
    max_time_lag: 2s
kafka:
  brokers: [file:9092]
topic_prefix: fromfile.
`)
	vars := map[string]string{
		"CKF_HTTP_LISTEN":                     "127.0.0.1:2222",
		"CKF_INDEXER_VERIFICATION_WINDOW":     "4",
		"CKF_INDEXER_QUERY_BATCH_SIZE":        "18",
		"KAFKA_BROKERS":                       "alias:9092, alias2:9092",
		"CKF_KAFKA_TOPIC_REPLICATION_FACTOR":  "3",
		"CKF_KAFKA_TOPIC_MIN_INSYNC_REPLICAS": "2",
		"CKF_KAFKA_QUERY_BROKERS":             "q1:9095,q2:9095",
	}
	args := []string{"--config", file, "--indexer.verification_window=5", "--relay.lane", "7", "--kafka.tls.enabled", "--kafka.tls.enabled=false"}
	cfg := mustLoad(t, args, vars)
	for _, c := range []struct {
		field     string
		got, want any
	}{
		{"log.level (file only)", cfg.Log.Level, "debug"},
		{"indexer.freshness.max_time_lag (file only)", cfg.Indexer.Freshness.MaxTimeLag, 2 * time.Second},
		{"http.listen (env over file)", cfg.HTTP.Listen, "127.0.0.1:2222"},
		{"indexer.query_batch_size (env over file)", cfg.Indexer.QueryBatchSize, 18},
		{"indexer.verification_window (flag over env over file)", cfg.Indexer.VerificationWindow, 5},
		{"relay.lane (flag only)", cfg.Relay.Lane, 7},
		{"kafka.tls.enabled (last flag wins)", cfg.Kafka.TLS.Enabled, false},
		{"kafka.brokers (KAFKA_BROKERS over file)", cfg.Kafka.Brokers, []string{"alias:9092", "alias2:9092"}},
		{"topics.lanes (prefix from file)", cfg.Topics.Lanes, "fromfile.ckf-lanes"},
		{"relay.seed (default)", cfg.Relay.Seed, ckf.DefaultSeed},
		{"kafka.topic_replication_factor (env only)", cfg.Kafka.TopicReplicationFactor, 3},
		{"kafka.topic_min_insync_replicas (env only)", cfg.Kafka.TopicMinInsyncReplicas, 2},
		{"kafka.query_brokers (env only)", cfg.Kafka.QueryBrokers, []string{"q1:9095", "q2:9095"}},
		{"the query path's seeds (kafka.query_brokers)", cfg.Kafka.QuerySeeds(), []string{"q1:9095", "q2:9095"}},
	} {
		if !reflect.DeepEqual(c.got, c.want) {
			t.Errorf("%s = %v, want %v", c.field, c.got, c.want)
		}
	}

	// CKF_KAFKA_BROKERS is the primary name and wins over KAFKA_BROKERS; a flag wins over both.
	vars["CKF_KAFKA_BROKERS"] = "primary:9092"
	if got := mustLoad(t, args, vars).Kafka.Brokers; !reflect.DeepEqual(got, []string{"primary:9092"}) {
		t.Errorf("kafka.brokers with CKF_KAFKA_BROKERS = %v", got)
	}
	if got := mustLoad(t, append(args, "--kafka.brokers=flag:1"), vars).Kafka.Brokers; !reflect.DeepEqual(got, []string{"flag:1"}) {
		t.Errorf("kafka.brokers with a flag = %v", got)
	}
}

func TestConfigFileFromEnvironmentAndFlagOverride(t *testing.T) {
	a := writeFile(t, "a.yaml", "log: {level: warn}\n")
	b := writeFile(t, "b.yaml", "log: {level: error}\n")
	if got := mustLoad(t, nil, map[string]string{"CKF_CONFIG": a}).Log.Level; got != "warn" {
		t.Errorf("CKF_CONFIG file: log.level = %q", got)
	}
	if got := mustLoad(t, []string{"--config=" + b}, map[string]string{"CKF_CONFIG": a}).Log.Level; got != "error" {
		t.Errorf("--config over CKF_CONFIG: log.level = %q", got)
	}
}

func TestJSONFileAndLaneMap(t *testing.T) {
	file := writeFile(t, "c.json", `{
  "indexer": {"lanes": {"0": 26, "3": "0x1f", "15": 7}, "domain": "`+strings.Repeat("ab", 16)+":"+strings.Repeat("0", 32)+`"},
  "relay": {"snapshot_interval": "90s"},
  "kafka": {"sasl": {"mechanism": "scram-sha-512", "username": "u", "password": "p"}, "brokers": ["b:9092"]}
}`)
	cfg := mustLoad(t, []string{"--config", file}, nil)
	if want := (config.LaneMap{0: 26, 3: 0x1f, 15: 7}); !reflect.DeepEqual(cfg.Indexer.Lanes, want) {
		t.Errorf("lanes = %v, want %v", cfg.Indexer.Lanes, want)
	}
	if cfg.Relay.SnapshotInterval != 90*time.Second {
		t.Errorf("relay.snapshot_interval = %v", cfg.Relay.SnapshotInterval)
	}
	if cfg.Kafka.SASL.Mechanism != config.SASLScramSHA512 || cfg.Kafka.SASL.Password.Reveal() != "p" {
		t.Errorf("sasl = %+v (mechanism is normalised to upper case)", cfg.Kafka.SASL)
	}
	// Environment and flag syntax of the lane map.
	got := mustLoad(t, []string{"--indexer.lanes=1=0x2a, 2=43"}, map[string]string{"CKF_INDEXER_LANES": "0=1"}).Indexer.Lanes
	if want := (config.LaneMap{1: 42, 2: 43}); !reflect.DeepEqual(got, want) {
		t.Errorf("flag lanes = %v, want %v", got, want)
	}
	if s := got.String(); s != "1=0x2a,2=0x2b" {
		t.Errorf("LaneMap.String() = %q", s)
	}
}

// TestMarshalRoundTrip prints a configuration and loads the printed YAML back as a file.
func TestMarshalRoundTrip(t *testing.T) {
	cfg := mustLoad(t, []string{"--indexer.lanes=0=0xdeadbeefcafe,5=3", "--relay.publish_max_delay=7ms", "--topics.lanes=my-lanes"}, nil)
	out, err := cfg.Marshal("yaml")
	if err != nil {
		t.Fatal(err)
	}
	back := mustLoad(t, []string{"--config", writeFile(t, "printed.yaml", string(out))}, nil)
	if !reflect.DeepEqual(back, cfg) {
		t.Fatalf("round trip through YAML changed the config:\n%s\nback: %+v", out, back)
	}
	js, err := cfg.Marshal("json")
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := json.Unmarshal(js, &doc); err != nil {
		t.Fatalf("json output does not parse: %v\n%s", err, js)
	}
	if doc["shutdown_timeout"] != "30s" || doc["indexer"].(map[string]any)["lanes"].(map[string]any)["0"] != "0xdeadbeefcafe" {
		t.Errorf("json output: %s", js)
	}
	back = mustLoad(t, []string{"--config", writeFile(t, "printed.json", string(js))}, nil)
	if !reflect.DeepEqual(back, cfg) {
		t.Fatalf("round trip through JSON changed the config:\n%s", js)
	}
	if _, err := cfg.Marshal("toml"); err == nil || !strings.Contains(err.Error(), "format") {
		t.Errorf("Marshal(toml) = %v, want a format error", err)
	}
}

func TestSecretNeverPrints(t *testing.T) {
	const pw = "hunter2-very-secret"
	cfg := mustLoad(t, []string{"--kafka.brokers=b:9092", "--kafka.sasl.mechanism=PLAIN", "--kafka.sasl.username=alice"},
		map[string]string{"CKF_KAFKA_SASL_PASSWORD": pw})
	if cfg.Kafka.SASL.Password.Reveal() != pw {
		t.Fatalf("password not loaded")
	}
	y, _ := cfg.Marshal("yaml")
	j, _ := cfg.Marshal("json")
	raw, _ := json.Marshal(cfg)
	ym, _ := yaml.Marshal(cfg)
	for name, s := range map[string]string{
		"yaml": string(y), "json": string(j), "json.Marshal": string(raw), "yaml.Marshal": string(ym),
		"%v": fmt.Sprintf("%v", cfg), "%+v": fmt.Sprintf("%+v", cfg), "%#v": fmt.Sprintf("%#v", cfg),
		"%s password": fmt.Sprintf("password=%s", cfg.Kafka.SASL.Password),
	} {
		if strings.Contains(s, pw) {
			t.Errorf("%s output contains the password:\n%s", name, s)
		}
		if name != "%s password" && !strings.Contains(s, config.Redacted) {
			t.Errorf("%s output does not show %s", name, config.Redacted)
		}
	}
	if config.Secret("").String() != "" {
		t.Errorf("an empty secret prints %q", config.Secret("").String())
	}
}

// TestInvalidFieldMessages checks that each invalid field is reported by its path, with its
// value, and that every error matches ErrInvalid.
func TestInvalidFieldMessages(t *testing.T) {
	for _, tc := range []struct {
		args []string
		vars map[string]string
		want string
	}{
		{args: []string{"--indexer.verification_window=9"}, want: "config: indexer.verification_window: 9 is not in [1,8]"},
		{args: []string{"--indexer.verification_window=0"}, want: "config: indexer.verification_window: 0 is not in [1,8]"},
		{vars: map[string]string{"KAFKA_BROKERS": "localhost"}, want: `config: kafka.brokers[0]: "localhost" is not host:port`},
		{args: []string{"--kafka.brokers=a:1,b:99999"}, want: `config: kafka.brokers[1]: "b:99999" has a port that is not a number in [0,65535]`},
		{args: []string{"--kafka.brokers=a:1", "--kafka.query_brokers=q:1,q"}, want: `config: kafka.query_brokers[1]: "q" is not host:port`},
		{args: []string{"--kafka.query_brokers=q:1"}, want: "config: kafka.query_brokers: is set, but kafka.brokers is empty and the embedded broker has no second listener"},
		{args: []string{"--kafka.client_id="}, want: "config: kafka.client_id: must not be empty"},
		{args: []string{"--kafka.topic_replication_factor=-1"}, want: "config: kafka.topic_replication_factor: -1 is not in [0,32767]"},
		{args: []string{"--kafka.topic_replication_factor=40000"}, want: "config: kafka.topic_replication_factor: 40000 is not in [0,32767]"},
		{args: []string{"--kafka.topic_min_insync_replicas=-2"}, want: "config: kafka.topic_min_insync_replicas: -2 is negative"},
		{args: []string{"--kafka.topic_replication_factor=2", "--kafka.topic_min_insync_replicas=3"}, want: "config: kafka.topic_min_insync_replicas: 3 is more than kafka.topic_replication_factor (2)"},
		{args: []string{"--kafka.brokers=a:1", "--kafka.tls.ca_file=/x"}, want: "config: kafka.tls.ca_file: is set, but kafka.tls.enabled is false"},
		{args: []string{"--kafka.tls.enabled"}, want: "config: kafka.tls.enabled: is true, but kafka.brokers is empty and the embedded broker serves plaintext only"},
		{args: []string{"--kafka.brokers=a:1", "--kafka.tls.enabled", "--kafka.tls.cert_file=c.pem"}, want: "config: kafka.tls.key_file: is required when kafka.tls.cert_file is set"},
		{args: []string{"--http.tls.key_file=k.pem"}, want: "config: http.tls.cert_file: is required when http.tls.key_file is set"},
		{args: []string{"--http.tls.cert_file=c.pem"}, want: "config: http.tls.key_file: is required when http.tls.cert_file is set"},
		{args: []string{"--http.tls.client_ca_file=ca.pem"}, want: "config: http.tls.client_ca_file: needs HTTPS: set http.tls.cert_file and http.tls.key_file"},
		{args: []string{"--kafka.brokers=a:1", "--kafka.sasl.mechanism=GSSAPI"}, want: `config: kafka.sasl.mechanism: "GSSAPI" is not one of PLAIN, SCRAM-SHA-256, SCRAM-SHA-512`},
		{args: []string{"--kafka.brokers=a:1", "--kafka.sasl.mechanism=PLAIN", "--kafka.sasl.password=x"}, want: "config: kafka.sasl.username: is required when kafka.sasl.mechanism is set"},
		{args: []string{"--kafka.brokers=a:1", "--kafka.sasl.mechanism=SCRAM-SHA-256", "--kafka.sasl.username=u"}, want: "config: kafka.sasl.password: is required when kafka.sasl.mechanism is set"},
		{args: []string{"--kafka.brokers=a:1", "--kafka.sasl.username=u"}, want: "config: kafka.sasl.mechanism: is required when kafka.sasl.username is set"},
		{args: []string{"--kafka.sasl.mechanism=PLAIN", "--kafka.sasl.username=u", "--kafka.sasl.password=p"}, want: "config: kafka.sasl.mechanism: is set, but kafka.brokers is empty and the embedded broker does not authenticate"},
		{vars: map[string]string{"CKF_TOPIC_PREFIX": "a b"}, want: `config: topic_prefix: "a b" holds characters`},
		{args: []string{"--topics.lanes=ckf-queries"}, want: `config: topics.queries: "ckf-queries" is also the name of topics.lanes`},
		{args: []string{"--topics.control=bad/name"}, want: `config: topics.control: "bad/name" holds characters`},
		{args: []string{"--http.listen=8080"}, want: `config: http.listen: "8080" is not host:port`},
		{args: []string{"--log.level=verbose"}, want: `config: log.level: "verbose" is not one of debug, info, warn, error`},
		{args: []string{"--log.format=xml"}, want: `config: log.format: "xml" is not one of json, console`},
		{args: []string{"--metrics.report_interval=0s"}, want: "config: metrics.report_interval: 0s is not positive"},
		{args: []string{"--indexer.domain=abc"}, want: `config: indexer.domain: "abc" is not <32 hex digits>:<32 hex digits>`},
		{args: []string{"--indexer.domain_source=guessed"}, want: `config: indexer.domain_source: "guessed" is not one of explicit, default_derived`},
		{args: []string{"--indexer.lanes=64=1"}, want: "config: indexer.lanes: lane 64 is not in [0,63]"},
		{args: []string{"--indexer.lanes=1=5,4=5"}, want: "config: indexer.lanes: DC 0x5 is on lanes 1 and 4; a DC publishes on one lane"},
		{args: []string{"--indexer.bucket_count=1000"}, want: "config: indexer.bucket_count: 1000 is not 0 or a power of two in [2,16777216]"},
		{args: []string{"--indexer.expected_blocks_per_dc=0"}, want: "config: indexer.expected_blocks_per_dc: must be positive when indexer.bucket_count is 0"},
		{args: []string{"--indexer.expected_blocks_per_dc=100000000"}, want: "config: indexer.expected_blocks_per_dc: 100000000 needs more than 16777216 buckets"},
		{args: []string{"--indexer.freshness.max_record_lag=-1"}, want: "config: indexer.freshness.max_record_lag: must not be negative, got -1"},
		{args: []string{"--indexer.freshness.max_time_lag=-1s"}, want: "config: indexer.freshness.max_time_lag: must not be negative, got -1s"},
		{args: []string{"--indexer.query_group="}, want: "config: indexer.query_group: must not be empty"},
		{args: []string{"--indexer.query_batch_size=0"}, want: "config: indexer.query_batch_size: must be in [1, 65536], got 0"},
		{args: []string{"--indexer.reply_topic_prefixes=router.,ckf-"}, want: `config: indexer.reply_topic_prefixes: "ckf-" would let a query reply into topics.lanes ("ckf-lanes")`},
		{args: []string{"--indexer.reply_topic_prefixes=router/"}, want: `config: indexer.reply_topic_prefixes: "router/" holds characters`},
		{args: []string{"--topic_prefix=prod.", "--indexer.reply_topic_prefixes=prod.ckf-c"}, want: `would let a query reply into topics.control ("prod.ckf-control")`},
		{args: []string{"--indexer.reply_topic_prefixes=ckf-worker-query-r"}, want: `config: indexer.reply_topic_prefixes: "ckf-worker-query-r" would let a query reply into topics.worker_query_replies ("ckf-worker-query-replies")`},
		{args: []string{"--workers.reply_topic_prefixes=router.,ckf-query-"}, want: `config: workers.reply_topic_prefixes: "ckf-query-" would let a query reply into topics.query_replies ("ckf-query-replies")`},
		{args: []string{"--workers.reply_topic_prefixes=ckf-worker-q"}, want: `config: workers.reply_topic_prefixes: "ckf-worker-q" would let a query reply into topics.worker_queries ("ckf-worker-queries")`},
		{args: []string{"--topics.worker_queries=ckf-queries"}, want: `config: topics.worker_queries: "ckf-queries" is also the name of topics.queries`},
		{args: []string{"--indexer.gc_percent=-1"}, want: "config: indexer.gc_percent: -1 is not in [0,10000]"},
		{args: []string{"--indexer.gc_percent=10001"}, want: "config: indexer.gc_percent: 10001 is not in [0,10000]"},
		{args: []string{"--indexer.lag_commit_interval=0s"}, want: "config: indexer.lag_commit_interval: must be > 0, got 0s"},
		{args: []string{"--relay.lane=-1"}, want: "config: relay.lane: -1 is not in [0,63]"},
		{args: []string{"--relay.expected_blocks=0"}, want: "config: relay.expected_blocks: must be positive"},
		{args: []string{"--relay.snapshot_interval=0s", "--relay.snapshot_every_deltas=0", "--relay.snapshot_delta_ratio=0"}, want: "config: relay.snapshot_interval: is 0 and so are relay.snapshot_every_deltas and relay.snapshot_delta_ratio"},
		{args: []string{"--relay.snapshot_delta_ratio=-1"}, want: "config: relay.snapshot_delta_ratio: -1 is negative"},
		{args: []string{"--relay.snapshot_idle_interval=-1s"}, want: "config: relay.snapshot_idle_interval: -1s is negative"},
		{args: []string{"--relay.snapshot_idle_interval=30s"}, want: "config: relay.snapshot_idle_interval: 30s is shorter than relay.snapshot_interval (1m0s)"},
		{args: []string{"--relay.heartbeat_interval=0s"}, want: "config: relay.heartbeat_interval: 0s is not positive"},
		{args: []string{"--relay.publish_every_events=0"}, want: "config: relay.publish_every_events: must be positive"},
		{args: []string{"--relay.publish_max_delay=-1ms"}, want: "config: relay.publish_max_delay: -1ms is negative"},
		{args: []string{"--shutdown_timeout=0s"}, want: "config: shutdown_timeout: 0s is not positive"},
		{args: []string{"--startup_timeout=-5s"}, want: "config: startup_timeout: -5s is not positive"},
		// Values that do not parse name the field and where the value came from.
		{vars: map[string]string{"CKF_INDEXER_VERIFICATION_WINDOW": "nine"}, want: `config: indexer.verification_window: CKF_INDEXER_VERIFICATION_WINDOW="nine": not an integer`},
		{vars: map[string]string{"CKF_SHUTDOWN_TIMEOUT": "30"}, want: `config: shutdown_timeout: CKF_SHUTDOWN_TIMEOUT="30": not a duration`},
		{vars: map[string]string{"CKF_KAFKA_TLS_ENABLED": "yes"}, want: `config: kafka.tls.enabled: CKF_KAFKA_TLS_ENABLED="yes": not a boolean`},
		{vars: map[string]string{"CKF_INDEXER_LANES": "3:4"}, want: `config: indexer.lanes: CKF_INDEXER_LANES="3:4": "3:4" is not lane=dc`},
	} {
		_, err := config.Load(config.Sources{Args: tc.args, LookupEnv: env(tc.vars)})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Load(%q, %v) = %v\nwant an error containing %q", tc.args, tc.vars, err, tc.want)
			continue
		}
		if !errors.Is(err, config.ErrInvalid) {
			t.Errorf("Load(%q, %v): %v does not match ErrInvalid", tc.args, tc.vars, err)
		}
		var fe *config.FieldError
		if !errors.As(err, &fe) {
			t.Errorf("Load(%q, %v): %v holds no *FieldError", tc.args, tc.vars, err)
		}
	}
}

// TestReplyTopicPrefixes: the allow-list is read from flags and the environment as a
// comma-separated list, and an empty entry from a file is refused.
func TestReplyTopicPrefixes(t *testing.T) {
	cfg := mustLoad(t, nil, map[string]string{"CKF_INDEXER_REPLY_TOPIC_PREFIXES": "router-a., router-b.", "CKF_WORKERS_REPLY_TOPIC_PREFIXES": "router-w."})
	if got := cfg.Indexer.ReplyTopicPrefixes; !reflect.DeepEqual(got, []string{"router-a.", "router-b."}) {
		t.Fatalf("from the environment: %q", got)
	}
	if got := cfg.Workers.ReplyTopicPrefixes; !reflect.DeepEqual(got, []string{"router-w."}) {
		t.Fatalf("workers, from the environment: %q", got)
	}
	if got := config.Default().Indexer.ReplyTopicPrefixes; len(got) != 0 {
		t.Fatalf("default %q, want none", got)
	}
	file := filepath.Join(t.TempDir(), "c.yaml")
	if err := os.WriteFile(file, []byte("indexer:\n  reply_topic_prefixes: [\"r.\", \"\"]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := config.Load(config.Sources{Args: []string{"--config", file}, LookupEnv: env(nil)})
	if want := "config: indexer.reply_topic_prefixes: entry 1 is empty, which would allow every topic"; err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("empty entry: %v, want %q", err, want)
	}
}

func TestEveryInvalidFieldIsReported(t *testing.T) {
	_, err := config.Load(config.Sources{Args: []string{"--indexer.verification_window=9", "--relay.lane=64", "--log.level=x"}, LookupEnv: env(nil)})
	for _, want := range []string{"indexer.verification_window", "relay.lane", "log.level"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error %v does not name %s", err, want)
		}
	}
}

func TestFileErrors(t *testing.T) {
	for _, tc := range []struct{ body, want string }{
		{"indexer:\n  verification_windw: 3\n", `line 2: unknown key "verification_windw" in indexer`},
		{"indexer: {verification_window: many}\n", "cannot unmarshal"},
		{"indexer:\n  lanes: {x: 1}\n", `lane "x" is not an integer`},
		{"kafka: [", "yaml:"},
	} {
		p := writeFile(t, "bad.yaml", tc.body)
		_, err := config.Load(config.Sources{Args: []string{"--config", p}, LookupEnv: env(nil)})
		if err == nil || !strings.Contains(err.Error(), "config: file "+p+": ") || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("file %q: %v, want an error naming the file and containing %q", tc.body, err, tc.want)
		}
	}
	_, err := config.Load(config.Sources{Args: []string{"--config", "/does/not/exist.yaml"}, LookupEnv: env(nil)})
	if !errors.Is(err, os.ErrNotExist) || !errors.Is(err, config.ErrInvalid) {
		t.Errorf("missing file: %v", err)
	}
	// An empty file is a file that sets nothing.
	if cfg := mustLoad(t, []string{"--config", writeFile(t, "empty.yaml", "")}, nil); !reflect.DeepEqual(cfg, config.Default()) {
		t.Errorf("empty file changed the config")
	}
}

func TestTopicOverridesAndPrefix(t *testing.T) {
	cfg := mustLoad(t, []string{"--topics.lanes=prod.lanes.v2"}, map[string]string{"CKF_TOPIC_PREFIX": "p."})
	want := config.DefaultTopics("p.")
	want.Lanes = "prod.lanes.v2"
	if cfg.Topics != want {
		t.Errorf("topics = %+v, want %+v", cfg.Topics, want)
	}
}

// TestTopicsAreTheContracts: the default topic names are the Avro contract's
// (schemas.RecordType.DefaultTopic) with the prefix, and Topics has one field per record type,
// no more and no fewer, besides the relays' checkpoint topic.
func TestTopicsAreTheContracts(t *testing.T) {
	d := config.DefaultTopics("p.")
	seen := map[string]schemas.RecordType{}
	for _, rt := range schemas.RecordTypes() {
		got := d.Of(rt)
		if got != "p."+rt.DefaultTopic() {
			t.Errorf("%s: default topic %q, the contract's is %q", rt, got, rt.DefaultTopic())
		}
		if other, dup := seen[got]; dup {
			t.Errorf("%s and %s share the topic %q", rt, other, got)
		}
		seen[got] = rt
	}
	if d.RelayCheckpoints != "p."+config.DefaultRelayCheckpointsTopic {
		t.Errorf("relay checkpoint topic %q", d.RelayCheckpoints)
	}
	v := reflect.ValueOf(d)
	for i := 0; i < v.NumField(); i++ {
		if v.Type().Field(i).Name == "RelayCheckpoints" { // the relays' own state store, no contract type
			continue
		}
		if _, ok := seen[v.Field(i).String()]; !ok {
			t.Errorf("Topics.%s (%q) carries no record type of the contract", v.Type().Field(i).Name, v.Field(i).String())
		}
	}
	if got := d.Of(schemas.RecordType(0)); got != "" {
		t.Errorf("Of(an invalid record type) = %q", got)
	}
	// The dead-letter topic keeps the name deployments, docs/design.md and the README use.
	if got := config.Default().Topics.DeadLetter; got != "ckf-dead-letter" {
		t.Errorf("default dead-letter topic %q", got)
	}
}

func TestFlagErrors(t *testing.T) {
	_, err := config.Load(config.Sources{Args: []string{"--no-such-setting=1"}, LookupEnv: env(nil)})
	if err == nil || !strings.Contains(err.Error(), "no-such-setting") {
		t.Errorf("unknown flag: %v", err)
	}
	_, err = config.Load(config.Sources{Args: []string{"--relay.lane=x"}, LookupEnv: env(nil)})
	if err == nil || !strings.Contains(err.Error(), "relay.lane") || !strings.Contains(err.Error(), "not an integer") {
		t.Errorf("bad flag value: %v", err)
	}
	_, err = config.Load(config.Sources{Args: []string{"extra"}, LookupEnv: env(nil)})
	if err == nil || !strings.Contains(err.Error(), `unexpected argument "extra"`) {
		t.Errorf("positional argument: %v", err)
	}
}

func TestEffectiveBucketCount(t *testing.T) {
	for _, tc := range []struct {
		ix   config.Indexer
		want uint64
	}{
		{config.Indexer{ExpectedBlocksPerDC: 1}, 2},
		{config.Indexer{ExpectedBlocksPerDC: 32}, 16},
		{config.Indexer{ExpectedBlocksPerDC: 2048}, 1024},
		{config.Indexer{ExpectedBlocksPerDC: 1 << 20}, 1 << 19},
		{config.Indexer{ExpectedBlocksPerDC: 1 << 20, BucketCount: 64}, 64},
	} {
		if got := tc.ix.EffectiveBucketCount(); got != tc.want {
			t.Errorf("%+v: %d, want %d", tc.ix, got, tc.want)
		}
	}
}

// TestCKFFactsAreCKFs: the configuration's CKF defaults and limits are ckf's own (the lane count,
// the wire bucket cap, the verification window's range and default, the seed, the derived bucket
// count), so the configuration accepts exactly what ckf accepts at each boundary.
func TestCKFFactsAreCKFs(t *testing.T) {
	def := config.Default()
	if def.Indexer.Seed != ckf.DefaultSeed || def.Relay.Seed != ckf.DefaultSeed {
		t.Errorf("default seeds %#x, %#x; ckf.DefaultSeed is %#x", def.Indexer.Seed, def.Relay.Seed, uint64(ckf.DefaultSeed))
	}
	if def.Indexer.VerificationWindow != ckf.DefaultVerificationWindow {
		t.Errorf("default verification window %d; ckf's is %d", def.Indexer.VerificationWindow, ckf.DefaultVerificationWindow)
	}
	valid := func(args ...string) error {
		_, err := config.Load(config.Sources{Args: args, LookupEnv: env(nil)})
		return err
	}
	for _, tc := range []struct {
		field     string
		ok, notOK string
	}{
		{"indexer.bucket_count", fmt.Sprint(uint64(ckf.MaxWireBucketCount)), fmt.Sprint(uint64(ckf.MaxWireBucketCount) * 2)},
		// The largest n whose bucket count is the cap, and the next one.
		{"indexer.expected_blocks_per_dc", fmt.Sprint(uint64(ckf.MaxWireBucketCount) * 16 / 5), fmt.Sprint(uint64(ckf.MaxWireBucketCount)*16/5 + 1)},
		{"relay.expected_blocks", fmt.Sprint(uint64(ckf.MaxWireBucketCount) * 16 / 5), fmt.Sprint(uint64(ckf.MaxWireBucketCount)*16/5 + 1)},
		{"indexer.verification_window", fmt.Sprint(ckf.MaxVerificationWindow), fmt.Sprint(ckf.MaxVerificationWindow + 1)},
		{"relay.lane", fmt.Sprint(ckf.MaxLanes - 1), fmt.Sprint(ckf.MaxLanes)},
		{"indexer.lanes", fmt.Sprintf("%d=7", ckf.MaxLanes-1), fmt.Sprintf("%d=7", ckf.MaxLanes)},
	} {
		if err := valid("--" + tc.field + "=" + tc.ok); err != nil {
			t.Errorf("%s=%s refused: %v", tc.field, tc.ok, err)
		}
		if err := valid("--" + tc.field + "=" + tc.notOK); !errors.Is(err, config.ErrInvalid) || !strings.Contains(err.Error(), tc.field) {
			t.Errorf("%s=%s: %v, want an error naming the field", tc.field, tc.notOK, err)
		}
	}
	for _, n := range []uint64{1, 5, 32, 1000, 1 << 20, uint64(ckf.MaxWireBucketCount) * 16 / 5, ^uint64(0)} {
		want, err := ckf.BucketCountFor(n)
		if err != nil {
			want = 0
		}
		if got := (config.Indexer{ExpectedBlocksPerDC: n}).EffectiveBucketCount(); got != want {
			t.Errorf("EffectiveBucketCount(%d) = %d; ckf.BucketCountFor gives %d (%v)", n, got, want, err)
		}
	}
}

// TestDomainID: the indexer domain is read by ckf's parser with the configured source, and its
// errors name the field and wrap ckf's.
func TestDomainID(t *testing.T) {
	const domain = "c5000000000000000000000000000000:5c000000000000000000000000000000"
	want, err := ckf.ParseIndexerDomainID(domain, ckf.IdentityDefaultDerived)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := (config.Indexer{Domain: domain, DomainSource: "default_derived"}).DomainID(); err != nil || got != want {
		t.Errorf("DomainID() = %v, %v; want %v", got, err, want)
	}
	var fe *config.FieldError
	_, err = config.Indexer{Domain: "c5:5c", DomainSource: "explicit"}.DomainID()
	if !errors.As(err, &fe) || fe.Field != "indexer.domain" || !errors.Is(err, ckf.ErrInvalidIndexerDomain) || !errors.Is(err, config.ErrInvalid) {
		t.Errorf("short domain: %v", err)
	}
	_, err = config.Indexer{Domain: domain, DomainSource: "guessed"}.DomainID()
	if !errors.As(err, &fe) || fe.Field != "indexer.domain_source" {
		t.Errorf("unknown source: %v", err)
	}
	// Validation reports both fields when both are wrong.
	_, err = config.Load(config.Sources{Args: []string{"--indexer.domain=abc", "--indexer.domain_source=guessed"}, LookupEnv: env(nil)})
	if err == nil || !strings.Contains(err.Error(), "indexer.domain:") || !strings.Contains(err.Error(), "indexer.domain_source:") {
		t.Errorf("both wrong: %v", err)
	}
}

func TestFieldsListsEveryVariable(t *testing.T) {
	seen := map[string]bool{}
	for _, f := range config.Fields() {
		seen[f.Path] = true
		if len(f.Env) == 0 || !strings.HasPrefix(f.Env[len(f.Env)-1], "CKF_") {
			t.Errorf("%s: variables %v", f.Path, f.Env)
		}
	}
	for _, p := range []string{"kafka.brokers", "kafka.sasl.password", "topics.dead_letter", "indexer.freshness.max_time_lag", "relay.publish_max_delay", "shutdown_timeout"} {
		if !seen[p] {
			t.Errorf("Fields() lacks %s", p)
		}
	}
}

// TestEveryFieldIsDescribed keeps processor help config complete: every setting has a one-line
// description and the commands that use it, and no description outlives its setting.
func TestEveryFieldIsDescribed(t *testing.T) {
	known := map[string]int{}
	for i, c := range config.Commands {
		known[c] = i
	}
	paths := map[string]bool{}
	for _, f := range config.Fields() {
		paths[f.Path] = true
		switch {
		case f.Description == "":
			t.Errorf("%s has no description: add one to the table in app/config/describe.go", f.Path)
		case strings.ContainsAny(f.Description, "\n\t") || strings.HasSuffix(f.Description, "."):
			t.Errorf("%s: description %q is not one line without a final period", f.Path, f.Description)
		}
		if len(f.UsedBy) == 0 {
			t.Errorf("%s names no command that uses it (app/config/describe.go)", f.Path)
		}
		last := -1
		for _, c := range f.UsedBy {
			i, ok := known[c]
			if !ok {
				t.Errorf("%s: %q is not one of the commands %v", f.Path, c, config.Commands)
				continue
			}
			if i <= last {
				t.Errorf("%s: commands %v are not in the order of %v, or repeat one", f.Path, f.UsedBy, config.Commands)
			}
			last = i
		}
	}
	for _, p := range config.DescribedPaths() {
		if !paths[p] {
			t.Errorf("describe.go describes %q, which is not a setting", p)
		}
	}
}
