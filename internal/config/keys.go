package config

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
)

// field is one fixed configuration key. The tables below are the single
// place where keys, defaults and descriptions are defined: decoding,
// defaulting, environment overrides, WriteYAML and Keys all read them.
type field[T any] struct {
	name      string       // key relative to its mapping; dots separate nested mappings
	def       string       // default, in the syntax of the file and the environment
	defDoc    string       // documented default when it is computed at load time
	typ       string       // documented type when ptr is nil
	desc      string       // one sentence or two for the reference
	secret    bool         // masked by WriteYAML
	omitEmpty bool         // left out by WriteYAML when empty
	ptr       func(*T) any // the field the key sets; nil for keys decoded apart
}

// configFields are the keys under wow, in the order WriteYAML prints them.
// The entries without ptr (contexts, dispatchers) are decoded apart.
var configFields = []field[Config]{
	{name: "service", desc: "Service name (required); names the consumer groups.",
		ptr: func(c *Config) any { return &c.Service }},

	{name: "metadata", omitEmpty: true,
		desc: "A Wow wow-metadata.json file (relative to the configuration file) or a running service's /wow/metadata URL, read at start: its bounded contexts (aliases and aggregates) are used when wow.contexts is empty, and must agree with wow.contexts otherwise.",
		ptr:  func(c *Config) any { return &c.Metadata }},
	{name: "metadata-timeout", def: "10s", desc: "Time limit for reading wow.metadata from a URL (> 0).",
		ptr: func(c *Config) any { return &c.MetadataTimeout }},

	{name: "kafka.bootstrap-servers", desc: "Kafka brokers to connect to, as host:port (required; in the environment, comma-separated).",
		ptr: func(c *Config) any { return &c.Kafka.BootstrapServers }},
	{name: "kafka.topic-prefix", def: "wow.", desc: "Prefix of topic names: <prefix><context alias>.<aggregate>.<command|event|state>.",
		ptr: func(c *Config) any { return &c.Kafka.TopicPrefix }},
	{name: "kafka.client-id", def: "wowd", desc: "Prefix of the Kafka client IDs: each receiver's client is <client-id>-<dispatcher>-<context alias> (its parking client adds -parking), the ingest producer's <client-id>-ingest. They label the client metrics, so no two may be equal: dispatcher and context names that meet through a '-' (a-b with context c, a with context b-c) are refused. At most 249 bytes, and no client ID it makes longer than 256 (the Kafka client's limit).",
		ptr: func(c *Config) any { return &c.Kafka.ClientID }},
	{name: "kafka.start-offset", def: "earliest", desc: "Where a consumer group without committed offsets starts: earliest or latest.",
		ptr: func(c *Config) any { return &c.Kafka.StartOffset }},
	{name: "kafka.group-protocol", def: "classic", desc: "Consumer group protocol: classic or consumer (KIP-848).",
		ptr: func(c *Config) any { return &c.Kafka.GroupProtocol }},
	{name: "kafka.fetch-max-bytes", def: "16777216", desc: "Maximum bytes of one fetch response: > 0, at most 104857600 (100 MiB, the largest response the Kafka client reads).",
		ptr: func(c *Config) any { return &c.Kafka.FetchMaxBytes }},
	{name: "kafka.fetch-max-partition-bytes", def: "1048576", desc: "Maximum bytes per partition in one fetch (> 0, at most fetch-max-bytes).",
		ptr: func(c *Config) any { return &c.Kafka.FetchMaxPartitionBytes }},
	{name: "kafka.fetch-max-wait", def: "500ms", desc: "How long the broker may wait to fill a fetch: 10ms or more (the Kafka client's least).",
		ptr: func(c *Config) any { return &c.Kafka.FetchMaxWait }},
	{name: "kafka.session-timeout", def: "45s", desc: "Consumer group session timeout: 100ms or more (the Kafka client's least).",
		ptr: func(c *Config) any { return &c.Kafka.SessionTimeout }},
	{name: "kafka.rebalance-timeout", def: "1m", desc: "How long members have to rejoin during a rebalance: 100ms or more (the Kafka client's least).",
		ptr: func(c *Config) any { return &c.Kafka.RebalanceTimeout }},
	{name: "kafka.heartbeat-interval", def: "3s", desc: "Consumer group heartbeat interval (> 0, less than session-timeout).",
		ptr: func(c *Config) any { return &c.Kafka.HeartbeatInterval }},
	{name: "kafka.commit-interval", def: "1s", desc: "How often handled offsets are committed (> 0).",
		ptr: func(c *Config) any { return &c.Kafka.CommitInterval }},
	{name: "kafka.revoke-timeout", def: "20s", desc: "How long a revoked partition may drain its in-flight messages (> 0, less than rebalance-timeout).",
		ptr: func(c *Config) any { return &c.Kafka.RevokeTimeout }},
	{name: "kafka.tls.enabled", def: "false", desc: "Connect to the brokers over TLS.",
		ptr: func(c *Config) any { return &c.Kafka.TLS.Enabled }},
	{name: "kafka.tls.ca-file", desc: "PEM file of the CAs to trust instead of the system's.",
		ptr: func(c *Config) any { return &c.Kafka.TLS.CAFile }},
	{name: "kafka.tls.cert-file", desc: "PEM client certificate (with key-file).",
		ptr: func(c *Config) any { return &c.Kafka.TLS.CertFile }},
	{name: "kafka.tls.key-file", desc: "PEM client key (with cert-file).",
		ptr: func(c *Config) any { return &c.Kafka.TLS.KeyFile }},
	{name: "kafka.tls.insecure-skip-verify", def: "false", desc: "Do not verify the brokers' certificates (testing only).",
		ptr: func(c *Config) any { return &c.Kafka.TLS.InsecureSkipVerify }},
	{name: "kafka.sasl.mechanism", desc: "SASL mechanism: plain, scram-sha-256, scram-sha-512 or oauthbearer; empty disables SASL.",
		ptr: func(c *Config) any { return &c.Kafka.SASL.Mechanism }},
	{name: "kafka.sasl.username", desc: "SASL user name (required with plain and scram mechanisms).",
		ptr: func(c *Config) any { return &c.Kafka.SASL.Username }},
	{name: "kafka.sasl.password", secret: true, desc: "SASL password (secret; with plain and scram mechanisms, this or password-file is required).",
		ptr: func(c *Config) any { return &c.Kafka.SASL.Password }},
	{name: "kafka.sasl.password-file", omitEmpty: true,
		desc: "File holding the SASL password, instead of password: trimmed, read at start and again at each authentication, so it can be rotated without a restart.",
		ptr:  func(c *Config) any { return &c.Kafka.SASL.PasswordFile }},
	{name: "kafka.sasl.token-file", omitEmpty: true,
		desc: "File holding the OAuth bearer token (a JWT) for mechanism oauthbearer (required with it): trimmed, read at start and again at each authentication, so whatever refreshes the file (a sidecar, a projected service account token) refreshes wowd's token. The brokers ask for a new authentication when a token's session expires.",
		ptr:  func(c *Config) any { return &c.Kafka.SASL.TokenFile }},

	{name: "contexts", typ: "map of context", desc: "Bounded contexts, by name (at least one)."},

	{name: "dispatch.workers", def: "0", desc: "Workers running handlers; 0 means the number of available processors. At most 4096: one per processor is the design, and each worker adds 16 mailbox shards to the executor.",
		ptr: func(c *Config) any { return &c.Dispatch.Workers }},
	{name: "dispatch.max-in-flight", def: "256", desc: "Messages in flight per receiver before it pauses fetching (1 to 65536: each receiver holds that many records in memory).",
		ptr: func(c *Config) any { return &c.Dispatch.MaxInFlight }},
	{name: "dispatch.throughput", def: "16", desc: "Messages a worker runs from one mailbox before moving on (1 to 65536: a mailbox never holds more than a window).",
		ptr: func(c *Config) any { return &c.Dispatch.Throughput }},
	{name: "dispatch.blocking-workers", def: "64", desc: "Size of the bounded pool for handlers that block (1 to 4096: each may hold an OS thread in a blocking call, and the Go runtime stops the process at 10000 threads).",
		ptr: func(c *Config) any { return &c.Dispatch.BlockingWorkers }},

	{name: "dispatchers", typ: "map of dispatcher", desc: "Dispatchers, by name (at least one): topics consumed and the handler they go to."},

	{name: "metrics.listen", def: "127.0.0.1:9464", desc: "host:port serving /metrics, /healthz and /readyz; empty disables.",
		ptr: func(c *Config) any { return &c.Metrics.Listen }},
	{name: "metrics.tls.cert-file", omitEmpty: true,
		desc: "PEM certificate (chain, leaf first) served by the metrics listener, with metrics.tls.key-file; empty serves plain HTTP. TLS 1.2 at least. The files are read again within a second when they change, so certificates can be rotated without a restart; files that cannot be used keep the previous pair and are read again every second until they can.",
		ptr:  func(c *Config) any { return &c.Metrics.TLS.CertFile }},
	{name: "metrics.tls.key-file", omitEmpty: true,
		desc: "PEM private key of metrics.tls.cert-file.",
		ptr:  func(c *Config) any { return &c.Metrics.TLS.KeyFile }},
	{name: "metrics.tls.client-ca-file", omitEmpty: true,
		desc: "PEM CAs of the client certificates the metrics listener requires (mutual TLS; needs metrics.tls.cert-file); clients without one are refused in the handshake, Kubernetes' HTTP probes included (use TCP probes then). Read again when it changes.",
		ptr:  func(c *Config) any { return &c.Metrics.TLS.ClientCAFile }},
	{name: "ingest.enabled", def: "false",
		desc: "Serve POST /v1/messages: a co-located producer hands wowd a Wow message, which is handled here first and published to its topic marked as handled by the dispatchers that finished it.",
		ptr:  func(c *Config) any { return &c.Ingest.Enabled }},
	{name: "ingest.listen", omitEmpty: true,
		desc: "host:port of the ingest endpoint; empty serves it on the metrics listener, which must then be loopback.",
		ptr:  func(c *Config) any { return &c.Ingest.Listen }},
	{name: "ingest.token-file", omitEmpty: true,
		desc: "File holding the bearer token every ingest request must carry (Authorization: Bearer <token>), compared in constant time; others are answered 401 and nothing is published. Read again within a second when the file changes, so the token can be rotated without a restart; a changed file that cannot be used keeps the previous token and is read again every second until it can. Required when ingest.listen is not loopback (127.0.0.0/8, ::1, localhost); an empty or unreadable file stops the start.",
		ptr:  func(c *Config) any { return &c.Ingest.TokenFile }},
	{name: "ingest.tls.cert-file", omitEmpty: true,
		desc: "PEM certificate (chain, leaf first) served by the ingest listener, with ingest.tls.key-file; empty serves plain HTTP. TLS 1.2 at least. The files are read again within a second when they change, so certificates can be rotated without a restart; files that cannot be used keep the previous pair and are read again every second until they can.",
		ptr:  func(c *Config) any { return &c.Ingest.TLS.CertFile }},
	{name: "ingest.tls.key-file", omitEmpty: true,
		desc: "PEM private key of ingest.tls.cert-file.",
		ptr:  func(c *Config) any { return &c.Ingest.TLS.KeyFile }},
	{name: "ingest.tls.client-ca-file", omitEmpty: true,
		desc: "PEM CAs of the client certificates the ingest listener requires (mutual TLS; needs ingest.tls.cert-file); clients without one are refused in the handshake. Authenticates ingest off loopback as ingest.token-file does (either or both). Read again when it changes.",
		ptr:  func(c *Config) any { return &c.Ingest.TLS.ClientCAFile }},
	{name: "ingest.max-in-flight", def: "256",
		desc: "Ingest requests under way at most (each waits for its message to be handled here and published); more are answered 503 with Retry-After before their body is read. 0 sets no bound.",
		ptr:  func(c *Config) any { return &c.Ingest.MaxInFlight }},
	{name: "ingest.rate-limit", def: "0",
		desc: "Ingest requests accepted per second at most on the ingest listener, counted after authentication; more are answered 429 with Retry-After before their body is read. 0 sets no limit.",
		ptr:  func(c *Config) any { return &c.Ingest.RateLimit }},
	{name: "ingest.rate-burst", def: "0",
		desc: "Ingest requests that may come at once after a quiet period, within rate-limit; 0 means rate-limit (a second's worth).",
		ptr:  func(c *Config) any { return &c.Ingest.RateBurst }},
	{name: "admin.listen", omitEmpty: true,
		desc: "host:port of the admin API (/admin/v1/status, the parked-aggregate actions) and the status page /admin/; empty (the default) disables it. configs/wowd.yaml and configs/dev.yaml turn it on at 127.0.0.1:9466 (9465 is the ingest examples'). Off loopback (127.0.0.0/8, ::1, localhost) it requires admin.token-file or admin.tls.client-ca-file.",
		ptr:  func(c *Config) any { return &c.Admin.Listen }},
	{name: "admin.token-file", omitEmpty: true,
		desc: "File holding the bearer token of the admin API (Authorization: Bearer <token>), read again within a second when it changes (a changed file that cannot be used keeps the previous token and is read again every second until it can). With it, every admin request must carry the token, reads included. Without it (and without admin.tls.client-ca-file) only a loopback listener is allowed: it answers reads from this machine addressed to a loopback host name, and actions only from loopback clients.",
		ptr:  func(c *Config) any { return &c.Admin.TokenFile }},
	{name: "admin.tls.cert-file", omitEmpty: true,
		desc: "PEM certificate (chain, leaf first) served by the admin listener, with admin.tls.key-file; empty serves plain HTTP. TLS 1.2 at least; rotated without a restart like metrics.tls.cert-file.",
		ptr:  func(c *Config) any { return &c.Admin.TLS.CertFile }},
	{name: "admin.tls.key-file", omitEmpty: true,
		desc: "PEM private key of admin.tls.cert-file.",
		ptr:  func(c *Config) any { return &c.Admin.TLS.KeyFile }},
	{name: "admin.tls.client-ca-file", omitEmpty: true,
		desc: "PEM CAs of the client certificates the admin listener requires (mutual TLS; needs admin.tls.cert-file); clients without one are refused in the handshake. Authenticates the admin API off loopback as admin.token-file does (either or both).",
		ptr:  func(c *Config) any { return &c.Admin.TLS.ClientCAFile }},
	{name: "log.level", def: "info", desc: "Log level: debug, info, warn or error.",
		ptr: func(c *Config) any { return &c.Log.Level }},
	{name: "log.format", def: "json", desc: "Log format: json or console.",
		ptr: func(c *Config) any { return &c.Log.Format }},
	{name: "shutdown.timeout", def: "30s", desc: "How long a stop may drain in-flight messages (> 0).",
		ptr: func(c *Config) any { return &c.Shutdown.Timeout }},
	{name: "shutdown.quiet-period", def: "0s", desc: "Quiet period of a stop, counted within timeout (>= 0, less than timeout).",
		ptr: func(c *Config) any { return &c.Shutdown.QuietPeriod }},
	{name: "memory.limit", omitEmpty: true,
		desc: "The process's memory budget, a size (bytes, or with KiB, MiB, GiB, KB, MB, GB; at least 32MiB), set as the Go runtime's soft memory limit and shared by all receivers' fetch buffers. Empty: 80% of the container's memory limit (cgroup v2 or v1), else GOMEMLIMIT, else 256MiB.",
		ptr:  func(c *Config) any { return &c.Memory.Limit }},
	{name: "memory.fetch-percent", def: "10",
		desc: "Percent of memory.limit that the records all Kafka clients fetch ahead may hold together, decompressed (1 to 90). Each receiver sizes its fetches to its equal part, from the compression it observes; kafka.fetch-max-bytes and fetch-max-partition-bytes stay upper bounds.",
		ptr:  func(c *Config) any { return &c.Memory.FetchPercent }},
	{name: "tracing.enabled", def: "false",
		desc: "Record an OpenTelemetry span per message, from its mailbox entry to its acknowledgement, a child of the record's traceparent. A record's W3C trace context reaches handlers and the HTTP sink whether or not this is on. OTEL_SDK_DISABLED=true turns it off.",
		ptr:  func(c *Config) any { return &c.Tracing.Enabled }},
	{name: "tracing.exporter", omitEmpty: true,
		desc: "How spans are exported: otlp-http (OTLP protobuf over HTTP) or otlp-grpc. Empty: otlp-grpc when OTEL_EXPORTER_OTLP_TRACES_PROTOCOL or OTEL_EXPORTER_OTLP_PROTOCOL is grpc, else otlp-http.",
		ptr:  func(c *Config) any { return &c.Tracing.Exporter }},
	{name: "tracing.endpoint", omitEmpty: true,
		desc: "The collector's base URL, as OTEL_EXPORTER_OTLP_ENDPOINT takes it: http://host:port for plain text, https://host:port for TLS; otlp-http posts to its path + /v1/traces. Empty: OTEL_EXPORTER_OTLP_TRACES_ENDPOINT or OTEL_EXPORTER_OTLP_ENDPOINT, else localhost:4318 (HTTP) or localhost:4317 (gRPC).",
		ptr:  func(c *Config) any { return &c.Tracing.Endpoint }},
	{name: "tracing.sampling-ratio", omitEmpty: true,
		desc: "Fraction of the traces starting at wowd that are sampled, 0 to 1 (parent-based: a message whose producer's traceparent says sampled or not follows it). Empty: OTEL_TRACES_SAMPLER and OTEL_TRACES_SAMPLER_ARG decide, else every trace is sampled.",
		ptr:  func(c *Config) any { return &c.Tracing.SamplingRatio }},
	{name: "tracing.resource-attributes", omitEmpty: true,
		desc: "Resource attributes as key=value (in the environment, comma-separated); they win over OTEL_RESOURCE_ATTRIBUTES and OTEL_SERVICE_NAME, which win over service.name = wow.service.",
		ptr:  func(c *Config) any { return &c.Tracing.ResourceAttributes }},
	{name: "dev.partitions", def: "8", desc: "Partitions of each topic `wowd dev` creates (1 to 1000).",
		ptr: func(c *Config) any { return &c.Dev.Partitions }},
	{name: "dev.demo", def: "false", desc: "Make `wowd dev` produce demo traffic.",
		ptr: func(c *Config) any { return &c.Dev.Demo }},
}

// reloadFields are the fixed keys a running wowd applies when the file
// changes (see Changes); a change of any other needs a restart. Handler
// keys are marked with the tag reload:"true" instead.
var reloadFields = map[string]bool{
	"log.level": true,
}

// contextFields are the keys of one entry of wow.contexts.
var contextFields = []field[Context]{
	{name: "alias", defDoc: "the context name", desc: "Name of the context in topic names; may contain dots.",
		ptr: func(c *Context) any { return &c.Alias }},
	{name: "aggregates", desc: "Aggregates of the context (required, unique).",
		ptr: func(c *Context) any { return &c.Aggregates }},
}

// dispatcherFields are the keys of one entry of wow.dispatchers. The other
// keys of its handler mapping belong to the handler type.
var dispatcherFields = []field[Dispatcher]{
	{name: "topics", desc: "Kinds of topics consumed: command, event, state (required, unique).",
		ptr: func(d *Dispatcher) any { return &d.Topics }},
	{name: "contexts", defDoc: "every context", desc: "Bounded contexts consumed.",
		ptr: func(d *Dispatcher) any { return &d.Contexts }},
	{name: "format", def: "wow",
		desc: "How records are read: wow (Wow messages: decoded, checked against key and topic, filterable; one that does not decode or does not match its key and topic is counted unroutable and dead-lettered, or logged and skipped when dead-letter.enabled is false; for a routing-only handler (discard, or a plugin whose Spec sets RoutingOnly) without version-check only the message's structure and routing fields are decoded and checked) or raw (any bytes, passed through).",
		ptr:  func(d *Dispatcher) any { return &d.Format }},
	{name: "aggregates", defDoc: "every aggregate", omitEmpty: true,
		desc: "Aggregates of the dispatcher's contexts it consumes.",
		ptr:  func(d *Dispatcher) any { return &d.Aggregates }},
	{name: "events", omitEmpty: true,
		desc: "Event names (snake_case, e.g. cart_item_added): only event streams and state events containing one of them reach the handler (format wow).",
		ptr:  func(d *Dispatcher) any { return &d.Events }},
	{name: "commands", omitEmpty: true,
		desc: "Command names (e.g. add_cart_item): only these commands reach the handler (format wow).",
		ptr:  func(d *Dispatcher) any { return &d.Commands }},
	{name: "group-id", defDoc: "<service>.<dispatcher>.<context alias>", omitEmpty: true,
		desc: "Consumer group ID override; with several contexts each receiver's group is <group-id>.<context alias>. No two receivers may share a group (on topics both read each message would reach only one of their handlers; on others each one's rebalances and rewinds would involve the other): equal group-ids, even of dispatchers on different topics, or default groups that meet through a '.' (dispatcher a.b with context c, a with context b.c), are refused.",
		ptr:  func(d *Dispatcher) any { return &d.GroupID }},
	{name: "dead-letter.enabled", def: "true",
		desc: "Write records whose handler failed for good to the dead-letter topic, then commit past them. When false they are retried forever, holding their aggregate and the partition's commit.",
		ptr:  func(d *Dispatcher) any { return &d.DeadLetter.Enabled }},
	{name: "dead-letter.topic", def: DefaultDeadLetterTopic,
		desc: "Dead-letter topic; {topic} stands for the source topic. With dead letters on, it must fit Kafka's 249 characters for every topic the dispatcher consumes, as the parked topics (<topic>.parked) must with on-failure park.",
		ptr:  func(d *Dispatcher) any { return &d.DeadLetter.Topic }},
	{name: "on-failure", defDoc: "park with format wow (unless dead-letter.enabled is false), else dead-letter", omitEmpty: true,
		desc: "What a message that failed for good does to its aggregate: park (it and the aggregate's later messages go, in order, to <topic>.parked, and the aggregate waits there for `wowd parked redrive|skip|discard`; other aggregates and the partition's commit go on) or dead-letter (it goes to the dead-letter topic and the aggregate's next message runs). Undecodable and unroutable records are always dead-lettered.",
		ptr:  func(d *Dispatcher) any { return &d.OnFailure }},
	{name: "version-check", def: "false",
		desc: "Check the aggregate version of each event stream (format wow) against the last one handled of its aggregate, while the aggregate is active: one not above it is a duplicate, skipped; one past the next is a gap, logged and counted (wowd_version_checks_total), and parked with on-gap park.",
		ptr:  func(d *Dispatcher) any { return &d.VersionCheck }},
	{name: "on-gap", def: "log",
		desc: "What a version gap does (version-check): log (the message is handled) or park (the aggregate parks at the message; needs version-check and on-failure park). A redriven message is never parked for a gap; a message taken in through the local-first ingest is not parked where it was ingested but, with park, given up there, and the owner of its partition parks the aggregate at its copy if the gap is one there.",
		ptr:  func(d *Dispatcher) any { return &d.OnGap }},
	{name: "max-parked", def: "1000",
		desc: "Most aggregates a receiver of the dispatcher keeps parked (on-failure park). When another would park, the receiver pauses fetching and says so (wowd_receiver_park_full, a warning) until one is unparked: nothing is dropped.",
		ptr:  func(d *Dispatcher) any { return &d.MaxParked }},
	{name: "handler.type", desc: "Handler type (required): a registered handler name; the other keys of handler configure it.",
		ptr: func(d *Dispatcher) any { return &d.Handler.Type }},
	{name: "handler.timeout", def: "1m",
		desc: "Longest a handler may take over one try of a message: from the call (or the end of a retry wait the handler reported) to its acknowledgement or next retry report, less waits for the handler's own limits it reported (the unbatched http sink's rate-limit and max-concurrency). Past it the try counts as a transient failure and a late acknowledgement is ignored; 0 means no deadline.",
		ptr:  func(d *Dispatcher) any { return &d.Handler.Timeout }},
}

// KeyDoc documents one fixed configuration key.
type KeyDoc struct {
	Path        string // e.g. wow.kafka.topic-prefix or wow.contexts.<name>.alias
	Type        string // string, int, bool, duration, list of string, map of ...
	Default     string // empty when there is none
	Description string
	Env         string // the overriding environment variable, if any
	Reload      bool   // applied while running when the file changes
}

// Keys describes every fixed key, in file order. The per-handler keys are
// described by handler.Fields.
func Keys() []KeyDoc {
	var out []KeyDoc
	for _, f := range configFields {
		path := "wow." + f.name
		out = append(out, keyDoc(path, f))
		switch f.name {
		case "contexts":
			for _, g := range contextFields {
				out = append(out, keyDoc(path+".<name>."+g.name, g))
			}
		case "dispatchers":
			for _, g := range dispatcherFields {
				out = append(out, keyDoc(path+".<name>."+g.name, g))
			}
		}
	}
	return out
}

func keyDoc[T any](path string, f field[T]) KeyDoc {
	k := KeyDoc{Path: path, Type: f.typ, Default: f.def, Description: f.desc}
	if f.ptr != nil {
		var zero T
		k.Type = typeName(f.ptr(&zero))
		if _, ok := any(zero).(Config); ok {
			k.Env = envName(f.name)
			k.Reload = reloadFields[f.name]
		}
	}
	if k.Default == "" {
		k.Default = f.defDoc
	}
	return k
}

// EnvVars returns the supported environment variables, sorted.
func EnvVars() []string {
	var out []string
	for _, f := range configFields {
		if f.ptr != nil {
			out = append(out, envName(f.name))
		}
	}
	slices.Sort(out)
	return out
}

// envKey is the key the variable name (one of EnvVars) overrides.
func envKey(name string) string {
	for _, f := range configFields {
		if f.ptr != nil && envName(f.name) == name {
			return "wow." + f.name
		}
	}
	return ""
}

// envName is the variable overriding wow.<name>: WOW_ and the name
// upper-cased, with dots and dashes turned into underscores.
func envName(name string) string {
	return "WOW_" + strings.ToUpper(strings.NewReplacer(".", "_", "-", "_").Replace(name))
}

func typeName(p any) string {
	switch p.(type) {
	case *string:
		return "string"
	case *[]string:
		return "list of string"
	case *int, *int32:
		return "int"
	case *bool:
		return "bool"
	case *time.Duration:
		return "duration"
	}
	panic(fmt.Sprintf("config: no type name for %T", p))
}

// setText parses s, a default or an environment value, into the field p
// points to. Lists are comma-separated.
func setText(p any, s string) error {
	switch p := p.(type) {
	case *string:
		*p = s
	case *[]string:
		var l []string
		for item := range strings.SplitSeq(s, ",") {
			if item = strings.TrimSpace(item); item != "" {
				l = append(l, item)
			}
		}
		*p = l
	case *int:
		n, err := parseInt(s, strconv.IntSize)
		if err != nil {
			return err
		}
		*p = int(n)
	case *int32:
		n, err := parseInt(s, 32)
		if err != nil {
			return err
		}
		*p = int32(n)
	case *bool:
		b, err := strconv.ParseBool(s)
		if err != nil {
			return fmt.Errorf("%q is not true or false", s)
		}
		*p = b
	case *time.Duration:
		d, err := time.ParseDuration(s)
		if err != nil {
			return fmt.Errorf("%q is not a duration (e.g. 500ms, 30s, 1m)", s)
		}
		*p = d
	default:
		panic(fmt.Sprintf("config: cannot set %T", p))
	}
	return nil
}

func parseInt(s string, bits int) (int64, error) {
	n, err := strconv.ParseInt(s, 10, bits)
	if err == nil {
		return n, nil
	}
	if errors.Is(err, strconv.ErrRange) {
		return 0, fmt.Errorf("%s is out of range", s)
	}
	return 0, fmt.Errorf("%q is not an integer", s)
}

// formatDuration prints d as Go does, without the zero units it ends with:
// 1m rather than 1m0s.
func formatDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = s[:len(s)-2]
	}
	if strings.HasSuffix(s, "h0m") {
		s = s[:len(s)-2]
	}
	return s
}
