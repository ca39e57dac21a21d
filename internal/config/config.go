// Package config loads, validates and prints the wowd configuration: a YAML
// file whose settings live under the top-level key `wow`.
//
// Values come from four layers, each over the one before: the defaults
// (keys.go), the file, the WOW_* environment variables (the fixed keys
// outside contexts and dispatchers), and --set key=value arguments (any
// key, Helm's syntax in its simple cases). [Origins] tells which layer gave
// each value; `wowd config print` shows it.
//
// Decoding is strict (an unknown key is an error, with the closest known
// key), defaults and descriptions of the fixed keys are defined once in
// keys.go, and every problem found is reported at once in an [*Errors],
// each with its key path and, when known, its position in the file or the
// variable or --set pair that set it.
//
// Why the layers are merged here and not by viper, which the command line
// uses for --config and WOWD_CONFIG: viper folds keys to lower case, and
// dispatcher and context names are case-sensitive (a context's name is its
// topic alias); it decodes the file to plain maps, so an unknown or
// mistyped key could no longer be reported at its line and column; it
// reads the environment of the process only, where wowd's tests and
// `wowd config validate` pass one explicitly; and its WatchConfig goroutine
// cannot be stopped (and exits the process when a watcher cannot be made).
// So --set pairs are written into the parsed YAML document before the one
// strict decoding, the environment is applied to the decoded values, and
// the daemon watches the file with fsnotify itself (internal/daemon).
// [Changes] tells a reload which changed keys apply while running.
package config

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/wowd/wowd/internal/wow"

	"github.com/wowd/wowd/handler"
)

// Config is the effective wowd configuration: the file, the environment
// overrides and the defaults.
type Config struct {
	// Service is wow.service; it names the consumer groups.
	Service string
	// Metadata is a Wow wow-metadata.json file or a service's /wow/metadata
	// URL; its contexts are used when wow.contexts is empty and must agree
	// with it otherwise.
	Metadata        string
	MetadataTimeout time.Duration
	Kafka           Kafka
	Contexts        map[string]Context // wow.contexts, keyed by bounded context name
	Dispatch        Dispatch
	Dispatchers     map[string]Dispatcher // wow.dispatchers, keyed by dispatcher name
	Metrics         Metrics
	Ingest          Ingest
	Admin           Admin
	Log             Log
	Shutdown        Shutdown
	Memory          Memory
	Dev             Dev
	Tracing         Tracing
}

// Kafka is wow.kafka: the brokers and the consumer client settings.
type Kafka struct {
	BootstrapServers       []string
	TopicPrefix            string
	ClientID               string
	StartOffset            string // earliest or latest
	GroupProtocol          string // classic or consumer (KIP-848)
	FetchMaxBytes          int32
	FetchMaxPartitionBytes int32
	FetchMaxWait           time.Duration
	SessionTimeout         time.Duration
	RebalanceTimeout       time.Duration
	HeartbeatInterval      time.Duration
	CommitInterval         time.Duration
	// RevokeTimeout is how long a revoked partition may drain before it is
	// given up; it is shorter than RebalanceTimeout.
	RevokeTimeout time.Duration
	TLS           TLS
	SASL          SASL
}

// TLS is wow.kafka.tls.
type TLS struct {
	Enabled            bool
	CAFile             string
	CertFile           string
	KeyFile            string
	InsecureSkipVerify bool
}

// SASL is wow.kafka.sasl.
type SASL struct {
	Mechanism string // "", plain, scram-sha-256, scram-sha-512 or oauthbearer
	Username  string
	Password  string // secret: masked by WriteYAML
	// PasswordFile holds the password instead of Password, read at each
	// authentication.
	PasswordFile string
	// TokenFile holds the OAUTHBEARER token, read at each authentication.
	TokenFile string
}

// Context is an entry of wow.contexts: a bounded context, as Wow's
// metadata describes it.
type Context = wow.Context

// Dispatch is wow.dispatch: the executor that runs handlers.
type Dispatch struct {
	Workers         int // 0 means the number of available processors
	MaxInFlight     int
	Throughput      int
	BlockingWorkers int
}

// Dispatcher is one entry under wow.dispatchers: which topics it consumes
// and the handler it sends their messages to.
type Dispatcher struct {
	Topics []string // message kinds: command, event, state
	// Contexts are the bounded contexts consumed; Load fills in every
	// configured context, sorted, when the file names none.
	Contexts []string
	// GroupID overrides the consumer group; empty means the default,
	// computed by the daemon.
	GroupID string
	// Format is how records are read: wow (Wow messages, decoded, checked
	// and filterable) or raw (any bytes, passed through).
	Format string
	// Aggregates limits the dispatcher to these aggregates of its contexts;
	// empty means all.
	Aggregates []string
	// Events and Commands, when set, pass only event streams containing one
	// of the named events and commands with one of the names; other records
	// are acknowledged without a handler call.
	Events   []string
	Commands []string
	// DeadLetter says where records whose handler failed for good go.
	DeadLetter DeadLetter
	// OnFailure is park or dead-letter; empty means the default (see
	// FailurePolicy).
	OnFailure string
	// MaxParked bounds the aggregates a receiver keeps parked.
	MaxParked int
	// VersionCheck checks event streams' aggregate versions; OnGap is log
	// or park.
	VersionCheck bool
	OnGap        string
	Handler      Handler
}

// Failure policies of a dispatcher (on-failure).
const (
	OnFailurePark       = "park"
	OnFailureDeadLetter = "dead-letter"
)

// FailurePolicy returns what a message that failed for good does to its
// aggregate: on-failure when set; else park for Wow messages (they are
// events of aggregates, whose order handlers rely on) unless dead letters
// are disabled, in which case failures are held and retried as before;
// dead-letter for raw records.
func (d Dispatcher) FailurePolicy() string {
	switch {
	case d.OnFailure != "":
		return d.OnFailure
	case d.Format == "wow" && d.DeadLetter.Enabled:
		return OnFailurePark
	default:
		return OnFailureDeadLetter
	}
}

// DeadLetter configures a dispatcher's dead-letter topic.
type DeadLetter struct {
	// Enabled writes final failures to Topic and commits past them; when
	// false they are retried forever, holding their aggregate.
	Enabled bool
	// Topic is the dead-letter topic; "{topic}" stands for the source topic.
	Topic string
}

// DefaultHandlerTimeout is the default of handler.timeout.
const DefaultHandlerTimeout = time.Minute

// DefaultMaxParked is the default of max-parked.
const DefaultMaxParked = 1000

// DefaultDeadLetterTopic is the default dead-letter topic template.
const DefaultDeadLetterTopic = "{topic}.dlq"

// Handler is the handler mapping of a dispatcher.
type Handler struct {
	Type string // a name registered in the handler.Registry
	// Timeout bounds each try of a message in the handler: from the call, or
	// from the end of a retry wait the handler reported, to its
	// acknowledgement or its next retry report. 0 means no deadline.
	Timeout time.Duration
	Raw     map[string]any // the other keys of the mapping, as written
	Decoded any            // the result of handler.Decode
}

// Metrics is wow.metrics.
type Metrics struct {
	Listen string // host:port of /metrics, /healthz and /readyz; "" disables
	TLS    ListenerTLS
}

// ListenerTLS is the TLS of one of wowd's own listeners (wow.metrics.tls,
// wow.ingest.tls): PEM files, read again when they change. No cert-file
// means plain HTTP. Its fields are those of tlsconf.Files.
type ListenerTLS struct {
	CertFile string
	KeyFile  string
	// ClientCAFile, when set, requires every client to present a
	// certificate signed by one of its CAs (mutual TLS).
	ClientCAFile string
}

// Enabled reports whether the listener serves TLS.
func (t ListenerTLS) Enabled() bool { return t.CertFile != "" || t.KeyFile != "" }

// Ingest configures the local-first ingest endpoint.
type Ingest struct {
	Enabled bool
	// Listen is the ingest endpoint's host:port; "" serves it on the
	// metrics listener.
	Listen string
	// TokenFile is the file of the bearer token requests must carry; ""
	// requires none (allowed only on a loopback listener or with mutual TLS).
	TokenFile string
	// TLS is the TLS of the ingest endpoint's own listener.
	TLS ListenerTLS
	// MaxInFlight bounds the requests under way; 0 sets no bound.
	MaxInFlight int
	// RateLimit bounds the requests accepted per second; 0 sets no limit.
	RateLimit int
	// RateBurst is how many requests may come at once within RateLimit;
	// 0 means RateLimit.
	RateBurst int
}

// Admin is wow.admin: the admin API and status page.
type Admin struct {
	// Listen is the admin listener's host:port; "" disables it.
	Listen string
	// TokenFile is the file of the bearer token admin requests must carry;
	// "" requires none (allowed only on a loopback listener or with mutual
	// TLS).
	TokenFile string
	// TLS is the TLS of the admin listener.
	TLS ListenerTLS
}

// Log is wow.log.
type Log struct {
	Level  string // debug, info, warn or error
	Format string // json or console
}

// Shutdown is wow.shutdown.
type Shutdown struct {
	Timeout     time.Duration
	QuietPeriod time.Duration
}

// Memory is wow.memory: the process's memory budget (see internal/memory).
type Memory struct {
	// Limit is a size ("512MiB", bytes); empty: 80% of the container's
	// limit, else GOMEMLIMIT, else memory.DefaultLimit.
	Limit string
	// FetchPercent is the part of the limit, in percent, that the records
	// all Kafka clients fetch ahead may take together, decompressed.
	FetchPercent int
}

// Dev is wow.dev: settings of `wowd dev`.
// Tracing is wow.tracing: the spans wowd records (package tracing). What
// it leaves empty the OpenTelemetry SDK takes from the OTEL_* variables.
type Tracing struct {
	Enabled            bool
	Exporter           string   // otlp-http, otlp-grpc, or "" (OTEL_EXPORTER_OTLP_PROTOCOL)
	Endpoint           string   // the collector's base URL, or "" (OTEL_EXPORTER_OTLP_ENDPOINT)
	SamplingRatio      string   // 0 to 1, or "" (OTEL_TRACES_SAMPLER)
	ResourceAttributes []string // key=value pairs
}

type Dev struct {
	Partitions int  // partitions of each topic it creates
	Demo       bool // produce demo traffic
}

// Default returns a configuration holding every default, with empty
// contexts and dispatchers.
func Default() Config {
	c := Config{
		Contexts:    map[string]Context{},
		Dispatchers: map[string]Dispatcher{},
	}
	for _, f := range configFields {
		if f.def == "" || f.ptr == nil {
			continue
		}
		if err := setText(f.ptr(&c), f.def); err != nil {
			panic("config: bad default of " + f.name + ": " + err.Error())
		}
	}
	return c
}

// Sources are the layers over the file, by increasing precedence.
type Sources struct {
	// Env holds the environment, in the form of os.Environ; its WOW_*
	// variables override the file.
	Env []string
	// Set holds --set arguments (key=value pairs, see parseSets); they
	// override the file and the environment.
	Set []string
}

// Load reads the YAML file at path and returns the effective configuration:
// see [Parse]. A file that cannot be read is reported as a plain error.
// Unlike Parse, it also opens every file the configuration names (TLS
// certificates, keys and CAs, token and password files, a handler's *-file
// keys) and reports each that cannot be used with the other problems: the
// configuration is to run here.
func Load(path string, reg *handler.Registry, env []string) (*Config, error) {
	c, _, err := LoadSources(path, reg, Sources{Env: env})
	return c, err
}

// LoadSources is [Load] with every layer: see [ParseSources].
func LoadSources(path string, reg *handler.Registry, src Sources) (*Config, *Origins, error) {
	return LoadSourcesContext(context.Background(), path, reg, src)
}

// LoadSourcesContext is [LoadSources] that gives up reading wow.metadata
// when ctx is done, reporting it with the other problems (Outside).
func LoadSourcesContext(ctx context.Context, path string, reg *handler.Registry, src Sources) (*Config, *Origins, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, nil, fmt.Errorf("config: %w", err)
	}
	return parse(ctx, data, path, reg, src, true)
}

// Parse decodes data, a YAML document with the top-level key `wow`,
// strictly; applies the WOW_* variables of env (in the form of os.Environ);
// fills the defaults; decodes each handler configuration with reg (nil
// means handler.Default()) and validates the result. Every problem is
// reported at once in an *Errors naming the file name.
func Parse(data []byte, name string, reg *handler.Registry, env []string) (*Config, error) {
	c, _, err := ParseSources(data, name, reg, Sources{Env: env})
	return c, err
}

// ParseSources is [Parse] with every layer: the --set arguments of src are
// written into the document before it is decoded, so they are checked as
// strictly as the file (an unknown key is named, with the closest known
// one); the environment does not override what they set. The Origins say
// where each value came from.
func ParseSources(data []byte, name string, reg *handler.Registry, src Sources) (*Config, *Origins, error) {
	return parse(context.Background(), data, name, reg, src, false)
}

// ParseSourcesContext is [ParseSources] that gives up reading wow.metadata
// when ctx is done, reporting it with the other problems (Outside).
func ParseSourcesContext(ctx context.Context, data []byte, name string, reg *handler.Registry, src Sources) (*Config, *Origins, error) {
	return parse(ctx, data, name, reg, src, false)
}

// parse is ParseSources; with files, it also opens the files the
// configuration names (see checkFiles).
func parse(ctx context.Context, data []byte, name string, reg *handler.Registry, src Sources, files bool) (*Config, *Origins, error) {
	if reg == nil {
		reg = handler.Default()
	}
	d := newDecoder(reg)
	sets, errs := parseSets(src.Set)
	d.sets = sets
	d.errs = append(d.errs, errs...)
	c := Default()
	if d.decodeDocument(data, &c) {
		d.applyEnv(&c, src.Env)
		d.metadata(ctx, &c, name)
		d.complete(&c)
		d.validate(&c)
		if files {
			d.checkFiles(&c)
			d.checkEnv(&c, src.Env)
		}
	}
	if len(d.errs) > 0 {
		return nil, nil, d.errors(name)
	}
	return &c, &Origins{file: name, pos: d.pos, env: d.env, set: d.set, metadata: c.Metadata != ""}, nil
}
