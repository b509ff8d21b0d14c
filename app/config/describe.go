package config

import "slices"

// The commands of processor that a setting can be used by, as help output names them. config
// print prints every setting and is not listed.
const (
	CommandDemo    = "demo"
	CommandIndexer = "indexer"
	CommandRelay   = "relay"
	CommandLoadgen = "loadgen"
	CommandQuery   = "query"
	CommandBridge  = "bridge"
	CommandReplay  = "replay"
	CommandWorkers = "workers"
)

// Commands are the commands a Description may name, in the order help output lists them.
var Commands = []string{CommandDemo, CommandIndexer, CommandRelay, CommandWorkers, CommandLoadgen, CommandQuery, CommandBridge, CommandReplay}

// Description is the help text of one setting: one line saying what it is, and the commands
// whose behaviour it changes.
type Description struct {
	// Text is one line, without a final period.
	Text string
	// UsedBy are the commands that read the setting, in the order of Commands.
	UsedBy []string
}

// Command lists used in the table below. Every command except query builds the whole process
// (app.New): it connects with the kafka.* settings, creates or verifies the whole topic layout
// at start, logs, serves HTTP and metrics, and stops within shutdown_timeout. A topic setting
// lists the commands that read or write the topic, not the ones that only create it.
var (
	processCommands = []string{CommandDemo, CommandIndexer, CommandRelay, CommandWorkers, CommandLoadgen, CommandBridge, CommandReplay}
	clientCommands  = []string{CommandDemo, CommandIndexer, CommandRelay, CommandWorkers, CommandLoadgen, CommandQuery, CommandBridge, CommandReplay}
	workersCommands = []string{CommandWorkers}
	indexerCommands = []string{CommandDemo, CommandIndexer}
	relayCommands   = []string{CommandDemo, CommandRelay}
	bridgeCommands  = []string{CommandBridge}
)

// descriptions holds one Description per setting path (Fields' paths). A setting added to
// Config without an entry here fails TestEveryFieldIsDescribed; keep the text to one line and
// the details in the field's doc comment.
var descriptions = map[string]Description{
	"kafka.brokers":                   {"seed brokers, host:port each; empty: demo runs on the embedded in-process broker, indexer, relay, loadgen and bridge refuse to start (query then needs --http)", clientCommands},
	"kafka.query_brokers":             {"seed brokers of the query path (query service, query clients of loadgen, demo and query), e.g. a listener on the routers' network; empty uses kafka.brokers", []string{CommandDemo, CommandIndexer, CommandLoadgen, CommandQuery}},
	"kafka.client_id":                 {"client.id every Kafka client of the process sends (broker quotas and logs)", clientCommands},
	"kafka.create_topics":             {"create missing topics at start; false only verifies that they exist", processCommands},
	"kafka.topic_replication_factor":  {"replicas of the topics the process creates; 0 picks 3 on a cluster of 3 or more brokers, else the broker default", processCommands},
	"kafka.topic_min_insync_replicas": {"min.insync.replicas of the topics the process creates; 0 picks 2 with 3 or more replicas, else the broker default", processCommands},
	"kafka.tls.enabled":               {"connect to the brokers over TLS", clientCommands},
	"kafka.tls.ca_file":               {"PEM file of the CA that signed the broker certificates; empty uses the system roots", clientCommands},
	"kafka.tls.cert_file":             {"PEM client certificate for mutual TLS (with kafka.tls.key_file)", clientCommands},
	"kafka.tls.key_file":              {"PEM private key of kafka.tls.cert_file", clientCommands},
	"kafka.tls.server_name":           {"name to verify the broker certificates against; empty uses the broker host", clientCommands},
	"kafka.tls.insecure_skip_verify":  {"accept any broker certificate (tests only: open to a man in the middle)", clientCommands},
	"kafka.sasl.mechanism":            {"SASL mechanism: PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512; empty disables SASL", clientCommands},
	"kafka.sasl.username":             {"SASL principal; required with a mechanism", clientCommands},
	"kafka.sasl.password":             {"SASL password; required with a mechanism, never printed (pass it by file or variable)", clientCommands},

	"topic_prefix":                {"prepended to every default topic name (not to names set under topics.*)", clientCommands},
	"topics.kv_events":            {"KV events from the engines; each relay and worker stage reads its own DC's topic (loadgen and demo append .dc-<dc hex>); a bridge writes its engine's DC topic", []string{CommandDemo, CommandRelay, CommandWorkers, CommandLoadgen, CommandBridge}},
	"topics.lanes":                {"CKF snapshots and deltas; partition p is physical lane p", []string{CommandDemo, CommandIndexer, CommandRelay}},
	"topics.queries":              {"prefix-match query requests from routers", []string{CommandDemo, CommandIndexer, CommandLoadgen, CommandQuery}},
	"topics.query_replies":        {"query replies, keyed by correlation id", []string{CommandDemo, CommandIndexer, CommandLoadgen, CommandQuery}},
	"topics.lane_events":          {"lane state changes and progress, keyed lane-<n>", indexerCommands},
	"topics.control":              {"snapshot requests from indexers to relays, keyed lane-<n>", []string{CommandDemo, CommandIndexer, CommandRelay}},
	"topics.dead_letter":          {"rejected records with their reason", []string{CommandDemo, CommandIndexer, CommandRelay, CommandWorkers}},
	"topics.snapshot_index":       {"compacted: where each lane's latest complete snapshot starts, keyed lane-<n>", []string{CommandDemo, CommandIndexer, CommandRelay}},
	"topics.relay_checkpoints":    {"the relays' own state checkpoints; partition p is lane p's relay", relayCommands},
	"topics.worker_queries":       {"worker-level match requests from routers; every DC's worker stage reads them in its own group", []string{CommandWorkers, CommandQuery}},
	"topics.worker_query_replies": {"worker stages' replies, one per selected DC, keyed by correlation id", []string{CommandWorkers, CommandQuery}},

	"bridge.endpoint":             {"the engine's ZeroMQ PUB endpoint of rank 0 (dialled, or bound with bridge.bind); required by bridge", bridgeCommands},
	"bridge.replay_endpoint":      {"the engine's ROUTER replay endpoint of rank 0; empty counts missed batches as lost instead of filling them", bridgeCommands},
	"bridge.topic":                {"ZeroMQ topic filter, the engine's kv-events topic; empty takes every message", bridgeCommands},
	"bridge.worker_id":            {"worker id (and Kafka key) of every record the bridge writes; unique among the DC's engines", bridgeCommands},
	"bridge.bind":                 {"bind bridge.endpoint and let the engine connect (engines with a non-wildcard endpoint)", bridgeCommands},
	"bridge.block_size":           {"the engine's block size in tokens; stored events of another size are refused and dead-lettered", bridgeCommands},
	"bridge.ranks":                {"data-parallel ranks of the engine; rank r uses the endpoints' ports plus r", bridgeCommands},
	"bridge.lora_names":           {"id=name items naming the LoRA ids of engines that send lora_id only; unmapped ids are refused", bridgeCommands},
	"bridge.buffer_batches":       {"batches received and not yet converted, per rank; a full buffer stops reading (gaps come from replay)", bridgeCommands},
	"bridge.replay_timeout":       {"wait for each reply of a replay request before the attempt ends and is retried", bridgeCommands},
	"bridge.replay_retries":       {"replays in a row that may stop short before the missing batches are reported lost", bridgeCommands},
	"bridge.idle_recheck":         {"silence after which a rank asks the replay socket for batches past the last one (0 disables)", bridgeCommands},
	"bridge.resume":               {"at start, read the worker's records back from Kafka and continue after the last batch written", bridgeCommands},
	"bridge.engines_file":         {"YAML or JSON file listing the engines this process bridges (engines: worker_id, endpoint, ...); empty: the one engine of bridge.endpoint", bridgeCommands},
	"bridge.lost_history":         {"when engine batches are lost: clear (the rank's blocks, so answers are short, not long; the default) or keep", bridgeCommands},
	"schema_registry.urls":        {"Confluent-compatible schema registry base URLs; empty uses the built-in schema ids", clientCommands},
	"schema_registry.username":    {"registry basic-auth user (with schema_registry.password)", clientCommands},
	"schema_registry.password":    {"registry basic-auth password, never printed (pass it by file or variable)", clientCommands},
	"schema_registry.timeout":     {"bound of each registry request: registrations at start, unseen ids while decoding", clientCommands},
	"schema_registry.lookup_only": {"look the schemas up instead of registering them (read-only registry account)", clientCommands},

	"http.listen":                 {"host:port of /healthz, /readyz, /metrics and the indexer's HTTP API (loadgen picks a free port)", processCommands},
	"http.tls.cert_file":          {"PEM certificate chain to serve HTTPS with (with http.tls.key_file); empty serves plain HTTP", processCommands},
	"http.tls.key_file":           {"PEM private key of http.tls.cert_file", processCommands},
	"http.tls.client_ca_file":     {"PEM CAs of the client certificates every route but /healthz and /readyz requires (needs HTTPS)", processCommands},
	"http.auth.bearer_token_file": {"file holding the bearer token every route but /healthz and /readyz requires (Authorization: Bearer); the token is never printed", processCommands},
	"log.level":                   {"minimum level logged: debug, info, warn or error", processCommands},
	"log.format":                  {"log encoding: json (one object per line) or console", processCommands},
	"metrics.report_interval":     {"how often counters and gauges reach /metrics", processCommands},

	"indexer.consumer_instance_id":     {"this replica's id in its lane leases; 0 draws a random one (must differ between replicas)", indexerCommands},
	"indexer.domain":                   {"indexer domain <32 hex>:<32 hex> (cache semantics:routing scope); required by indexer and relay", []string{CommandDemo, CommandIndexer, CommandRelay}},
	"indexer.domain_source":            {"how the domain's digests were obtained: explicit or default_derived", []string{CommandDemo, CommandIndexer, CommandRelay}},
	"indexer.lanes":                    {"lane map lane=dc,... (lane 0..63 to DC id); required by indexer, checked by relay, DCs of loadgen", []string{CommandDemo, CommandIndexer, CommandRelay, CommandLoadgen}},
	"indexer.remote_lanes":             {"lanes published in another region, lane=alias,...: read from MirrorMaker's copies of that region's lanes and snapshot index (design §8)", indexerCommands},
	"indexer.mirror_policy":            {"MirrorMaker's replication policy between regions: default (<alias>.<topic>) or identity (same names, one way)", indexerCommands},
	"indexer.bucket_count":             {"CKF bucket count every lane must publish (power of two); 0 derives it from expected_blocks_per_dc", []string{CommandIndexer}},
	"indexer.lag_commit_interval":      {"how often each replica commits its applied lane offsets to its lag group <prefix>ckf-indexer-<instance> (visibility only); default 5s", indexerCommands},
	"indexer.expected_blocks_per_dc":   {"blocks per DC that size the filter; must equal the relays' relay.expected_blocks", []string{CommandIndexer}},
	"indexer.seed":                     {"CKF addressing seed every lane must publish with; must equal the relays' relay.seed", indexerCommands},
	"indexer.verification_window":      {"positions below the tentative depth the search re-checks, 1..8", indexerCommands},
	"indexer.freshness.max_record_lag": {"largest lane lag in records still answered; 0 disables the bound", indexerCommands},
	"indexer.freshness.max_time_lag":   {"largest lane lag in time still answered; 0 disables the bound", indexerCommands},
	"indexer.query_group":              {"consumer group of the query topic, shared by the replicas", indexerCommands},
	"indexer.query_leave_after":        {"how long a replica that is not ready stays in the query group (it joins only once ready)", indexerCommands},
	"indexer.query_session_timeout":    {"how long requests on a dead replica's query partitions wait before another replica takes them", indexerCommands},
	"indexer.query_batch_size":         {"most query requests answered as one batch, 1..65536", indexerCommands},
	"indexer.reply_topic_prefixes":     {"prefixes a query's reply_topic may start with, comma-separated; none: only topics.query_replies", indexerCommands},
	"indexer.gc_percent":               {"GOGC the indexer sets at start; 0 keeps the runtime's (a GOGC variable wins)", indexerCommands},

	"relay.dc_id":                   {"DC id of the pool this relay publishes for", []string{CommandRelay}},
	"relay.lane":                    {"physical lane 0..63 the relay writes; indexer.lanes must map it to relay.dc_id", []string{CommandRelay}},
	"relay.expected_blocks":         {"blocks that size the relay's filter; must equal indexer.expected_blocks_per_dc", []string{CommandRelay}},
	"relay.seed":                    {"CKF addressing seed; must equal indexer.seed", []string{CommandRelay}},
	"relay.snapshot_every_deltas":   {"snapshot after this many deltas; 0 disables the count trigger", relayCommands},
	"relay.snapshot_delta_ratio":    {"snapshot once the deltas since the last one weigh this many snapshots; 0 disables", relayCommands},
	"relay.snapshot_interval":       {"snapshot this long after the previous one; 0 disables the time trigger", relayCommands},
	"relay.snapshot_idle_interval":  {"snapshot period while the lane is idle (keep lane retention above it); 0 means relay.snapshot_interval, otherwise at least it", relayCommands},
	"relay.heartbeat_interval":      {"heartbeat period of an idle lane, which tells idle from dead", relayCommands},
	"relay.publish_every_events":    {"close a publication batch after this many KV events", relayCommands},
	"relay.publish_max_delay":       {"close a non-empty publication batch this long after its first event; 0 closes it once the poll that opened it is applied", relayCommands},
	"relay.checkpoint_interval":     {"checkpoint the relay's exact state this long after the previous one; 0 disables", relayCommands},
	"relay.checkpoint_every_events": {"also checkpoint after this many KV events; 0 disables", relayCommands},
	"relay.silent_source_after":     {"count a source (worker, dp rank) silent after this long without a KV event while another published within it (ckf_relay_silent_sources); > 0", relayCommands},
	"relay.remote_regions":          {"aliases of the other regions whose indexers read this lane: their snapshot requests arrive on <alias>.<topics.control> (design §8)", []string{CommandRelay}},
	"relay.forget_source_after":     {"drop a source from the silence watch after this long without a KV event; above relay.silent_source_after", relayCommands},

	"workers.dc_id":                {"DC id whose KV-events topic (topics.kv_events) this worker-stage replica reads; names its answers and keys its checkpoints", workersCommands},
	"workers.checkpoint_topic":     {"compacted topic of the worker stage's checkpoints, keyed by DC; empty is topic_prefix + ckf-worker-checkpoints", workersCommands},
	"workers.checkpoint_interval":  {"least time between two checkpoints of a replica (a restart replays about this much); 0 writes none", workersCommands},
	"workers.reply_topic_prefixes": {"prefixes a worker query's reply_topic may start with (besides topics.worker_query_replies); others are refused", workersCommands},
	"workers.lag_commit_interval":  {"how often a replica commits its KV positions to the lag group ckf-workers-<KV topic>-<DC> (visibility only); 0 disables", workersCommands},

	"shutdown_timeout": {"bound on a graceful stop (drain, flush, commit, close)", processCommands},
	"startup_timeout":  {"bound on start-up, topic creation included", processCommands},
}

// Describe returns the help text of the setting at path, and whether there is one.
func Describe(path string) (Description, bool) {
	d, ok := descriptions[path]
	if !ok {
		return Description{}, false
	}
	d.UsedBy = slices.Clone(d.UsedBy)
	return d, true
}

// DescribedPaths returns the paths that have a Description, in no particular order, so that a
// test can find entries left behind by a removed setting.
func DescribedPaths() []string {
	out := make([]string, 0, len(descriptions))
	for p := range descriptions {
		out = append(out, p)
	}
	return out
}
