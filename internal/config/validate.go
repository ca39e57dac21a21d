package config

import (
	"errors"
	"fmt"
	"maps"
	"math"
	"net"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/go-viper/mapstructure/v2"

	"github.com/wowd/wowd/handler"
	"github.com/wowd/wowd/internal/handlerconfig"
	"github.com/wowd/wowd/internal/memory"
)

var (
	namePattern  = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]*$`)
	topicPattern = regexp.MustCompile(`^[A-Za-z0-9._-]*$`)
)

// Upper bounds of wow.dispatch, far above what any machine uses, so that a
// typo (an extra zero or three) is refused instead of run.
const (
	// MaxWorkers bounds wow.dispatch.workers: one worker per processor is
	// the design, and each worker adds 16 mailbox shards to the executor.
	MaxWorkers = 4096
	// MaxInFlight bounds wow.dispatch.max-in-flight: each receiver holds
	// up to that many records in memory.
	MaxInFlight = 65536
	// MaxBlockingWorkers bounds wow.dispatch.blocking-workers: each may
	// hold an OS thread in a blocking call, and the Go runtime stops the
	// process at 10000 threads.
	MaxBlockingWorkers = 4096
	// MaxThroughput bounds wow.dispatch.throughput: a mailbox never holds
	// more than a window of tasks, and MaxInFlight bounds the window.
	MaxThroughput = MaxInFlight
)

const (
	maxTopicLen = 249 // Kafka's limit
	nameRule    = "letters, digits, '.', '_' and '-', starting with a letter or digit"
)

// validate checks the decoded configuration, recording every problem.
func (d *decoder) validate(c *Config) {
	if c.Service == "" {
		d.errorf("wow.service", "required")
	} else {
		d.name("wow.service", c.Service)
	}
	d.positive("wow.metadata-timeout", c.MetadataTimeout)
	d.validateKafka(&c.Kafka)
	d.validateContexts(c)
	d.between("wow.dispatch.workers", c.Dispatch.Workers, 0, MaxWorkers)
	d.between("wow.dispatch.max-in-flight", c.Dispatch.MaxInFlight, 1, MaxInFlight)
	d.between("wow.dispatch.throughput", c.Dispatch.Throughput, 1, MaxThroughput)
	d.between("wow.dispatch.blocking-workers", c.Dispatch.BlockingWorkers, 1, MaxBlockingWorkers)
	d.validateDispatchers(c)
	d.validateNames(c)
	if c.Metrics.Listen != "" {
		d.hostPort("wow.metrics.listen", c.Metrics.Listen, true)
	}
	d.listenerTLS("wow.metrics", c.Metrics.Listen != "", c.Metrics.TLS)
	if c.Ingest.Listen != "" {
		d.hostPort("wow.ingest.listen", c.Ingest.Listen, true)
	}
	if c.Ingest.TLS.Enabled() || c.Ingest.TLS.ClientCAFile != "" {
		if c.Ingest.Listen == "" {
			d.errorf("wow.ingest.tls", "set, but ingest has no listener of its own (wow.ingest.listen is empty): it is served on the metrics listener, whose TLS is wow.metrics.tls")
		} else {
			d.listenerTLS("wow.ingest", true, c.Ingest.TLS)
		}
	}
	if c.Ingest.Enabled {
		d.validateIngest(c)
	}
	d.validateTracing(&c.Tracing)
	d.atLeast("wow.ingest.max-in-flight", c.Ingest.MaxInFlight, 0)
	d.atLeast("wow.ingest.rate-limit", c.Ingest.RateLimit, 0)
	d.atLeast("wow.ingest.rate-burst", c.Ingest.RateBurst, 0)
	if c.Ingest.RateBurst > 0 && c.Ingest.RateLimit == 0 {
		d.errorf("wow.ingest.rate-burst", "needs wow.ingest.rate-limit: without a rate there is no burst to bound")
	}
	if c.Admin.Listen != "" {
		d.hostPort("wow.admin.listen", c.Admin.Listen, true)
		if !loopback(c.Admin.Listen) && c.Admin.TokenFile == "" && c.Admin.TLS.ClientCAFile == "" {
			d.errorf("wow.admin.token-file", "required: wow.admin.listen %q is not loopback, so anyone who reaches it could read aggregate IDs and park, redrive or discard messages; set wow.admin.token-file to a file holding a bearer token, or wow.admin.tls.client-ca-file (with cert-file and key-file) to require client certificates, or listen on 127.0.0.1", c.Admin.Listen)
		}
	}
	d.listenerTLS("wow.admin", c.Admin.Listen != "", c.Admin.TLS)
	d.distinctListeners(c)
	d.oneOf("wow.log.level", c.Log.Level, "debug", "info", "warn", "error")
	d.oneOf("wow.log.format", c.Log.Format, "json", "console")
	d.positive("wow.shutdown.timeout", c.Shutdown.Timeout)
	if c.Shutdown.QuietPeriod < 0 {
		d.errorf("wow.shutdown.quiet-period", "must be >= 0, got %s", formatDuration(c.Shutdown.QuietPeriod))
	} else if c.Shutdown.Timeout > 0 && c.Shutdown.QuietPeriod >= c.Shutdown.Timeout {
		d.errorf("wow.shutdown.quiet-period", "must be less than wow.shutdown.timeout (%s), got %s",
			formatDuration(c.Shutdown.Timeout), formatDuration(c.Shutdown.QuietPeriod))
	}
	if c.Memory.Limit != "" {
		if n, err := memory.ParseSize(c.Memory.Limit); err != nil {
			d.errorf("wow.memory.limit", "%v", err)
		} else if n < memory.MinLimit {
			d.errorf("wow.memory.limit", "must be at least 32MiB, got %s", c.Memory.Limit)
		}
	}
	if c.Memory.FetchPercent < 1 || c.Memory.FetchPercent > 90 {
		d.errorf("wow.memory.fetch-percent", "must be 1 to 90, got %d", c.Memory.FetchPercent)
	}
	d.atLeast("wow.dev.partitions", c.Dev.Partitions, 1)
	if c.Dev.Partitions > 1000 { // devbroker.MaxPartitions
		d.errorf("wow.dev.partitions", "must be at most 1000, got %d", c.Dev.Partitions)
	}
}

// validateIngest keeps the ingest endpoint, a write path into Kafka, from
// being reachable by anyone: off loopback it needs a bearer token, and it
// shares the metrics listener (which Prometheus and the probes reach from
// outside) only when that listener is loopback.
func (d *decoder) validateIngest(c *Config) {
	in := c.Ingest
	switch {
	case in.Listen == "" && c.Metrics.Listen == "":
		d.errorf("wow.ingest.listen", "required when wow.metrics.listen is empty")
	case in.Listen == "" && !loopback(c.Metrics.Listen):
		d.errorf("wow.ingest.listen", "required: ingest would be served on the metrics listener %q, which is not loopback, and ingest is only served there on loopback; set wow.ingest.listen to an address of its own (with wow.ingest.token-file unless it is loopback)", c.Metrics.Listen)
	case in.Listen != "" && !loopback(in.Listen) && in.TokenFile == "" && in.TLS.ClientCAFile == "":
		d.errorf("wow.ingest.token-file", "required: wow.ingest.listen %q is not loopback, so anyone who reaches it could publish; set wow.ingest.token-file to a file holding a bearer token, or wow.ingest.tls.client-ca-file (with cert-file and key-file) to require client certificates, or listen on 127.0.0.1", in.Listen)
	}
}

// listenerTLS checks the TLS keys under prefix (wow.metrics, wow.ingest, …)
// of a listener, which listens when listening is true.
func (d *decoder) listenerTLS(prefix string, listening bool, t ListenerTLS) {
	p := prefix + ".tls."
	switch {
	case t.CertFile != "" && t.KeyFile == "":
		d.errorf(p+"key-file", "required with %scert-file", p)
	case t.KeyFile != "" && t.CertFile == "":
		d.errorf(p+"cert-file", "required with %skey-file", p)
	case t.ClientCAFile != "" && t.CertFile == "":
		d.errorf(p+"cert-file", "required with %sclient-ca-file: client certificates are asked for in a TLS handshake, which needs the listener's own certificate", p)
	case t.CertFile != "" && !listening:
		d.errorf(p+"cert-file", "set, but %s.listen is empty: there is no listener", prefix)
	}
}

// distinctListeners reports two of wowd's listeners on one address: the
// second could not bind ("address already in use" at start, a runtime
// failure, where the file contradicts itself).
func (d *decoder) distinctListeners(c *Config) {
	type listener struct{ key, addr string }
	var ls []listener
	if c.Metrics.Listen != "" {
		ls = append(ls, listener{"wow.metrics.listen", c.Metrics.Listen})
	}
	if c.Ingest.Enabled && c.Ingest.Listen != "" {
		ls = append(ls, listener{"wow.ingest.listen", c.Ingest.Listen})
	}
	if c.Admin.Listen != "" {
		ls = append(ls, listener{"wow.admin.listen", c.Admin.Listen})
	}
	for i, b := range ls {
		for _, a := range ls[:i] {
			if !sameListenAddress(a.addr, b.addr) {
				continue
			}
			hint := ""
			if b.key == "wow.ingest.listen" && a.key == "wow.metrics.listen" {
				hint = "; leave wow.ingest.listen empty to serve ingest on the metrics listener"
			}
			d.errorf(b.key, "%q is the address of %s too: two listeners cannot bind one address%s", b.addr, a.key, hint)
		}
	}
}

// sameListenAddress reports whether listeners on a and b (host:port)
// would take the same port: the same port, not 0, and hosts that are the
// same or overlap (every interface, or localhost and a loopback address).
func sameListenAddress(a, b string) bool {
	ha, pa, errA := net.SplitHostPort(a)
	hb, pb, errB := net.SplitHostPort(b)
	if errA != nil || errB != nil || pa != pb || pa == "0" {
		return false
	}
	every := func(h string) bool { return h == "" || h == "::" || h == "0.0.0.0" } // every interface
	if every(ha) || every(hb) || strings.EqualFold(ha, hb) {
		return true
	}
	ipA, ipB := net.ParseIP(ha), net.ParseIP(hb)
	switch {
	case ipA != nil && ipB != nil:
		return ipA.Equal(ipB)
	case strings.EqualFold(ha, "localhost"):
		return localhostIP(ipB)
	case strings.EqualFold(hb, "localhost"):
		return localhostIP(ipA)
	}
	return false
}

// localhostIP reports whether a listener on localhost may take ip's
// address: 127.0.0.1 or ::1, what localhost resolves to (another loopback
// address, 127.0.0.2, is free beside it).
func localhostIP(ip net.IP) bool {
	return ip != nil && (ip.Equal(net.IPv4(127, 0, 0, 1)) || ip.Equal(net.IPv6loopback))
}

// loopback reports whether a listen address (host:port) only accepts
// connections from this machine: 127.0.0.0/8, ::1 or localhost. No host
// means every interface.
func loopback(listen string) bool {
	host, _, err := net.SplitHostPort(listen)
	if err != nil {
		return false
	}
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

func (d *decoder) validateKafka(k *Kafka) {
	const p = "wow.kafka."
	if len(k.BootstrapServers) == 0 {
		d.errorf(p+"bootstrap-servers", "required: at least one host:port")
	}
	for i, s := range k.BootstrapServers {
		d.hostPort(fmt.Sprintf("%sbootstrap-servers[%d]", p, i), s, false)
	}
	if !topicPattern.MatchString(k.TopicPrefix) {
		d.errorf(p+"topic-prefix", "%q is not allowed in topic names (use letters, digits, '.', '_' and '-')", k.TopicPrefix)
	}
	if k.ClientID == "" {
		d.errorf(p+"client-id", "must not be empty")
	}
	d.oneOf(p+"start-offset", k.StartOffset, "earliest", "latest")
	d.oneOf(p+"group-protocol", k.GroupProtocol, "classic", "consumer")
	if k.FetchMaxBytes <= 0 {
		d.errorf(p+"fetch-max-bytes", "must be > 0, got %d", k.FetchMaxBytes)
	} else if k.FetchMaxBytes > maxFetchBytes {
		d.errorf(p+"fetch-max-bytes", "must be at most %d (the largest response the Kafka client reads), got %d", maxFetchBytes, k.FetchMaxBytes)
	}
	if k.FetchMaxPartitionBytes <= 0 {
		d.errorf(p+"fetch-max-partition-bytes", "must be > 0, got %d", k.FetchMaxPartitionBytes)
	} else if k.FetchMaxBytes > 0 && k.FetchMaxPartitionBytes > k.FetchMaxBytes {
		d.errorf(p+"fetch-max-partition-bytes", "must be at most wow.kafka.fetch-max-bytes (%d), got %d",
			k.FetchMaxBytes, k.FetchMaxPartitionBytes)
	}
	// The Kafka client's own bounds: it refuses to start outside them,
	// with an error that names no key.
	d.within(p+"fetch-max-wait", k.FetchMaxWait, 10*time.Millisecond, maxWireTimeout)
	d.within(p+"session-timeout", k.SessionTimeout, 100*time.Millisecond, maxWireTimeout)
	d.within(p+"rebalance-timeout", k.RebalanceTimeout, 100*time.Millisecond, maxWireTimeout)
	d.positive(p+"commit-interval", k.CommitInterval)
	if d.positive(p+"heartbeat-interval", k.HeartbeatInterval) && k.SessionTimeout > 0 &&
		k.HeartbeatInterval >= k.SessionTimeout {
		d.errorf(p+"heartbeat-interval", "must be less than wow.kafka.session-timeout (%s), got %s",
			formatDuration(k.SessionTimeout), formatDuration(k.HeartbeatInterval))
	}
	if d.positive(p+"revoke-timeout", k.RevokeTimeout) && k.RebalanceTimeout > 0 &&
		k.RevokeTimeout >= k.RebalanceTimeout {
		d.errorf(p+"revoke-timeout", "must be less than wow.kafka.rebalance-timeout (%s), got %s",
			formatDuration(k.RebalanceTimeout), formatDuration(k.RevokeTimeout))
	}

	t := k.TLS
	if t.CertFile != "" && t.KeyFile == "" {
		d.errorf(p+"tls.key-file", "required with wow.kafka.tls.cert-file")
	}
	if t.KeyFile != "" && t.CertFile == "" {
		d.errorf(p+"tls.cert-file", "required with wow.kafka.tls.key-file")
	}
	if !t.Enabled {
		for _, f := range []struct {
			key string
			set bool
		}{{"ca-file", t.CAFile != ""}, {"cert-file", t.CertFile != ""},
			{"key-file", t.KeyFile != ""}, {"insecure-skip-verify", t.InsecureSkipVerify}} {
			if f.set {
				d.errorf(p+"tls."+f.key, "set, but wow.kafka.tls.enabled is false")
			}
		}
	}

	d.validateSASL(k.SASL)
}

func (d *decoder) validateSASL(s SASL) {
	const p = "wow.kafka.sasl."
	d.oneOf(p+"mechanism", s.Mechanism, "", "plain", "scram-sha-256", "scram-sha-512", "oauthbearer")
	switch s.Mechanism {
	case "":
		if s.Username != "" || s.Password != "" || s.PasswordFile != "" || s.TokenFile != "" {
			d.errorf(p+"mechanism", "required with SASL credentials (username, password, password-file or token-file)")
		}
	case "oauthbearer":
		if s.TokenFile == "" {
			d.errorf(p+"token-file", "required with wow.kafka.sasl.mechanism oauthbearer: a file holding the bearer token")
		}
		for _, f := range []struct{ key, v string }{{"username", s.Username}, {"password", s.Password}, {"password-file", s.PasswordFile}} {
			if f.v != "" {
				d.errorf(p+f.key, "not used with wow.kafka.sasl.mechanism oauthbearer, which authenticates with token-file")
			}
		}
	default:
		if s.Username == "" {
			d.errorf(p+"username", "required with wow.kafka.sasl.mechanism %s", s.Mechanism)
		}
		switch {
		case s.Password != "" && s.PasswordFile != "":
			d.errorf(p+"password-file", "set together with wow.kafka.sasl.password: set only one of them")
		case s.Password == "" && s.PasswordFile == "":
			d.errorf(p+"password", "required with wow.kafka.sasl.mechanism %s (or wow.kafka.sasl.password-file)", s.Mechanism)
		}
		if s.TokenFile != "" {
			d.errorf(p+"token-file", "needs wow.kafka.sasl.mechanism oauthbearer, not %s", s.Mechanism)
		}
	}
}

func (d *decoder) validateContexts(c *Config) {
	if len(c.Contexts) == 0 {
		d.errorf("wow.contexts", "required: at least one bounded context")
		return
	}
	aliases := map[string]string{} // alias → context
	// alias.aggregate → context and aggregate: aliases and aggregate names
	// may contain dots, so two of them can make one topic name
	// (a.b + c, a + b.c), whose messages wowd could not tell apart.
	topics := map[string]string{}
	for _, name := range slices.Sorted(maps.Keys(c.Contexts)) {
		ctx, path := c.Contexts[name], "wow.contexts."+name
		d.name(path, name)
		if d.name(path+".alias", ctx.Alias) {
			if other, dup := aliases[ctx.Alias]; dup {
				d.errorf(path+".alias", "alias %q is also the alias of context %q", ctx.Alias, other)
			}
			aliases[ctx.Alias] = name
		}
		if len(ctx.Aggregates) == 0 {
			d.errorf(path+".aggregates", "required: at least one aggregate")
		}
		seen := map[string]bool{}
		for i, agg := range ctx.Aggregates {
			ip := fmt.Sprintf("%s.aggregates[%d]", path, i)
			switch {
			case !d.name(ip, agg):
			case seen[agg]:
				d.errorf(ip, "duplicate aggregate %q", agg)
			default:
				topic := c.Kafka.TopicPrefix + ctx.Alias + "." + agg + ".command"
				if len(topic) > maxTopicLen {
					d.errorf(ip, "topic name %q is longer than %d characters", topic, maxTopicLen)
				}
				stem := ctx.Alias + "." + agg
				if other, dup := topics[stem]; dup && ctx.Alias != "" {
					d.errorf(ip, "aggregate %q of context %q has the topics of %s (%s%s.*): their messages could not be told apart",
						agg, name, other, c.Kafka.TopicPrefix, stem)
				}
				topics[stem] = fmt.Sprintf("aggregate %q of context %q", agg, name)
			}
			seen[agg] = true
		}
	}
}

func (d *decoder) validateDispatchers(c *Config) {
	if len(c.Dispatchers) == 0 {
		d.errorf("wow.dispatchers", "required: at least one dispatcher")
		return
	}
	contexts := slices.Sorted(maps.Keys(c.Contexts))
	for _, name := range slices.Sorted(maps.Keys(c.Dispatchers)) {
		disp, path := c.Dispatchers[name], "wow.dispatchers."+name
		d.name(path, name)
		if len(disp.Topics) == 0 {
			d.errorf(path+".topics", "required: at least one of command, event, state")
		}
		seen := map[string]bool{}
		for i, t := range disp.Topics {
			ip := fmt.Sprintf("%s.topics[%d]", path, i)
			if d.oneOf(ip, t, "command", "event", "state") && seen[t] {
				d.errorf(ip, "duplicate topic kind %q", t)
			}
			seen[t] = true
		}
		if disp.Contexts != nil && len(disp.Contexts) == 0 {
			d.errorf(path+".contexts", "empty: leave it out to consume every context")
		}
		clear(seen)
		for i, ctx := range disp.Contexts {
			ip := fmt.Sprintf("%s.contexts[%d]", path, i)
			switch {
			case !slices.Contains(contexts, ctx):
				known := strings.Join(contexts, ", ")
				if known == "" {
					known = "none"
				}
				d.errorf(ip, "unknown context %q (configured: %s)", ctx, known)
			case seen[ctx]:
				d.errorf(ip, "duplicate context %q", ctx)
			}
			seen[ctx] = true
		}
		d.oneOf(path+".format", disp.Format, "wow", "raw")
		if disp.Format == "raw" {
			if len(disp.Events) > 0 {
				d.errorf(path+".events", "needs format wow: raw records are not decoded")
			}
			if len(disp.Commands) > 0 {
				d.errorf(path+".commands", "needs format wow: raw records are not decoded")
			}
		}
		if len(disp.Events) > 0 && !slices.Contains(disp.Topics, "event") && !slices.Contains(disp.Topics, "state") {
			d.errorf(path+".events", "needs topics event or state")
		}
		if len(disp.Commands) > 0 && !slices.Contains(disp.Topics, "command") {
			d.errorf(path+".commands", "needs topics command")
		}
		for i, agg := range disp.Aggregates {
			found := false
			for _, ctx := range disp.Contexts {
				found = found || slices.Contains(c.Contexts[ctx].Aggregates, agg)
			}
			if !found {
				d.errorf(fmt.Sprintf("%s.aggregates[%d]", path, i), "%q is not an aggregate of the dispatcher's contexts", agg)
			}
		}
		if t := strings.ReplaceAll(disp.DeadLetter.Topic, "{topic}", "x"); t == "" || !validTopic(t) {
			d.errorf(path+".dead-letter.topic", "%q is not a topic name (letters, digits, '.', '_', '-'; {topic} for the source topic)", disp.DeadLetter.Topic)
		} else if key, long := longTopics(c, disp); long != "" {
			d.errorf(path+"."+key, "%s", long)
		} else if loop := deadLetterLoop(c, name); loop != nil {
			if len(loop) == 1 {
				d.errorf(path+".dead-letter.topic", "%q sends the dead letters of %s to %s, a topic the dispatcher consumes: they would come back with growing headers",
					disp.DeadLetter.Topic, loop[0].src, loop[0].dl)
			} else {
				hops := make([]string, len(loop))
				for i, h := range loop {
					hops[i] = fmt.Sprintf("%s -(%s)-> %s", h.src, h.disp, h.dl)
				}
				d.errorf(path+".dead-letter.topic", "%q sends dead letters round a loop of dispatchers: %s; they would come back with growing headers",
					disp.DeadLetter.Topic, strings.Join(hops, ", "))
			}
		}
		if disp.OnFailure != "" {
			d.oneOf(path+".on-failure", disp.OnFailure, OnFailurePark, OnFailureDeadLetter)
		}
		if disp.FailurePolicy() == OnFailurePark && disp.Format == "raw" {
			d.errorf(path+".on-failure", "park needs format wow: a raw record's key is not known to be its aggregate's ID")
		}
		d.oneOf(path+".on-gap", disp.OnGap, "log", "park")
		if disp.VersionCheck && disp.Format != "wow" {
			d.errorf(path+".version-check", "needs format wow: raw records have no aggregate version")
		}
		if disp.VersionCheck && !slices.Contains(disp.Topics, "event") {
			d.errorf(path+".version-check", "needs topics event: only event streams carry the aggregate's version in order")
		}
		if disp.OnGap == "park" && disp.FailurePolicy() != OnFailurePark {
			d.errorf(path+".on-gap", "park needs on-failure park (now %s)", disp.FailurePolicy())
		}
		if disp.OnGap == "park" && !disp.VersionCheck {
			d.errorf(path+".on-gap", "park needs version-check true: without it no gap is found")
		}
		if disp.MaxParked < 1 {
			d.errorf(path+".max-parked", "must be at least 1")
		}
		if disp.Handler.Timeout < 0 {
			d.errorf(path+".handler.timeout", "must not be negative (0: no deadline)")
		}
		d.validateHandler(path+".handler", &disp.Handler)
		if tb, ok := disp.Handler.Decoded.(tryBound); ok && disp.Handler.Timeout > 0 {
			if err := tb.FitTry(disp.Handler.Timeout); err != nil {
				spec, _ := d.reg.Lookup(disp.Handler.Type)
				d.handlerErrors(path+".handler", spec, disp.Handler.Raw, err)
			}
		}
		c.Dispatchers[name] = disp
	}
}

// tryBound is a handler configuration with time limits of its own, which
// must fit in one try of handler.timeout: a request limit longer than the
// try would let every slow request time the try out instead.
type tryBound interface {
	// FitTry reports the keys whose limits do not fit in a try of the
	// given length, as "key: problem".
	FitTry(tryTimeout time.Duration) error
}

// validateHandler checks the handler type and decodes the handler's
// configuration, storing the result in h.Decoded.
func (d *decoder) validateHandler(path string, h *Handler) {
	if h.Type == "" {
		if h.Raw == nil {
			d.errorf(path, "required")
		} else {
			d.errorf(path+".type", "required (known: %s)", d.knownHandlers())
		}
		return
	}
	spec, ok := d.reg.Lookup(h.Type)
	if !ok {
		d.errorf(path+".type", "unknown handler type %q (known: %s)", h.Type, d.knownHandlers())
		return
	}
	raw := h.Raw
	if raw == nil {
		raw = map[string]any{}
	}
	decoded, err := handlerconfig.Decode(spec, raw)
	if err != nil {
		d.handlerErrors(path, spec, raw, err)
		return
	}
	h.Decoded = decoded
}

func (d *decoder) knownHandlers() string {
	if names := d.reg.Names(); len(names) > 0 {
		return strings.Join(names, ", ")
	}
	return "none"
}

// handlerErrors reports the errors of handler.Decode, each under the path of
// the handler key it names.
func (d *decoder) handlerErrors(path string, spec handler.Spec, raw map[string]any, err error) {
	keys := map[string]bool{}
	secret := map[string]bool{}
	var names []string // the handler's keys, by dotted name
	isMap := map[string]bool{}
	for _, f := range handlerconfig.Fields(spec) {
		keys[f.Name] = true
		secret[f.Name] = f.Secret
		names = append(names, f.Name)
		isMap[f.Name] = strings.HasPrefix(f.Type, "map of ")
	}
	// known returns the keys of the mapping at rel (a dotted name, "" for
	// the handler's own), for suggestions, and those of them that hold a
	// mapping.
	known := func(rel string) (children, mappings []string) {
		for _, name := range names {
			full := name
			if rel != "" {
				var ok bool
				if name, ok = strings.CutPrefix(name, rel+"."); !ok {
					continue
				}
			}
			first, _, nested := strings.Cut(name, ".")
			if !slices.Contains(children, first) {
				children = append(children, first)
			}
			if (nested || isMap[full]) && !slices.Contains(mappings, first) {
				mappings = append(mappings, first)
			}
		}
		return children, mappings
	}
	for k := range raw {
		keys[k] = true
	}
	problems := []error{err}
	if joined, ok := err.(interface{ Unwrap() []error }); ok {
		problems = joined.Unwrap() // handler.Decode joins one error per problem
	}
	for _, e := range problems {
		var uk *handlerconfig.UnknownKeyError
		if errors.As(e, &uk) {
			name, rel := uk.Name, strings.TrimSuffix(strings.TrimSuffix(uk.Key, uk.Name), ".")
			if name == "" {
				name, rel = uk.Key, ""
			}
			children, mappings := known(rel)
			d.unknownKey(path+"."+uk.Key, name, children, mappings)
			continue
		}
		if de, ok := e.(*mapstructure.DecodeError); ok {
			at := path
			if de.Name() != "" {
				at += "." + de.Name()
			}
			msg := de.Unwrap().Error()
			if list, ok := strings.CutPrefix(msg, "has invalid keys: "); ok {
				children, mappings := known(de.Name())
				for _, k := range strings.Split(list, ", ") {
					d.unknownKey(at+"."+k, k, children, mappings)
				}
				continue
			}
			var ue *mapstructure.UnconvertibleTypeError
			if errors.As(de, &ue) {
				got := describeValue(ue.Value)
				if field, _, _ := strings.Cut(de.Name(), "["); secret[field] {
					got = "a value of another type" // a secret's value is never shown
				}
				msg = fmt.Sprintf("expected %s, got %s", ue.Expected.Type(), got)
			}
			if strings.HasPrefix(msg, "time: invalid duration") {
				msg = "not a duration (e.g. 500ms, 30s, 1m)"
				if v, ok := raw[de.Name()].(string); ok {
					msg = strconv.Quote(v) + " is " + msg
				}
			}
			d.errorf(at, "%s", msg)
			continue
		}
		if key, msg, ok := strings.Cut(e.Error(), ": "); ok && keys[key] {
			d.errorf(path+"."+key, "%s", msg)
			continue
		}
		d.errorf(path, "%v", e)
	}
}

// flatten returns the leaves of a tree of joined errors, looking through the
// describeValue names a value decoded from YAML for messages.
func describeValue(v any) string {
	switch v := v.(type) {
	case nil:
		return "nothing"
	case string:
		return strconv.Quote(v)
	case []any:
		return "a list"
	case map[string]any, map[any]any:
		return "a mapping"
	}
	return fmt.Sprint(v)
}

// name checks a name (of the service, a context, an alias, an aggregate or
// a dispatcher) and reports whether it is valid.
func (d *decoder) name(path, s string) bool {
	if !namePattern.MatchString(s) {
		d.errorf(path, "invalid name %q: use %s", s, nameRule)
		return false
	}
	return true
}

// oneOf checks that s is one of allowed and reports whether it is.
func (d *decoder) oneOf(path, s string, allowed ...string) bool {
	if slices.Contains(allowed, s) {
		return true
	}
	shown := slices.DeleteFunc(slices.Clone(allowed), func(a string) bool { return a == "" })
	d.errorf(path, "%q is not one of %s", s, strings.Join(shown, ", "))
	return false
}

// between checks that min <= n <= max.
func (d *decoder) between(path string, n, min, max int) {
	switch {
	case n < min:
		d.errorf(path, "must be >= %d, got %d", min, n)
	case n > max:
		d.errorf(path, "must be at most %d, got %d", max, n)
	}
}

func (d *decoder) atLeast(path string, n, min int) {
	if n < min {
		d.errorf(path, "must be >= %d, got %d", min, n)
	}
}

// maxWireTimeout is the longest timeout Kafka's protocol carries (int32
// milliseconds); maxFetchBytes is the largest response the Kafka client
// reads (franz-go's BrokerMaxReadBytes, left at its default), which a
// fetch must fit.
const (
	maxWireTimeout = time.Duration(math.MaxInt32) * time.Millisecond
	maxFetchBytes  = 100 << 20
)

// within checks that a duration is from lo to hi.
func (d *decoder) within(path string, v, lo, hi time.Duration) {
	if v < lo || v > hi {
		d.errorf(path, "must be from %s to %s, got %s", formatDuration(lo), formatDuration(hi), formatDuration(v))
	}
}

// positive checks that v is above zero and reports whether it is.
func (d *decoder) positive(path string, v time.Duration) bool {
	if v <= 0 {
		d.errorf(path, "must be > 0, got %s", formatDuration(v))
		return false
	}
	return true
}

// hostPort checks a host:port address. A listen address may leave out the
// host (all interfaces) and use port 0 (any free port).
func (d *decoder) hostPort(path, s string, listen bool) {
	host, port, err := net.SplitHostPort(s)
	if err != nil {
		d.errorf(path, "%q is not host:port", s)
		return
	}
	n, err := strconv.ParseUint(port, 10, 16)
	switch {
	case err != nil || (n == 0 && !listen):
		d.errorf(path, "%q: invalid port %q", s, port)
	case host == "" && !listen:
		d.errorf(path, "%q: missing host", s)
	}
}

// validTopic reports whether s uses only the characters Kafka allows in
// topic names.
func validTopic(s string) bool {
	if len(s) > 249 {
		return false
	}
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '_' || r == '-') {
			return false
		}
	}
	return true
}

// consumedTopics returns the topics a dispatcher consumes.
func consumedTopics(c *Config, disp Dispatcher) []string {
	consumed := map[string]bool{}
	contexts := disp.Contexts
	if contexts == nil {
		contexts = slices.Collect(maps.Keys(c.Contexts))
	}
	for _, name := range contexts {
		bc := c.Contexts[name]
		for _, agg := range bc.Aggregates {
			if len(disp.Aggregates) > 0 && !slices.Contains(disp.Aggregates, agg) {
				continue
			}
			for _, kind := range disp.Topics {
				consumed[c.Kafka.TopicPrefix+bc.Alias+"."+agg+"."+kind] = true
			}
		}
	}
	return slices.Sorted(maps.Keys(consumed))
}

// longTopics names, with its key, the first topic the dispatcher would write for a topic
// it consumes — its dead-letter topic, and with on-failure park its parked
// topic (<topic>.parked) — that is longer than Kafka allows, or "": such a
// write would fail at run time, holding its partition.
func longTopics(c *Config, disp Dispatcher) (key, msg string) {
	for _, t := range consumedTopics(c, disp) {
		if dl := strings.ReplaceAll(disp.DeadLetter.Topic, "{topic}", t); disp.DeadLetter.Enabled && len(dl) > maxTopicLen {
			return "dead-letter.topic", fmt.Sprintf("the dead letters of %s would go to %s, longer than Kafka's %d characters", t, dl, maxTopicLen)
		}
		if p := t + ".parked"; disp.FailurePolicy() == OnFailurePark && len(p) > maxTopicLen {
			return "on-failure", fmt.Sprintf("the parked messages of %s would go to %s, longer than Kafka's %d characters (a shorter context alias or topic prefix)", t, p, maxTopicLen)
		}
	}
	return "", ""
}

// dlHop is one step of a dead letter's way: the dead letters dispatcher
// disp writes for topic src go to dl.
type dlHop struct{ src, disp, dl string }

// deadLetterLoop finds a way that brings the dead letters of dispatcher
// name back to the topic they came from: straight (its dead-letter topic of
// a topic it consumes is one it consumes) or through other dispatchers that
// consume the dead-letter topic and write their own dead letters on. A
// dispatcher that reads another's dead letters is fine (a replay); a loop
// is not. It returns the hops of the loop, starting with name's, or nil.
func deadLetterLoop(c *Config, name string) []dlHop {
	// The ways on: for each consumed topic, where its dead letters go.
	next := map[string][]dlHop{}
	for _, dn := range slices.Sorted(maps.Keys(c.Dispatchers)) {
		disp := c.Dispatchers[dn]
		for _, t := range consumedTopics(c, disp) {
			next[t] = append(next[t], dlHop{t, dn, strings.ReplaceAll(disp.DeadLetter.Topic, "{topic}", t)})
		}
	}
	for _, t := range consumedTopics(c, c.Dispatchers[name]) {
		first := dlHop{t, name, strings.ReplaceAll(c.Dispatchers[name].DeadLetter.Topic, "{topic}", t)}
		// Breadth first from the dead-letter topic back to t: the shortest loop.
		via := map[string]dlHop{first.dl: first}
		queue := []string{first.dl}
		for len(queue) > 0 {
			at := queue[0]
			queue = queue[1:]
			if at == t {
				var loop []dlHop
				for h := via[t]; ; h = via[h.src] {
					loop = append(loop, h)
					if h == first {
						break
					}
				}
				slices.Reverse(loop)
				return loop
			}
			for _, h := range next[at] {
				if _, seen := via[h.dl]; !seen {
					via[h.dl] = h
					queue = append(queue, h.dl)
				}
			}
		}
	}
	return nil
}

// validateTracing checks wow.tracing, enabled or not: a key set wrong is
// wrong before it is switched on. (Package tracing reads the values; it is
// not imported here, so that the configuration does not bring in the
// OpenTelemetry SDK.)
func (d *decoder) validateTracing(t *Tracing) {
	if t.Exporter != "" {
		d.oneOf("wow.tracing.exporter", t.Exporter, "otlp-http", "otlp-grpc")
	}
	if t.Endpoint != "" {
		u, err := url.Parse(t.Endpoint)
		switch {
		case err != nil:
			d.errorf("wow.tracing.endpoint", "%q is not a URL", t.Endpoint)
		case u.Scheme != "http" && u.Scheme != "https":
			d.errorf("wow.tracing.endpoint", "%q: want the collector's base URL, http:// (plain text) or https://", t.Endpoint)
		case u.Host == "":
			d.errorf("wow.tracing.endpoint", "%q has no host", t.Endpoint)
		}
	}
	if t.SamplingRatio != "" {
		if r, err := strconv.ParseFloat(t.SamplingRatio, 64); err != nil || !(r >= 0 && r <= 1) { // NaN too
			d.errorf("wow.tracing.sampling-ratio", "%q is not a number from 0 to 1", t.SamplingRatio)
		}
	}
	for i, kv := range t.ResourceAttributes {
		if !keyValue(kv) {
			d.errorf(fmt.Sprintf("wow.tracing.resource-attributes[%d]", i), "%q is not key=value", kv)
		}
	}
}
