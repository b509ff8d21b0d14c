package config

import (
	"errors"
	"fmt"
	"math"
	"net"
	"net/url"
	"strconv"
	"strings"

	"github.com/ckf-stream/ckf-stream/ckf"
	"github.com/ckf-stream/ckf-stream/streams/relay"
)

// ErrInvalid matches every validation and loading error of this package via errors.Is.
var ErrInvalid = errors.New("config: invalid")

// FieldError is one invalid field. Field is the field's path as the file, flags and messages
// name it (indexer.verification_window), or the name of the variable or flag that carried a
// value that did not parse.
type FieldError struct {
	Field  string
	Reason string
	// Err is the underlying cause, when there is one (a parse or file error).
	Err error
}

// Error renders "config: <field>: <reason>".
func (e *FieldError) Error() string { return "config: " + e.Field + ": " + e.Reason }

// Unwrap returns the underlying cause.
func (e *FieldError) Unwrap() error { return e.Err }

// Is makes every FieldError match ErrInvalid.
func (e *FieldError) Is(target error) bool { return target == ErrInvalid }

// SASL mechanisms Kafka.SASL.Mechanism accepts.
const (
	SASLPlain       = "PLAIN"
	SASLScramSHA256 = "SCRAM-SHA-256"
	SASLScramSHA512 = "SCRAM-SHA-512"
)

type problems []error

func (p *problems) add(field, format string, a ...any) {
	*p = append(*p, &FieldError{Field: field, Reason: fmt.Sprintf(format, a...)})
}

// Validate reports every invalid field, each as a *FieldError joined with errors.Join, in the
// order of the Config's fields; nil when the whole configuration is valid. Topic names are
// checked as they are: call it on a Config from Load or Default, whose names are resolved.
func (c Config) Validate() error {
	var p problems
	c.Kafka.validate(&p)
	if strings.ContainsAny(c.TopicPrefix, " /\\") || !legalTopicChars(c.TopicPrefix) {
		p.add("topic_prefix", "%q holds characters a Kafka topic name cannot (allowed: a-z A-Z 0-9 . _ -)", c.TopicPrefix)
	}
	c.Topics.validate(&p)
	c.SchemaRegistry.validate(&p)
	if err := checkHostPort(c.HTTP.Listen, true); err != nil {
		p.add("http.listen", "%q %v", c.HTTP.Listen, err)
	}
	if t := c.HTTP.TLS; (t.CertFile == "") != (t.KeyFile == "") {
		if t.CertFile == "" {
			p.add("http.tls.cert_file", "is required when http.tls.key_file is set")
		} else {
			p.add("http.tls.key_file", "is required when http.tls.cert_file is set")
		}
	} else if t.ClientCAFile != "" && t.CertFile == "" {
		p.add("http.tls.client_ca_file", "needs HTTPS: set http.tls.cert_file and http.tls.key_file")
	}
	switch c.Log.Level {
	case "debug", "info", "warn", "error":
	default:
		p.add("log.level", "%q is not one of debug, info, warn, error", c.Log.Level)
	}
	switch c.Log.Format {
	case "json", "console":
	default:
		p.add("log.format", "%q is not one of json, console", c.Log.Format)
	}
	if c.Metrics.ReportInterval <= 0 {
		p.add("metrics.report_interval", "%v is not positive", c.Metrics.ReportInterval)
	}
	c.Indexer.validate(&p)
	c.Indexer.validateQuery(c.Topics, &p)
	c.Indexer.validateLanes(c.Topics, &p)
	c.Indexer.validateReplyTopicPrefixes(c.Topics, &p)
	c.Indexer.validateRegions(c.Topics, &p)
	c.Relay.validate(&p)
	c.Relay.validateRegions(c.Topics, &p)
	c.Bridge.validate(&p)
	c.Workers.validate(c.Topics, &p)
	if c.ShutdownTimeout <= 0 {
		p.add("shutdown_timeout", "%v is not positive", c.ShutdownTimeout)
	}
	if c.StartupTimeout <= 0 {
		p.add("startup_timeout", "%v is not positive", c.StartupTimeout)
	}
	return errors.Join(p...)
}

func (k Kafka) validate(p *problems) {
	for i, b := range k.Brokers {
		if err := checkHostPort(b, false); err != nil {
			p.add(fmt.Sprintf("kafka.brokers[%d]", i), "%q %v", b, err)
		}
	}
	for i, b := range k.QueryBrokers {
		if err := checkHostPort(b, false); err != nil {
			p.add(fmt.Sprintf("kafka.query_brokers[%d]", i), "%q %v", b, err)
		}
	}
	if len(k.QueryBrokers) > 0 && len(k.Brokers) == 0 {
		p.add("kafka.query_brokers", "is set, but kafka.brokers is empty and the embedded broker has no second listener")
	}
	if k.ClientID == "" {
		p.add("kafka.client_id", "must not be empty")
	}
	if k.TopicReplicationFactor < 0 || k.TopicReplicationFactor > math.MaxInt16 {
		p.add("kafka.topic_replication_factor", "%d is not in [0,%d]", k.TopicReplicationFactor, math.MaxInt16)
	}
	switch {
	case k.TopicMinInsyncReplicas < 0:
		p.add("kafka.topic_min_insync_replicas", "%d is negative", k.TopicMinInsyncReplicas)
	case k.TopicReplicationFactor > 0 && k.TopicMinInsyncReplicas > k.TopicReplicationFactor:
		p.add("kafka.topic_min_insync_replicas", "%d is more than kafka.topic_replication_factor (%d): no write could ever be acknowledged",
			k.TopicMinInsyncReplicas, k.TopicReplicationFactor)
	}
	embedded := len(k.Brokers) == 0
	t := k.TLS
	if !t.Enabled {
		for _, f := range []struct {
			name string
			set  bool
		}{
			{"ca_file", t.CAFile != ""}, {"cert_file", t.CertFile != ""}, {"key_file", t.KeyFile != ""},
			{"server_name", t.ServerName != ""}, {"insecure_skip_verify", t.InsecureSkipVerify},
		} {
			if f.set {
				p.add("kafka.tls."+f.name, "is set, but kafka.tls.enabled is false")
			}
		}
	} else if embedded {
		p.add("kafka.tls.enabled", "is true, but kafka.brokers is empty and the embedded broker serves plaintext only")
	}
	if (t.CertFile == "") != (t.KeyFile == "") {
		if t.CertFile == "" {
			p.add("kafka.tls.cert_file", "is required when kafka.tls.key_file is set")
		} else {
			p.add("kafka.tls.key_file", "is required when kafka.tls.cert_file is set")
		}
	}
	s := k.SASL
	switch upperASCII(s.Mechanism) {
	case "":
		if s.Username != "" {
			p.add("kafka.sasl.mechanism", "is required when kafka.sasl.username is set")
		} else if s.Password != "" {
			p.add("kafka.sasl.mechanism", "is required when kafka.sasl.password is set")
		}
	case SASLPlain, SASLScramSHA256, SASLScramSHA512:
		if s.Username == "" {
			p.add("kafka.sasl.username", "is required when kafka.sasl.mechanism is set")
		}
		if s.Password == "" {
			p.add("kafka.sasl.password", "is required when kafka.sasl.mechanism is set")
		}
		if embedded {
			p.add("kafka.sasl.mechanism", "is set, but kafka.brokers is empty and the embedded broker does not authenticate")
		}
	default:
		p.add("kafka.sasl.mechanism", "%q is not one of %s, %s, %s", s.Mechanism, SASLPlain, SASLScramSHA256, SASLScramSHA512)
	}
}

func (t Topics) validate(p *problems) {
	seen := map[string]string{}
	for _, f := range []struct{ field, name string }{
		{"topics.kv_events", t.KVEvents}, {"topics.lanes", t.Lanes}, {"topics.queries", t.Queries},
		{"topics.query_replies", t.QueryReplies}, {"topics.lane_events", t.LaneEvents},
		{"topics.control", t.Control}, {"topics.dead_letter", t.DeadLetter},
		{"topics.snapshot_index", t.SnapshotIndex},
		{"topics.worker_queries", t.WorkerQueries}, {"topics.worker_query_replies", t.WorkerQueryReplies},
	} {
		switch {
		case f.name == "" || f.name == "." || f.name == "..":
			p.add(f.field, "%q is not a valid topic name", f.name)
		case len(f.name) > 249:
			p.add(f.field, "%q is longer than Kafka's 249 characters", f.name)
		case !legalTopicChars(f.name):
			p.add(f.field, "%q holds characters a Kafka topic name cannot (allowed: a-z A-Z 0-9 . _ -)", f.name)
		case seen[f.name] != "":
			p.add(f.field, "%q is also the name of %s", f.name, seen[f.name])
		default:
			seen[f.name] = f.field
		}
	}
}

func (r SchemaRegistry) validate(p *problems) {
	for i, raw := range r.URLs {
		u, err := url.Parse(raw)
		switch {
		case err != nil:
			p.add(fmt.Sprintf("schema_registry.urls[%d]", i), "%q is not a URL", raw)
		case u.Scheme != "http" && u.Scheme != "https":
			p.add(fmt.Sprintf("schema_registry.urls[%d]", i), "%q is not an http or https URL", raw)
		case u.Host == "":
			p.add(fmt.Sprintf("schema_registry.urls[%d]", i), "%q has no host", raw)
		case u.User != nil:
			p.add(fmt.Sprintf("schema_registry.urls[%d]", i), "holds credentials; use schema_registry.username and schema_registry.password")
		case u.RawQuery != "" || u.Fragment != "":
			p.add(fmt.Sprintf("schema_registry.urls[%d]", i), "%q has a query or fragment; give the API's base URL", raw)
		}
	}
	if !r.Enabled() {
		for _, f := range []struct {
			name string
			set  bool
		}{{"username", r.Username != ""}, {"password", r.Password != ""}, {"lookup_only", r.LookupOnly}} {
			if f.set {
				p.add("schema_registry."+f.name, "is set, but schema_registry.urls is empty (built-in schema ids, no registry)")
			}
		}
	} else if (r.Username == "") != (r.Password == "") {
		if r.Username == "" {
			p.add("schema_registry.username", "is required when schema_registry.password is set")
		} else {
			p.add("schema_registry.password", "is required when schema_registry.username is set")
		}
	}
	if r.Timeout <= 0 {
		p.add("schema_registry.timeout", "%v is not positive", r.Timeout)
	}
}

func (ix Indexer) validate(p *problems) {
	// Both are reported: the source's validity does not depend on the domain's, nor the other way.
	src, err := ix.domainSource()
	if err != nil {
		*p = append(*p, err)
	}
	if ix.Domain != "" {
		if _, err := ix.domainWith(src); err != nil {
			*p = append(*p, err)
		}
	}
	dcLane := map[uint64]int{}
	for _, lane := range ix.Lanes.Lanes() {
		if err := relay.CheckLane(lane); err != nil {
			p.add("indexer.lanes", "lane %v", err)
			continue
		}
		dc := ix.Lanes[lane]
		if other, dup := dcLane[dc]; dup {
			p.add("indexer.lanes", "DC %#x is on lanes %d and %d; a DC publishes on one lane", dc, other, lane)
			continue
		}
		dcLane[dc] = lane
	}
	// The format's own check is the rule: a power of two in [2, ckf.MaxWireBucketCount].
	if ix.BucketCount != 0 && ckf.NewFormatIdentity(ix.Seed, ix.BucketCount).ValidateWire() != nil {
		p.add("indexer.bucket_count", "%d is not 0 or a power of two in [2,%d]", ix.BucketCount, ckf.MaxWireBucketCount)
	}
	if ix.BucketCount == 0 {
		if ix.ExpectedBlocksPerDC == 0 {
			p.add("indexer.expected_blocks_per_dc", "must be positive when indexer.bucket_count is 0")
		} else if n := bucketCountFor(ix.ExpectedBlocksPerDC); n == 0 || n > ckf.MaxWireBucketCount {
			p.add("indexer.expected_blocks_per_dc", "%d needs more than %d buckets", ix.ExpectedBlocksPerDC, ckf.MaxWireBucketCount)
		}
	}
	if w := ix.VerificationWindow; w < 1 || w > ckf.MaxVerificationWindow {
		p.add("indexer.verification_window", "%d is not in [1,%d]", w, ckf.MaxVerificationWindow)
	}
	if ix.QueryLeaveAfter <= 0 {
		p.add("indexer.query_leave_after", "%v is not positive", ix.QueryLeaveAfter)
	}
	if ix.GCPercent < 0 || ix.GCPercent > 10000 {
		p.add("indexer.gc_percent", "%d is not in [0,10000]", ix.GCPercent)
	}
}

// validateReplyTopicPrefixes checks indexer.reply_topic_prefixes against the topic names: a
// prefix that starts another topic of the product would let a query request's reply_topic write
// replies into it.
func (ix Indexer) validateReplyTopicPrefixes(t Topics, p *problems) {
	checkReplyTopicPrefixes("indexer.reply_topic_prefixes", ix.ReplyTopicPrefixes, t, p,
		struct{ field, name string }{"topics.worker_query_replies", t.WorkerQueryReplies})
}

// checkReplyTopicPrefixes checks the reply topic prefixes of setting field: each a legal start of
// a topic name that starts none of the product's topics but the service's own reply topic, else a
// request's reply_topic could write replies into it (also is the other query's reply topic).
func checkReplyTopicPrefixes(field string, prefixes []string, t Topics, p *problems, also ...struct{ field, name string }) {
	for i, prefix := range prefixes {
		switch {
		case prefix == "":
			p.add(field, "entry %d is empty, which would allow every topic", i)
			continue
		case len(prefix) > 249:
			p.add(field, "%q is longer than Kafka's 249 characters", prefix)
			continue
		case !legalTopicChars(prefix):
			p.add(field, "%q holds characters a Kafka topic name cannot (allowed: a-z A-Z 0-9 . _ -)", prefix)
			continue
		}
		for _, f := range append([]struct{ field, name string }{
			{"topics.kv_events", t.KVEvents}, {"topics.lanes", t.Lanes}, {"topics.queries", t.Queries},
			{"topics.lane_events", t.LaneEvents}, {"topics.control", t.Control},
			{"topics.dead_letter", t.DeadLetter}, {"topics.snapshot_index", t.SnapshotIndex},
			{"topics.relay_checkpoints", t.RelayCheckpoints}, {"topics.worker_queries", t.WorkerQueries},
		}, also...) {
			if strings.HasPrefix(f.name, prefix) {
				p.add(field, "%q would let a query reply into %s (%q)", prefix, f.field, f.name)
			}
		}
	}
}

func (b Bridge) validate(p *problems) {
	if b.BlockSize < 1 {
		p.add("bridge.block_size", "%d is not positive", b.BlockSize)
	}
	if b.Ranks < 1 || b.Ranks > 1024 {
		p.add("bridge.ranks", "%d is not in [1,1024]", b.Ranks)
	}
	if _, err := b.LoraMap(); err != nil {
		p.add("bridge.lora_names", "%v", err)
	}
	if b.BufferBatches < 1 {
		p.add("bridge.buffer_batches", "%d is not positive", b.BufferBatches)
	}
	if b.ReplayTimeout <= 0 {
		p.add("bridge.replay_timeout", "%v is not positive", b.ReplayTimeout)
	}
	if b.ReplayRetries < 0 {
		p.add("bridge.replay_retries", "%d is negative", b.ReplayRetries)
	}
	if b.LostHistory != "clear" && b.LostHistory != "keep" {
		p.add("bridge.lost_history", "%q is neither clear nor keep", b.LostHistory)
	}
	if b.IdleRecheck < 0 {
		p.add("bridge.idle_recheck", "%v is negative", b.IdleRecheck)
	}
	for _, f := range []struct{ name, ep string }{{"bridge.endpoint", b.Endpoint}, {"bridge.replay_endpoint", b.ReplayEndpoint}} {
		if f.ep == "" {
			continue
		}
		scheme, _, ok := strings.Cut(f.ep, "://")
		if !ok || (scheme != "tcp" && scheme != "ipc" && scheme != "inproc") {
			p.add(f.name, "%q is not a ZeroMQ endpoint (tcp://host:port)", f.ep)
		} else if scheme == "tcp" && b.Ranks > 1 {
			if i := strings.LastIndexByte(f.ep, ':'); i < 0 || !allDigits(f.ep[i+1:]) {
				p.add(f.name, "%q has no port to offset for %d ranks", f.ep, b.Ranks)
			}
		}
	}
}

func allDigits(s string) bool {
	for _, c := range s {
		if c < '0' || c > '9' {
			return false
		}
	}
	return s != ""
}

// DomainID parses Domain with DomainSource as the source of both digests (ckf's
// ParseIndexerDomainID, the one reading of the text form). An empty or malformed Domain, or an
// unknown DomainSource, is a *FieldError naming the field, wrapping ckf's error.
func (ix Indexer) DomainID() (ckf.IndexerDomainID, error) {
	src, err := ix.domainSource()
	if err != nil {
		return ckf.IndexerDomainID{}, err
	}
	return ix.domainWith(src)
}

// domainWith parses Domain with src as the source of both digests.
func (ix Indexer) domainWith(src ckf.IdentitySource) (ckf.IndexerDomainID, error) {
	id, err := ckf.ParseIndexerDomainID(ix.Domain, src)
	if err != nil {
		return ckf.IndexerDomainID{}, &FieldError{Field: "indexer.domain",
			Reason: fmt.Sprintf("%q is not <32 hex digits>:<32 hex digits>", ix.Domain), Err: err}
	}
	return id, nil
}

// domainSource parses DomainSource with ckf's names of the identity sources.
func (ix Indexer) domainSource() (ckf.IdentitySource, error) {
	var src ckf.IdentitySource
	if err := src.UnmarshalText([]byte(ix.DomainSource)); err != nil {
		return 0, &FieldError{Field: "indexer.domain_source",
			Reason: fmt.Sprintf("%q is not one of %s, %s", ix.DomainSource, ckf.IdentityExplicit, ckf.IdentityDefaultDerived), Err: err}
	}
	return src, nil
}

// EffectiveBucketCount returns the bucket count the indexer expects every lane to publish:
// BucketCount when set, else the one derived from ExpectedBlocksPerDC. It is 0 only for an
// invalid Indexer.
func (ix Indexer) EffectiveBucketCount() uint64 {
	if ix.BucketCount != 0 {
		return ix.BucketCount
	}
	return bucketCountFor(ix.ExpectedBlocksPerDC)
}

// bucketCountFor is ckf.BucketCountFor, with 0 for the inputs it refuses (n == 0, overflow).
func bucketCountFor(n uint64) uint64 {
	b, err := ckf.BucketCountFor(n)
	if err != nil {
		return 0
	}
	return b
}

func checkHostPort(s string, allowAnyPort bool) error {
	host, port, err := net.SplitHostPort(s)
	if err != nil {
		return errors.New("is not host:port")
	}
	n, err := strconv.ParseUint(port, 10, 16)
	if err != nil {
		return errors.New("has a port that is not a number in [0,65535]")
	}
	if n == 0 && !allowAnyPort {
		return errors.New("has port 0")
	}
	if host == "" && !allowAnyPort {
		return errors.New("has no host")
	}
	return nil
}

func legalTopicChars(s string) bool {
	for _, ch := range s {
		switch {
		case 'a' <= ch && ch <= 'z', 'A' <= ch && ch <= 'Z', '0' <= ch && ch <= '9', ch == '.', ch == '_', ch == '-':
		default:
			return false
		}
	}
	return true
}
