// Package config is ckf-stream's process configuration: one Config covering Kafka, topics, HTTP,
// logging, metrics, the indexer, the relay and the process lifecycle.
//
// Load builds it in layers, each overriding the one before:
//
//  1. the defaults documented on each field;
//  2. an optional YAML or JSON file (--config PATH, or CKF_CONFIG); unknown keys are errors,
//     each reported with its line; a list may also be written as one comma-separated string;
//  3. environment variables: CKF_ plus the field's path in upper case with dots as underscores
//     (indexer.verification_window is CKF_INDEXER_VERIFICATION_WINDOW), and KAFKA_BROKERS as a
//     second name for kafka.brokers (CKF_KAFKA_BROKERS wins when both are set);
//  4. command-line flags named by the field's path (--indexer.verification_window=4).
//
// A CKF_ variable that no setting reads is reported as a warning (Sources.Warn) with the closest
// setting's variable. Lists are comma-separated in variables and flags (KAFKA_BROKERS=a:9092,b:9092), and the lane
// map is lane=dc pairs (CKF_INDEXER_LANES=0=0x1a,1=0x2b). Durations use Go's syntax (250ms, 30s).
//
// The result is validated as a whole; every invalid field is reported as a *FieldError that names
// it by its path, for example "config: indexer.verification_window: 9 is not in [1,8]".
// Secrets (the SASL password) are of type Secret, which never prints its value.
package config

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/ckf-stream/ckf-stream/ckf"
	"github.com/ckf-stream/ckf-stream/schemas"
	"github.com/ckf-stream/ckf-stream/streams/lanes"
	"github.com/ckf-stream/ckf-stream/streams/query"
	"github.com/ckf-stream/ckf-stream/streams/relay"
	"go.uber.org/fx"
)

// Defaults that other packages and the documentation refer to. The CKF format's defaults and
// limits (seed, verification window, wire bucket cap, lane count) are ckf's constants, used here
// as they are rather than copied.
const (
	// DefaultClientID is the Kafka client.id every client of the process sends.
	DefaultClientID = "ckf-stream"
	// DefaultHTTPListen is the HTTP server's listen address: loopback only, so that a process
	// started with no configuration exposes nothing to the network.
	DefaultHTTPListen = "127.0.0.1:8080"
	// DefaultExpectedBlocks sizes a DC's filter, for the relays (relay.expected_blocks) and the
	// indexers (indexer.expected_blocks_per_dc) alike: 1,048,576 blocks give 524,288 buckets
	// (4 MiB per lane on the indexer). It is the relay library's default too
	// (relay.DefaultRelayExpectedBlocks); ckf's own (ckf.DefaultExpectedBlocksPerDC, 1) is a
	// placeholder for callers that size the filter themselves.
	DefaultExpectedBlocks = relay.DefaultRelayExpectedBlocks
	// DefaultIndexerGCPercent is the GOGC the indexer sets (indexer.gc_percent): measured on the
	// lane ingest benchmark, 400 cut the CPU per 16-image delta record by about a sixth.
	DefaultIndexerGCPercent = 400
	// DefaultShutdownTimeout bounds a graceful stop: stop intake, drain lanes, flush producers,
	// commit offsets, close clients.
	DefaultShutdownTimeout = 30 * time.Second
	// DefaultStartupTimeout bounds start-up, which includes creating topics on the cluster.
	DefaultStartupTimeout = 60 * time.Second
	// DefaultQueryLeaveAfter is indexer.query_leave_after: how long an indexer replica stays in
	// the query group while it is not ready.
	DefaultQueryLeaveAfter = 10 * time.Second
	// DefaultBridgeBlockSize is bridge.block_size: vLLM's default block size.
	DefaultBridgeBlockSize = 16
)

// Config is the whole process configuration. Build it with Load (or Default for the defaults);
// the zero value is not valid.
type Config struct {
	Kafka Kafka `yaml:"kafka"`

	// TopicPrefix is prepended to every default topic name; a name set explicitly under topics
	// is used as it is. Default empty. Environment: CKF_TOPIC_PREFIX.
	TopicPrefix string `yaml:"topic_prefix"`
	// Topics are the topic names. Load fills every name left empty with TopicPrefix plus the
	// default name, so after Load each field holds the effective name.
	Topics Topics `yaml:"topics"`
	// SchemaRegistry is the schema registry the contract's schemas are registered with. Empty
	// (the default) uses the built-in schema ids and no registry.
	SchemaRegistry SchemaRegistry `yaml:"schema_registry"`

	HTTP    HTTP    `yaml:"http"`
	Log     Log     `yaml:"log"`
	Metrics Metrics `yaml:"metrics"`
	Indexer Indexer `yaml:"indexer"`
	Relay   Relay   `yaml:"relay"`
	Bridge  Bridge  `yaml:"bridge"`
	Workers Workers `yaml:"workers"`

	// ShutdownTimeout bounds a graceful stop, fx's stop timeout: every component's OnStop
	// (stop intake, drain lanes, flush producers, commit offsets, close clients) must finish
	// within it, or the process exits with the remaining work undone and a non-zero status.
	// Records not yet acknowledged are then re-read by the next instance, so a short timeout
	// costs duplicate work, never lost acknowledged work. Default 30s.
	ShutdownTimeout time.Duration `yaml:"shutdown_timeout"`
	// StartupTimeout bounds start-up, fx's start timeout, including topic creation on a
	// cluster that is still electing leaders. Default 60s.
	StartupTimeout time.Duration `yaml:"startup_timeout"`
}

// Kafka is the connection to the Kafka cluster.
type Kafka struct {
	// Brokers are the seed brokers, host:port each. Empty (the default) starts the embedded
	// in-process broker (franz-go's kfake; nothing persists), for demos on a machine with
	// nothing else; the embedded broker serves neither TLS nor SASL. processor indexer, relay and
	// loadgen refuse to start without brokers: no other process could reach an embedded one. Environment:
	// CKF_KAFKA_BROKERS or KAFKA_BROKERS, comma-separated. Kafka property: bootstrap.servers.
	Brokers []string `yaml:"brokers"`
	// QueryBrokers are the seed brokers of the query path: the indexer's query service (the
	// group that reads routers' requests and writes their replies) and the query clients of
	// loadgen, demo and the query command, which stand in for routers. Empty
	// (the default) uses kafka.brokers. Operators can put router traffic on a listener or
	// network of its own (a broker listener advertised on the routers' network), so that a
	// flood of requests or a fault on that route does not touch the lanes, and the other way
	// round; the cost is one more listener per broker to run and secure (TLS and SASL are those
	// of kafka.*). Every client of the query path sees only the addresses the brokers advertise
	// on the listener it bootstrapped on, so a wrong list fails like a wrong kafka.brokers: the
	// query service never joins its group and Kafka queries go unanswered, while lanes and HTTP
	// queries keep working. It needs kafka.brokers (the embedded broker has one address only).
	// Environment: CKF_KAFKA_QUERY_BROKERS, comma-separated.
	QueryBrokers []string `yaml:"query_brokers"`
	// ClientID is sent as client.id by every client of the process, which brokers use for
	// quotas and request logs. Default "ckf-stream". Kafka property: client.id.
	ClientID string `yaml:"client_id"`
	// CreateTopics creates missing topics of the layout at start. Default true. Set it to false
	// where topics are provisioned by operators and the principal may not create them; start-up
	// then only checks that the layout exists and that the lane topic has a partition per lane
	// (Indexer.LanePartitions).
	CreateTopics bool `yaml:"create_topics"`
	// TopicReplicationFactor is the replication factor of the topics the process creates
	// (kafka.create_topics; existing topics are left as they are). 0, the default, decides at
	// start from the cluster's metadata: ReplicatedTopicReplicas (3) when the cluster lists at
	// least that many brokers, and otherwise the broker's default.replication.factor (a single
	// broker: 1). More replicas survive more lost brokers at the cost of that many copies of every
	// lane record on disk and on the network. A factor above the number of live brokers fails
	// topic creation, and with it the start (INVALID_REPLICATION_FACTOR). Kafka property:
	// replication_factor of CreateTopics. Environment: CKF_KAFKA_TOPIC_REPLICATION_FACTOR.
	TopicReplicationFactor int `yaml:"topic_replication_factor"`
	// TopicMinInsyncReplicas sets min.insync.replicas on the topics the process creates: how
	// many replicas must hold a record before an acks=all write (every producer of the process)
	// is acknowledged. 0, the default, sets ReplicatedTopicMinInsync (2) on topics created with
	// 3 or more replicas and leaves the broker's min.insync.replicas otherwise. With 2 of 3, one
	// broker may be lost without stopping writes and an acknowledged record survives the loss of
	// any one broker; while fewer replicas are in sync, writes wait and then fail
	// (NOT_ENOUGH_REPLICAS, retried until the producer's delivery timeout) instead of being
	// acknowledged by too few copies. It must not exceed an explicit
	// kafka.topic_replication_factor. Kafka property: min.insync.replicas. Environment:
	// CKF_KAFKA_TOPIC_MIN_INSYNC_REPLICAS.
	TopicMinInsyncReplicas int  `yaml:"topic_min_insync_replicas"`
	TLS                    TLS  `yaml:"tls"`
	SASL                   SASL `yaml:"sasl"`
}

// QuerySeeds are the seed brokers of the query path: QueryBrokers, or Brokers when it is empty.
func (k Kafka) QuerySeeds() []string {
	if len(k.QueryBrokers) > 0 {
		return k.QueryBrokers
	}
	return k.Brokers
}

// Replication the processes choose for the topics they create on a cluster of at least
// ReplicatedTopicReplicas brokers when kafka.topic_replication_factor and
// kafka.topic_min_insync_replicas are left at 0.
const (
	ReplicatedTopicReplicas  = 3
	ReplicatedTopicMinInsync = 2
)

// TLS secures the Kafka connection. Kafka property: security.protocol=SSL or SASL_SSL.
type TLS struct {
	// Enabled turns TLS on. Default false. The other fields are errors while it is false, so
	// that a file path never suggests a protection that is off.
	Enabled bool `yaml:"enabled"`
	// CAFile is a PEM bundle of the certificate authorities that sign the brokers'
	// certificates. Empty uses the system roots. Kafka property: ssl.truststore.location.
	CAFile string `yaml:"ca_file"`
	// CertFile and KeyFile are the client's PEM certificate and key, for brokers that require
	// client authentication (ssl.client.auth=required). Set both or neither.
	CertFile string `yaml:"cert_file"`
	KeyFile  string `yaml:"key_file"`
	// ServerName overrides the name checked against the brokers' certificates. Empty uses each
	// broker's host name.
	ServerName string `yaml:"server_name"`
	// InsecureSkipVerify accepts any broker certificate. For tests only: it leaves the
	// connection open to an active man in the middle, who then also sees SASL PLAIN passwords.
	InsecureSkipVerify bool `yaml:"insecure_skip_verify"`
}

// SASL authenticates the Kafka connection. Kafka property: sasl.mechanism and sasl.jaas.config.
type SASL struct {
	// Mechanism is PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512 (case-insensitive; Load writes it in
	// upper case). Empty (the default) disables SASL. PLAIN sends the password as it is: use
	// it only with TLS. SCRAM proves knowledge of the password without sending it.
	Mechanism string `yaml:"mechanism"`
	// Username is the SASL principal. Required with a mechanism.
	Username string `yaml:"username"`
	// Password is the principal's password. Required with a mechanism. It never prints; pass
	// it by file or CKF_KAFKA_SASL_PASSWORD rather than by flag, which other users of the
	// machine can read in the process list.
	Password Secret `yaml:"password"`
}

// Topics names every topic the product uses: one per record type of the Avro contract, and the
// relays' private checkpoint topic. After Load each field is the effective name. The default
// names are the contract's (schemas.RecordType.DefaultTopic), with topic_prefix prepended; they
// are repeated below only as documentation.
type Topics struct {
	// KVEvents carries KV-cache events from inference engines, keyed by worker. A relay reads
	// every partition of it as its DC's whole state, so each DC needs a topic of its own: set
	// each relay's kv_events to its DC's topic (demo and loadgen append ".dc-<DC id in hex>").
	// Default "kv-events".
	KVEvents string `yaml:"kv_events"`
	// Lanes carries CKF snapshots and deltas; partition p is physical lane p. Default
	// "ckf-lanes".
	Lanes string `yaml:"lanes"`
	// Queries carries prefix-match query requests. Default "ckf-queries".
	Queries string `yaml:"queries"`
	// QueryReplies carries query replies, keyed by the request's correlation key. Default
	// "ckf-query-replies".
	QueryReplies string `yaml:"query_replies"`
	// LaneEvents carries lane state changes and progress, keyed by lane. Default
	// "ckf-lane-events".
	LaneEvents string `yaml:"lane_events"`
	// Control carries snapshot requests from indexers to relays. Default "ckf-control".
	Control string `yaml:"control"`
	// DeadLetter carries records rejected with their reason. Default "ckf-dead-letter".
	DeadLetter string `yaml:"dead_letter"`
	// SnapshotIndex is the compacted topic where relays record, per lane, where the latest
	// complete snapshot starts on the lane topic; a starting indexer seeks there instead of
	// scanning the lanes. Default "ckf-snapshot-index".
	SnapshotIndex string `yaml:"snapshot_index"`
	// RelayCheckpoints holds the relays' state checkpoints (streams/relay/relay.md, "State
	// checkpoint"): partition p is lane p's relay. It is the relays' own state store, read by
	// no other process, so it is not a record type of the contract. Default
	// "ckf-relay-checkpoints".
	RelayCheckpoints string `yaml:"relay_checkpoints"`
	// WorkerQueries carries worker-level match requests (WorkerQueryRequest) from routers to the
	// worker stages; every DC's stage reads it in its own consumer group and answers the requests
	// that select its DC. Default "ckf-worker-queries".
	WorkerQueries string `yaml:"worker_queries"`
	// WorkerQueryReplies carries the worker stages' replies (WorkerQueryReply), one per selected
	// DC, keyed by correlation id. Default "ckf-worker-query-replies".
	WorkerQueryReplies string `yaml:"worker_query_replies"`
}

// DefaultRegistryTimeout is SchemaRegistry.Timeout's default.
const DefaultRegistryTimeout = 10 * time.Second

// SchemaRegistry is a Confluent-compatible schema registry (Confluent Schema Registry, or
// Apicurio Registry's ccompat API at /apis/ccompat/v7). With one configured, every command
// registers (or looks up) the embedded schema of each record type under the subject
// "<topic>-value", topic_prefix included, before it starts, writes the registry's ids in the
// records' 5-byte header, and fetches the writer schema of any id it has not seen (once; ids are
// immutable). Records written with the built-in ids stay readable, so a deployment can move to a
// registry without rewriting its topics. A refusal (for example a schema incompatible with the
// versions registered under the subject's compatibility level) stops the process at start with
// an error naming the subject, the registry and its reason.
type SchemaRegistry struct {
	// URLs are the registry's base URLs, tried in order (http://registry:8080/apis/ccompat/v7
	// for Apicurio). Empty (the default) uses the built-in schema ids and never contacts a
	// registry; the other fields are then errors. Environment: CKF_SCHEMA_REGISTRY_URLS,
	// comma-separated.
	URLs []string `yaml:"urls"`
	// Username and Password authenticate to the registry with HTTP basic auth. Set both or
	// neither. Default empty (no authentication). The password never prints; pass it by file or
	// CKF_SCHEMA_REGISTRY_PASSWORD rather than by flag. Over plain http the password travels in
	// clear text: use an https URL.
	Username string `yaml:"username"`
	Password Secret `yaml:"password"`
	// Timeout bounds each registry request: each registration or lookup at start, and each
	// fetch of an unseen writer schema while a record waits to be decoded (that consumer waits
	// meanwhile; on timeout the record is a registry failure). A short timeout fails a start
	// against a slow registry; a long one holds a consumer longer when the registry is down.
	// Default 10s. Environment: CKF_SCHEMA_REGISTRY_TIMEOUT.
	Timeout time.Duration `yaml:"timeout"`
	// LookupOnly makes the processes look their schemas up instead of registering them, for a
	// registry whose service account may only read; a deployment step then registers them
	// first, and a process whose schema is not registered stops at start. Default false:
	// register, which is idempotent (an identical schema keeps its id) and lets the registry's
	// compatibility check refuse an incompatible change. Environment:
	// CKF_SCHEMA_REGISTRY_LOOKUP_ONLY.
	LookupOnly bool `yaml:"lookup_only"`
}

// Enabled reports whether a registry is configured.
func (r SchemaRegistry) Enabled() bool { return len(r.URLs) > 0 }

// DefaultRelayCheckpointsTopic is Topics.RelayCheckpoints' default name (before topic_prefix).
const DefaultRelayCheckpointsTopic = "ckf-relay-checkpoints"

// name returns the field of t that names the topic of record type rt, or nil for a value that is
// not a record type of the contract.
func (t *Topics) name(rt schemas.RecordType) *string {
	switch rt {
	case schemas.TypeKvEvent:
		return &t.KVEvents
	case schemas.TypeLaneRecord:
		return &t.Lanes
	case schemas.TypeQueryRequest:
		return &t.Queries
	case schemas.TypeQueryReply:
		return &t.QueryReplies
	case schemas.TypeLaneEvent:
		return &t.LaneEvents
	case schemas.TypeControlRecord:
		return &t.Control
	case schemas.TypeDeadLetter:
		return &t.DeadLetter
	case schemas.TypeSnapshotIndex:
		return &t.SnapshotIndex
	case schemas.TypeWorkerQueryRequest:
		return &t.WorkerQueries
	case schemas.TypeWorkerQueryReply:
		return &t.WorkerQueryReplies
	}
	return nil
}

// Of returns the name of the topic that carries record type rt ("" for a value that is not a
// record type of the contract).
func (t Topics) Of(rt schemas.RecordType) string {
	if p := t.name(rt); p != nil {
		return *p
	}
	return ""
}

// DefaultTopics returns the default topic names, the contract's (schemas.RecordType.DefaultTopic),
// with prefix prepended.
func DefaultTopics(prefix string) Topics {
	var t Topics
	for _, rt := range schemas.RecordTypes() {
		if p := t.name(rt); p != nil {
			*p = prefix + rt.DefaultTopic()
		}
	}
	t.RelayCheckpoints = prefix + DefaultRelayCheckpointsTopic
	return t
}

// HTTP is the process's HTTP server: /healthz, /readyz, /metrics and the routes that the
// indexer and relay register.
type HTTP struct {
	// Listen is the host:port to listen on. Default "127.0.0.1:8080" (loopback only); use
	// ":8080" to serve every interface, or port 0 for any free port.
	Listen string   `yaml:"listen"`
	TLS    HTTPTLS  `yaml:"tls"`
	Auth   HTTPAuth `yaml:"auth"`
}

// HTTPTLS serves HTTPS instead of HTTP. Which routes stay open to requests without credentials
// (the probes) is app/httpserver's decision, documented in app/indexer/http.md.
type HTTPTLS struct {
	// CertFile and KeyFile are the server's PEM certificate chain and key. Set both to serve
	// HTTPS (TLS 1.2 or newer); neither serves plain HTTP. Read at start.
	CertFile string `yaml:"cert_file"`
	KeyFile  string `yaml:"key_file"`
	// ClientCAFile is a PEM bundle of the CAs whose client certificates the server accepts.
	// When set, every route but the probes requires a client certificate that verifies against
	// it (the probes, which kubelets ask without one, stay open). Needs CertFile.
	ClientCAFile string `yaml:"client_ca_file"`
}

// HTTPAuth makes every route but the probes require credentials.
type HTTPAuth struct {
	// BearerTokenFile is a file holding the token that requests present as
	// "Authorization: Bearer <token>" (surrounding white space is trimmed; at least 16
	// characters). Empty (the default) requires no token. The token is read at start and never
	// printed, logged or passed by flag or variable: only the file's path is configuration.
	BearerTokenFile string `yaml:"bearer_token_file"`
}

// Protected reports whether any route requires credentials: a bearer token, a client
// certificate, or both.
func (h HTTP) Protected() bool { return h.Auth.BearerTokenFile != "" || h.TLS.ClientCAFile != "" }

// Log configures the process logger.
type Log struct {
	// Level is the minimum level logged: debug, info, warn or error. Default info.
	Level string `yaml:"level"`
	// Format is json (one object per line, for collectors; the default) or console (for a
	// person at a terminal).
	Format string `yaml:"format"`
}

// Metrics configures the tally root scope that /metrics serves.
type Metrics struct {
	// ReportInterval is how often tally moves counter and gauge updates into the Prometheus
	// registry; /metrics lags the code by at most this much. Timers and histograms are
	// reported as they are recorded. Default 1s.
	ReportInterval time.Duration `yaml:"report_interval"`
}

// Indexer configures the global indexer (processor indexer).
type Indexer struct {
	// ConsumerInstanceID is this replica's ConsumerInstanceId, minted into every lane lease it
	// holds. It must differ between replicas. 0 (the default) draws a random non-zero id at
	// start, which is logged.
	ConsumerInstanceID uint64 `yaml:"consumer_instance_id"`
	// Domain is the indexer domain every configured lane must belong to, as the ckf identity
	// renders it: 32 hex digits of cache semantics, a colon, 32 hex digits of routing scope.
	// Required by the indexer; empty by default.
	Domain string `yaml:"domain"`
	// DomainSource says how both digests of Domain were obtained: explicit (the default) or
	// default_derived. A default-derived domain across several DCs is allowed and logged.
	DomainSource string `yaml:"domain_source"`
	// Lanes maps physical lane (0..63) to the DC id whose relay publishes on it. A DC appears
	// on at most one lane. Empty by default; the indexer needs at least one lane. The indexer's
	// table holds the highest mapped lane + 1 lanes (Indexer.LaneCount: a 4-lane map builds a
	// 4-lane table), and the lane topic needs a partition per lane, at least 16
	// (Indexer.LanePartitions; consumer §16).
	Lanes LaneMap `yaml:"lanes"`
	// RemoteLanes names the lanes of indexer.lanes whose relay publishes in another region,
	// lane=alias (MirrorMaker's alias of that region): they are read from MirrorMaker's copies of
	// that region's lane topic and snapshot index, named by MirrorPolicy, and a snapshot is found
	// there by time and sequence, never by offset (consumer §9.8). Lanes not listed are read from
	// topics.lanes. Empty by default: one region (regions.go, design §8).
	RemoteLanes LaneRegions `yaml:"remote_lanes"`
	// MirrorPolicy is MirrorMaker's replication policy between the regions: "default" (region
	// eu's lanes are eu.<topics.lanes>, its index eu.<topics.snapshot_index>) or "identity" (the
	// copies keep the names: flows one way only). Default "default" (DefaultMirrorPolicy).
	MirrorPolicy string `yaml:"mirror_policy"`
	// BucketCount is the CKF bucket count every lane must publish: a power of two in
	// [2, 2^24] (ckf.MaxWireBucketCount). 0 (the default) derives it from ExpectedBlocksPerDC; a
	// non-zero value wins.
	BucketCount uint64 `yaml:"bucket_count"`
	// ExpectedBlocksPerDC derives the bucket count when BucketCount is 0: the next power of
	// two of ceil(5n/16), at least 2. It must equal the relays' relay.expected_blocks. Default
	// 1,048,576.
	ExpectedBlocksPerDC uint64 `yaml:"expected_blocks_per_dc"`
	// Seed is the CKF addressing seed every lane must publish with. Default
	// 0x5DEECE66D1B54A33 (ckf.DefaultSeed).
	Seed uint64 `yaml:"seed"`
	// VerificationWindow is the number of positions below the tentative prefix depth that the
	// search re-checks one by one, in [1,8] (ckf.MaxVerificationWindow). A larger window lowers
	// false-positive depth at the cost of probes per query. Default 2
	// (ckf.DefaultVerificationWindow).
	VerificationWindow int `yaml:"verification_window"`
	// Freshness excludes lagging lanes from answers.
	Freshness Freshness `yaml:"freshness"`
	// QueryGroup is the consumer group of the query topic; replicas in one group share the
	// query load. Default "ckf-indexer-queries" (query.DefaultQueryGroup). Kafka property:
	// group.id.
	QueryGroup string `yaml:"query_group"`
	// QueryLeaveAfter bounds how long a replica that stopped being ready (the "lanes" check of
	// /readyz: no lane eligible) stays in the query group. A replica joins the group only once it
	// is ready, so a starting or misconfigured replica never takes partitions it would answer
	// UNAVAILABLE; one that stays unready for longer than this leaves the group (its batch in
	// flight answered and committed first), and joins again once ready. Its partitions move to
	// the ready replicas within this bound plus one readiness sample (100 ms) and a graceful
	// leave. A short bound moves partitions sooner on a real failure at the cost of a rebalance
	// on every brief dip; while every replica is unready, Kafka queries wait unanswered (routers
	// time out) instead of getting UNAVAILABLE replies. Default 10s; must be positive.
	// Environment: CKF_INDEXER_QUERY_LEAVE_AFTER.
	QueryLeaveAfter time.Duration `yaml:"query_leave_after"`
	// QuerySessionTimeout is the query group's session timeout: how long requests on the
	// partitions of a replica that died without leaving wait before another replica takes them
	// over (Kafka property session.timeout.ms; heartbeats go every third of it, at most every
	// second). It must lie within the broker's group.min.session.timeout.ms and
	// group.max.session.timeout.ms (6s and 30m by default). Default 6s
	// (query.DefaultQuerySessionTimeout). Environment: CKF_INDEXER_QUERY_SESSION_TIMEOUT.
	QuerySessionTimeout time.Duration `yaml:"query_session_timeout"`
	// QueryBatchSize is the largest number of query requests answered as one batch, in
	// [1,65536] (query.MaxQueryBatchRecords). Default 256 (query.DefaultQueryBatchRecords).
	QueryBatchSize int `yaml:"query_batch_size"`
	// ReplyTopicPrefixes lists the prefixes a query request's reply_topic may start with; a
	// request may always name topics.query_replies itself. A request naming any other topic is
	// answered INVALID_REQUEST on topics.query_replies and dead-lettered, so a router cannot make
	// the indexer write into a topic it did not mean to open (the lane topic, say). Default
	// empty: only topics.query_replies. Each prefix is a non-empty run of Kafka topic characters
	// (a-z A-Z 0-9 . _ -) and must not be the start of any other topic of the product (a prefix
	// like "ckf-" would open the lane topic); a violation stops the process at start. Variable
	// CKF_INDEXER_REPLY_TOPIC_PREFIXES, comma-separated (router-a.,router-b.).
	ReplyTopicPrefixes []string `yaml:"reply_topic_prefixes"`
	// GCPercent is the Go garbage collector's target (GOGC) the indexer sets when it starts, in
	// [0,10000]; 0 keeps the runtime's own setting. A GOGC environment variable, when set, wins.
	// The table is an ordinary pointer-free Go slice: the collector never scans it, but it counts
	// as live heap, so with target P the heap may grow to (1 + P/100) times the live heap, table
	// included, before the next collection. A higher target means less collection work per lane
	// record at the cost of that headroom; to cap the heap, set GOMEMLIMIT as well. Default 400.
	GCPercent int `yaml:"gc_percent"`
	// LagCommitInterval is how often the replica commits its applied lane offsets (the offset
	// after the last applied record, per lane partition) to its lag group,
	// <topic_prefix>ckf-indexer-<consumer instance id in 16 hex digits>
	// (lanes.IndexerLagGroup), and once more at a graceful stop, so that standard lag tools
	// (kafka-consumer-groups.sh, kminion, Burrow) see the replica. The commits are for
	// visibility only: restores seek to snapshots. Shorter shows fresher positions at the cost
	// of one offset commit per interval; a failed commit is counted and logged, never fatal.
	// Default 5s (lanes.DefaultIndexerLagCommitInterval); must be positive. Environment:
	// CKF_INDEXER_LAG_COMMIT_INTERVAL.
	LagCommitInterval time.Duration `yaml:"lag_commit_interval"`
}

// Freshness is the policy that takes a lane out of answers while it lags its partition: a
// lane whose applied position is behind the last stable offset by more than MaxRecordLag records, or
// whose last applied record is older than MaxTimeLag while records wait, is reported and
// excluded until it catches up.
type Freshness struct {
	// MaxRecordLag is the largest offset lag still answered. 0 disables the record bound.
	// Default 10,000 (lanes.DefaultFreshnessMaxRecordLag).
	MaxRecordLag int64 `yaml:"max_record_lag"`
	// MaxTimeLag is the largest time lag still answered. 0 disables the time bound. Default
	// 10s (lanes.DefaultFreshnessMaxTimeLag).
	MaxTimeLag time.Duration `yaml:"max_time_lag"`
}

// Relay configures one DC pool's relay (processor relay).
type Relay struct {
	// DcID is the DC id of the pool this relay publishes for. Default 0.
	DcID uint64 `yaml:"dc_id"`
	// Lane is the physical lane (lane topic partition) the relay writes, in [0,63]. It must
	// be the lane the indexers' indexer.lanes maps to DcID. Default 0.
	Lane int `yaml:"lane"`
	// ExpectedBlocks sizes the relay's filter; it must equal the indexers'
	// indexer.expected_blocks_per_dc (or yield their bucket_count). Default 1,048,576.
	ExpectedBlocks uint64 `yaml:"expected_blocks"`
	// Seed is the CKF addressing seed; it must equal the indexers' indexer.seed. Default
	// 0x5DEECE66D1B54A33 (ckf.DefaultSeed).
	Seed uint64 `yaml:"seed"`
	// SnapshotEveryDeltas writes a barrier snapshot after this many deltas. 0 disables the
	// count trigger. Default 0 (relay.DefaultRelaySnapshotEveryDeltas): the byte trigger
	// bounds the snapshots' cost instead.
	SnapshotEveryDeltas uint64 `yaml:"snapshot_every_deltas"`
	// SnapshotDeltaRatio writes a barrier snapshot once the deltas since the previous one weigh
	// this many snapshots, so snapshots stay at most 1/(1+ratio) of the lane's bytes under
	// steady load. 0 disables the byte trigger. Default 9 (relay.DefaultRelaySnapshotDeltaRatio).
	SnapshotDeltaRatio float64 `yaml:"snapshot_delta_ratio"`
	// SnapshotInterval writes a barrier snapshot this long after the previous one. 0 disables
	// the time trigger; the three triggers cannot all be off, since a recovering indexer needs
	// a recent snapshot. Default 60s.
	SnapshotInterval time.Duration `yaml:"snapshot_interval"`
	// SnapshotIdleInterval is the time trigger's period while the lane is idle (no delta since
	// the previous snapshot): an idle DC's snapshot would repeat the previous one, so it is
	// rewritten only this often, enough to keep it inside the lane topic's retention (keep
	// retention.ms above it). 0 snapshots idle lanes every snapshot_interval, like busy ones.
	// At least snapshot_interval. Default 1h.
	SnapshotIdleInterval time.Duration `yaml:"snapshot_idle_interval"`
	// HeartbeatInterval is how often an idle lane gets a heartbeat record, which lets indexers
	// tell an idle relay from a dead one. Default 1s.
	HeartbeatInterval time.Duration `yaml:"heartbeat_interval"`
	// PublishEveryEvents closes a publication batch after this many primary KV events (the
	// ckf publisher's cadence); 1 publishes after every event. Default 64
	// (relay.DefaultRelayPublishEveryEvents); publish_max_delay closes a batch sooner when
	// events are sparse.
	PublishEveryEvents uint64 `yaml:"publish_every_events"`
	// PublishMaxDelay closes a non-empty publication batch this long after its first event,
	// however few events it holds, which bounds how stale the indexers' view of this DC gets.
	// 0 closes a batch as soon as the KV events of the poll that opened it are applied. Default
	// 5ms (relay.DefaultRelayPublishMaxDelay). The rules of every relay setting are the relay
	// library's (relay.go).
	PublishMaxDelay time.Duration `yaml:"publish_max_delay"`
	// CheckpointInterval writes the relay's exact state and its KV-events offsets to
	// topics.relay_checkpoints this long after the previous checkpoint; a restart restores the
	// newest one and replays only the KV events after it. Keep the KV-events topic's retention
	// well above it (streams/relay/relay.md, "Retention"). 0 disables the time trigger. Default 30s
	// (relay.DefaultRelayCheckpointInterval).
	CheckpointInterval time.Duration `yaml:"checkpoint_interval"`
	// CheckpointEveryEvents also checkpoints once this many KV events were applied since the
	// previous checkpoint. 0 disables the count trigger; both triggers 0 disables checkpoints,
	// and a restart then replays the KV-events topic from its start. Default 2,000,000
	// (relay.DefaultRelayCheckpointEveryEvents).
	CheckpointEveryEvents uint64 `yaml:"checkpoint_every_events"`
	// SilentSourceAfter counts a source of the DC (worker id, dp rank) silent once it has
	// published no KV event for this long while another source published within it
	// (ckf_relay_silent_sources, alert CkfWorkerSilent; streams/relay/relay.md, "Silent
	// engines"). Engines publish only when their cache changes: keep it well above a worker's
	// longest quiet spell under load. Default 5m (relay.DefaultRelaySilentSourceAfter).
	SilentSourceAfter time.Duration `yaml:"silent_source_after"`
	// ForgetSourceAfter drops a source with no KV event for this long from the watch (a worker
	// removed without a clear stops being counted then). Above silent_source_after. Default 1h
	// (relay.DefaultRelayForgetSourceAfter).
	ForgetSourceAfter time.Duration `yaml:"forget_source_after"`
	// RemoteRegions are the MirrorMaker aliases of the other regions whose indexers read this
	// relay's lane: their snapshot requests reach it on MirrorMaker's copies of their control
	// topics, <alias>.<topics.control> (regions.go, design §8), which must exist when the relay
	// starts. Default none (one region).
	RemoteRegions []string `yaml:"remote_regions"`
}

// Bridge configures processor bridge: one engine worker's KV-cache events, read from the
// engine's ZeroMQ sockets (vLLM, SGLang) and written to topics.kv_events, keyed by
// bridge.worker_id. Run one bridge per engine; the engine's data-parallel ranks are
// bridge.ranks consecutive ports (bridge/README.md).
type Bridge struct {
	// Endpoint is the engine's PUB endpoint of rank 0, the engine's kv-events endpoint as the
	// bridge reaches it: tcp://engine-host:5557 when the engine binds (its endpoint has a
	// wildcard, tcp://*:5557, the engines' default), or the address the bridge binds when
	// bridge.bind is set. Required by processor bridge; default empty. While the engine is not
	// up the bridge keeps dialling and /readyz reports it not ready; when the engine goes away
	// the socket is opened again, and what was published meanwhile is filled from the replay
	// socket. Environment: CKF_BRIDGE_ENDPOINT.
	Endpoint string `yaml:"endpoint"`
	// ReplayEndpoint is the engine's ROUTER replay endpoint of rank 0 (the engine's
	// replay_endpoint as the bridge reaches it). Empty (the default) runs without gap filling:
	// a missed batch is counted as lost (ckf_bridge_lost_batches_total) and the index may miss
	// the blocks it stored until they are stored again. Environment: CKF_BRIDGE_REPLAY_ENDPOINT.
	ReplayEndpoint string `yaml:"replay_endpoint"`
	// Topic is the ZeroMQ topic the bridge subscribes to, the engine's kv-events topic. Default
	// empty: every message of the socket. Environment: CKF_BRIDGE_TOPIC.
	Topic string `yaml:"topic"`
	// WorkerID is the worker id of every record the bridge writes and their Kafka key; it names
	// the engine in query answers, so it must be unique among the DC's engines. Default 0.
	// Environment: CKF_BRIDGE_WORKER_ID.
	WorkerID uint64 `yaml:"worker_id"`
	// Bind makes the bridge bind bridge.endpoint and wait for the engine to connect, for
	// engines configured with a non-wildcard endpoint (vLLM and SGLang connect then). Default
	// false: the bridge dials the engine, which binds. Environment: CKF_BRIDGE_BIND.
	Bind bool `yaml:"bind"`
	// BlockSize is the engine's KV-cache block size in tokens (vLLM --block-size, SGLang
	// --page-size). Queries hash prompts in blocks of the indexer's block size, so a stored
	// event of another size is refused (dead-lettered with ckf_bridge_refused_batches_total and
	// an error log) rather than indexed under hashes no query computes. Default 16.
	// Environment: CKF_BRIDGE_BLOCK_SIZE.
	BlockSize int `yaml:"block_size"`
	// Ranks is the engine's number of data-parallel ranks: rank r's sockets are the endpoints
	// with their TCP port plus r, as the engines derive them. Default 1. Environment:
	// CKF_BRIDGE_RANKS.
	Ranks int `yaml:"ranks"`
	// LoraNames maps the numeric LoRA ids of engines that send lora_id without lora_name to
	// adapter names, as id=name items (a list; comma-separated in a variable). The name salts the
	// block hashes as queries for that adapter do; a stored event with an unmapped id is refused
	// (dead-lettered, counted). Default empty. Environment: CKF_BRIDGE_LORA_NAMES.
	LoraNames []string `yaml:"lora_names"`
	// BufferBatches bounds the batches received and not yet converted, per rank. A full buffer
	// stops reading the socket (ckf_bridge_buffer_full_total counts it): the engine's PUB socket
	// then drops at its high-water mark and the gap is filled from the replay socket. Larger
	// buffers ride out longer Kafka stalls at the cost of memory (a batch is a few KiB).
	// Default 1024. Environment: CKF_BRIDGE_BUFFER_BATCHES.
	BufferBatches int `yaml:"buffer_batches"`
	// ReplayTimeout bounds the wait for each reply of a replay request; a reply that does not
	// come in time ends the attempt, which is retried from the last batch received. Default 2s.
	// Environment: CKF_BRIDGE_REPLAY_TIMEOUT.
	ReplayTimeout time.Duration `yaml:"replay_timeout"`
	// ReplayRetries is how many replays in a row may stop short without bringing a new batch
	// (the engine drops replies of large replays; a replay that brings some is followed by
	// another at once) before the missing batches are reported lost. More retries ride out a
	// busier engine; each costs up to bridge.replay_timeout. Default 3. Environment:
	// CKF_BRIDGE_REPLAY_RETRIES.
	ReplayRetries int `yaml:"replay_retries"`
	// IdleRecheck asks the replay socket for batches after the last one handled once a rank
	// has been silent this long: a dropped final batch is otherwise invisible until the engine
	// publishes again. 0 disables it. Default 5s. Environment: CKF_BRIDGE_IDLE_RECHECK.
	IdleRecheck time.Duration `yaml:"idle_recheck"`
	// Resume reads the worker's records back from topics.kv_events at start, so a restarted
	// bridge continues after the last batch written and holds the blocks written before
	// (bridge/README.md, "Restart"). It costs one read of the worker's partition at start.
	// false starts afresh: everything the engine's replay buffer still has is written again
	// (harmless to the relay: re-offered stores are deduplicated, removals of unknown blocks
	// ignored). Default true. Environment: CKF_BRIDGE_RESUME.
	Resume bool `yaml:"resume"`
	// LostHistory is what the bridge does when engine batches are lost (gone from the engine's
	// replay buffer, or never answered by it): "clear" (the default) writes a clear of the
	// rank in their place, so answers for the rank's earlier blocks are short rather than
	// long, and the rank is degraded (ckf_bridge_degraded_ranks) until the engine restarts or
	// clears; "keep" leaves the rank's blocks as they were (blocks the lost batches removed
	// stay in the index). bridge/README.md, "Lost history". Environment:
	// CKF_BRIDGE_LOST_HISTORY.
	LostHistory string `yaml:"lost_history"`
	// EnginesFile names a YAML (or JSON) file listing the engines one bridge process serves, for
	// a DC of many engines: `engines:` a list of {worker_id, endpoint, replay_endpoint, ranks,
	// topic, bind, block_size, lora_names}, each field but worker_id and endpoint defaulting to
	// the bridge.* setting of the same name (bridge/README.md, "Many engines per process").
	// Each engine keeps its own sockets, order, gap fill and restart detection; the engines
	// share the process's producer. Empty (the default): one engine, bridge.endpoint.
	// Environment: CKF_BRIDGE_ENGINES_FILE.
	EnginesFile string `yaml:"engines_file"`
}

// LoraMap parses LoraNames (validated by Config.Validate).
func (b Bridge) LoraMap() (map[int64]string, error) {
	out := map[int64]string{}
	for _, item := range b.LoraNames {
		k, v, ok := strings.Cut(item, "=")
		id, err := strconv.ParseInt(strings.TrimSpace(k), 0, 64)
		if !ok || err != nil || strings.TrimSpace(v) == "" {
			return nil, fmt.Errorf("%q is not id=name", item)
		}
		if _, dup := out[id]; dup {
			return nil, fmt.Errorf("LoRA id %d is mapped twice", id)
		}
		out[id] = strings.TrimSpace(v)
	}
	return out, nil
}

// defaultConfig returns the defaults documented on each field, before topic names are resolved.
func defaultConfig() Config {
	return Config{
		Kafka: Kafka{
			ClientID:     DefaultClientID,
			CreateTopics: true,
		},
		SchemaRegistry: SchemaRegistry{Timeout: DefaultRegistryTimeout},
		HTTP:           HTTP{Listen: DefaultHTTPListen},
		Log:            Log{Level: "info", Format: "json"},
		Metrics:        Metrics{ReportInterval: time.Second},
		Indexer: Indexer{
			DomainSource:        "explicit",
			ExpectedBlocksPerDC: DefaultExpectedBlocks,
			Seed:                ckf.DefaultSeed,
			VerificationWindow:  ckf.DefaultVerificationWindow,
			Freshness:           Freshness{MaxRecordLag: lanes.DefaultFreshnessMaxRecordLag, MaxTimeLag: lanes.DefaultFreshnessMaxTimeLag},
			QueryGroup:          query.DefaultQueryGroup,
			QueryLeaveAfter:     DefaultQueryLeaveAfter,
			QuerySessionTimeout: query.DefaultQuerySessionTimeout,
			QueryBatchSize:      query.DefaultQueryBatchRecords,
			GCPercent:           DefaultIndexerGCPercent,
			LagCommitInterval:   lanes.DefaultIndexerLagCommitInterval,
			MirrorPolicy:        DefaultMirrorPolicy,
		},
		// The relay's and the freshness defaults are streams' (and ckf's for the CKF format and
		// cadence); defaults_test.go in app/relay and app/indexer pins them field by field.
		Relay: Relay{
			ExpectedBlocks:        DefaultExpectedBlocks,
			Seed:                  ckf.DefaultSeed,
			SnapshotEveryDeltas:   relay.DefaultRelaySnapshotEveryDeltas,
			SnapshotDeltaRatio:    relay.DefaultRelaySnapshotDeltaRatio,
			SnapshotInterval:      relay.DefaultRelaySnapshotInterval,
			SnapshotIdleInterval:  relay.DefaultRelaySnapshotIdleInterval,
			HeartbeatInterval:     relay.DefaultRelayHeartbeatInterval,
			PublishEveryEvents:    relay.DefaultRelayPublishEveryEvents,
			PublishMaxDelay:       relay.DefaultRelayPublishMaxDelay,
			CheckpointInterval:    relay.DefaultRelayCheckpointInterval,
			CheckpointEveryEvents: relay.DefaultRelayCheckpointEveryEvents,
			SilentSourceAfter:     relay.DefaultRelaySilentSourceAfter,
			ForgetSourceAfter:     relay.DefaultRelayForgetSourceAfter,
		},
		Bridge: Bridge{
			BlockSize:     DefaultBridgeBlockSize,
			Ranks:         1,
			BufferBatches: 1024,
			ReplayTimeout: 2 * time.Second,
			ReplayRetries: 3,
			IdleRecheck:   5 * time.Second,
			Resume:        true,
			LostHistory:   "clear",
		},
		Workers:         defaultWorkers(),
		ShutdownTimeout: DefaultShutdownTimeout,
		StartupTimeout:  DefaultStartupTimeout,
	}
}

// Default returns the configuration that Load returns when no file, variable or flag sets
// anything: every documented default, with the default topic names.
func Default() Config {
	c := defaultConfig()
	c.resolve()
	return c
}

// resolve fills derived fields (the effective topic names) and normalises the SASL mechanism's
// case and empty collections.
func (c *Config) resolve() {
	for _, rt := range schemas.RecordTypes() {
		if p := c.Topics.name(rt); p != nil && *p == "" {
			*p = c.TopicPrefix + rt.DefaultTopic()
		}
	}
	if c.Topics.RelayCheckpoints == "" {
		c.Topics.RelayCheckpoints = c.TopicPrefix + DefaultRelayCheckpointsTopic
	}
	if c.Workers.CheckpointTopic == "" {
		c.Workers.CheckpointTopic = c.TopicPrefix + DefaultWorkersCheckpointTopic
	}
	c.Kafka.SASL.Mechanism = upperASCII(c.Kafka.SASL.Mechanism)
	// An empty list or map from a file ([] or {}) means the same as none at all.
	if len(c.Kafka.Brokers) == 0 {
		c.Kafka.Brokers = nil
	}
	if len(c.Kafka.QueryBrokers) == 0 {
		c.Kafka.QueryBrokers = nil
	}
	if len(c.SchemaRegistry.URLs) == 0 {
		c.SchemaRegistry.URLs = nil
	}
	if len(c.Indexer.Lanes) == 0 {
		c.Indexer.Lanes = nil
	}
	if len(c.Indexer.RemoteLanes) == 0 {
		c.Indexer.RemoteLanes = nil
	}
	if len(c.Indexer.ReplyTopicPrefixes) == 0 {
		c.Indexer.ReplyTopicPrefixes = nil
	}
	if len(c.Relay.RemoteRegions) == 0 {
		c.Relay.RemoteRegions = nil
	}
	if len(c.Workers.ReplyTopicPrefixes) == 0 {
		c.Workers.ReplyTopicPrefixes = nil
	}
	if len(c.Bridge.LoraNames) == 0 {
		c.Bridge.LoraNames = nil
	}
}

func upperASCII(s string) string {
	b := []byte(s)
	for i, ch := range b {
		if 'a' <= ch && ch <= 'z' {
			b[i] = ch - 'a' + 'A'
		}
	}
	return string(b)
}

// Parts hands each section of a Config to the fx graph on its own, so that a module depends on
// the section it reads rather than on the whole configuration.
type Parts struct {
	fx.Out

	Kafka          Kafka
	Topics         Topics
	SchemaRegistry SchemaRegistry
	HTTP           HTTP
	Log            Log
	Metrics        Metrics
	Indexer        Indexer
	Relay          Relay
	Bridge         Bridge
	Workers        Workers
}

// Split returns c's sections as Parts.
func Split(c Config) Parts {
	return Parts{
		Kafka:          c.Kafka,
		Topics:         c.Topics,
		SchemaRegistry: c.SchemaRegistry,
		HTTP:           c.HTTP,
		Log:            c.Log,
		Metrics:        c.Metrics,
		Indexer:        c.Indexer,
		Relay:          c.Relay,
		Bridge:         c.Bridge,
		Workers:        c.Workers,
	}
}

// Module provides an already loaded and validated cfg to the fx graph: the Config itself and
// each of its sections (see Parts). The configuration is loaded before fx starts because the
// start and stop timeouts, and `processor config print`, need it first.
func Module(cfg Config) fx.Option {
	return fx.Module("config",
		fx.Supply(cfg),
		fx.Provide(Split),
	)
}
