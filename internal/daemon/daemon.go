// Package daemon assembles wowd from its configuration and runs it: the
// shared executor, one handler per dispatcher, one receiver per dispatcher
// and bounded context, and the metrics server.
//
// Start order: metrics server, receivers, the configuration watcher (when
// WatchConfig asked for it; see reload.go). Stop order: report not ready,
// stop the watcher (a reload under way gives up and applies nothing; it is
// waited for within the deadline), wait the quiet period, stop every
// receiver (no more admission, drain, final commit, leave the group), close
// the handlers, close the executor, flush the spans (wow.tracing; at most
// tracingFlushTimeout, even past the deadline), stop the metrics server.
// One deadline, wow.shutdown.timeout, covers the rest.
package daemon

import (
	"context"
	"errors"
	"fmt"
	stdlog "log"
	"maps"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.uber.org/zap"
	"golang.org/x/time/rate"

	"github.com/wowd/wowd/handler"
	"github.com/wowd/wowd/internal/admin"
	"github.com/wowd/wowd/internal/bearer"
	"github.com/wowd/wowd/internal/config"
	"github.com/wowd/wowd/internal/executor"
	"github.com/wowd/wowd/internal/ingest"
	"github.com/wowd/wowd/internal/memory"
	"github.com/wowd/wowd/internal/metrics"
	"github.com/wowd/wowd/internal/park"
	"github.com/wowd/wowd/internal/receiver"
	"github.com/wowd/wowd/internal/tlsconf"
	"github.com/wowd/wowd/internal/topicsize"
	"github.com/wowd/wowd/internal/tracing"
	"github.com/wowd/wowd/internal/wow"
)

// ingestGrace is the least time ingest requests get to publish their
// message once the receivers stopped, even past the shutdown deadline.
const ingestGrace = 2 * time.Second

// serverGrace is how long the metrics and admin listeners wait for their
// open requests at the very end of a stop before closing them.
const serverGrace = 2 * time.Second

// Daemon is a running wowd.
type Daemon struct {
	cfg       *config.Config
	log       *zap.Logger
	ex        *executor.Executor
	metrics   *metrics.Metrics
	server    *metrics.Server
	receivers []*receiver.Receiver
	handlers  map[string]handler.Handler // by dispatcher
	stopping  atomic.Bool
	memory    *memory.Budget // shared by the receivers' fetches
	reg       *handler.Registry
	reload    *reloader // nil unless WatchConfig
	memorySrc memory.Source
	tracing   *tracing.Provider // nil unless wow.tracing.enabled

	ingest       *ingest.Ingest // nil unless wow.ingest.enabled
	ingestClient *kgo.Client
	ingestServer *http.Server // when wow.ingest.listen is its own address
	ingestLn     net.Listener
	ingestDone   chan error

	admin   *admin.Server // nil unless wow.admin.listen
	version string
	started time.Time
}

// cgroupRoot is where the cgroup file system is mounted (a test's
// directory in tests).
var cgroupRoot = "/sys/fs/cgroup"

// New builds the runtime; nothing connects or listens until Start, except
// the metrics listener, bound here so a taken port fails early.
func New(cfg *config.Config, reg *handler.Registry, log *zap.Logger, version string) (*Daemon, error) {
	if reg == nil {
		reg = handler.Default()
	}
	rt := &Daemon{
		cfg:      cfg,
		log:      log,
		reg:      reg,
		metrics:  metrics.New(version),
		handlers: make(map[string]handler.Handler),
		version:  version,
		started:  time.Now(),
	}
	// The memory budget before anything that runs (the executor's
	// goroutines): a refusal has nothing to stop.
	limit, src, err := memory.Resolve(cfg.Memory.Limit, cgroupRoot)
	if err != nil {
		return nil, &ConfigError{Path: "wow.memory.limit", Err: err}
	}
	if rt.memory, err = memory.New(limit, cfg.Memory.FetchPercent); err != nil {
		// The limit may come from the container, not from a key: say so.
		return nil, &ConfigError{Path: "wow.memory", Err: fmt.Errorf("%w (the limit is %s)", err, src)}
	}
	rt.memorySrc = src
	rt.ex = executor.New(executor.Options{
		Workers:         cfg.Dispatch.Workers,
		Throughput:      cfg.Dispatch.Throughput,
		BlockingWorkers: cfg.Dispatch.BlockingWorkers,
	})
	rt.metrics.Executor(func() metrics.ExecutorSnapshot {
		s := rt.ex.Stats()
		return metrics.ExecutorSnapshot{
			Workers: s.Workers, Mailboxes: s.Mailboxes, QueuedMailboxes: s.QueuedMailboxes,
			Submitted: s.Submitted, Completed: s.Completed, Failed: s.Failed,
			BlockingRunning: s.BlockingRunning, LongestTurn: s.LongestTurn.Seconds(),
		}
	})
	rt.metrics.MemoryLimit(limit)
	if err := rt.buildTracing(version); err != nil {
		rt.abort() // the executor runs
		return nil, err
	}
	if err := rt.build(reg); err != nil {
		rt.abort()
		return nil, err
	}
	if cfg.Metrics.Listen != "" {
		tc, err := listenerTLS("wow.metrics.tls", cfg.Metrics.TLS, rt.log.Named("metrics"))
		if err != nil {
			rt.abort()
			return nil, err
		}
		srv, err := metrics.NewServer(cfg.Metrics.Listen, rt.metrics, rt.Ready)
		if err != nil {
			rt.abort()
			return nil, fmt.Errorf("wow.metrics.listen: %w", err)
		}
		if tc != nil {
			srv.UseTLS(tc.Config())
		}
		srv.ErrorLog(serverLog(rt.log.Named("metrics")))
		rt.server = srv
	}
	if cfg.Ingest.Enabled {
		if err := rt.buildIngest(); err != nil {
			rt.abort()
			return nil, err
		}
	}
	if cfg.Admin.Listen != "" {
		if err := rt.buildAdmin(); err != nil {
			rt.abort()
			return nil, err
		}
	}
	return rt, nil
}

// ApplyMemoryLimit makes the memory budget the Go runtime's soft memory
// limit (`wowd run` does; tests and `wowd dev`, whose in-process broker
// keeps every record in memory, do not) and logs it.
func (rt *Daemon) ApplyMemoryLimit() {
	rt.memory.Apply()
	rt.log.Info("memory budget", zap.Int64("limit_bytes", rt.memory.Limit()), zap.String("from", string(rt.memorySrc)),
		zap.Int64("fetch_bytes", rt.memory.FetchBytes()), zap.Int("receivers", len(rt.receivers)))
}

// buildIngest sets up the local-first ingest endpoint.
func (rt *Daemon) buildIngest() error {
	cfg := rt.cfg
	opts, err := ClientOptions(cfg.Kafka, cfg.IngestClientID(), rt.log, rt.metrics.Registry)
	if err != nil {
		return err
	}
	sizes := &ingest.Sizes{Log: rt.log.Named("ingest")}
	// Batches to a topic keep to its max.message.bytes, read before the
	// first publish to it.
	opts = append(opts, kgo.ProducerBatchMaxBytesFn(sizes.BatchMax))
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return fmt.Errorf("ingest producer: %w", err)
	}
	rt.ingestClient = cl
	adm := kadm.NewClient(cl)
	sizes.Read = func(ctx context.Context, topic string) (int32, error) {
		limits, err := topicsize.MaxMessageBytes(ctx, adm, topic)
		if n, ok := limits[topic]; ok {
			return n, nil
		}
		if err == nil {
			err = fmt.Errorf("%s: %w", topic, ingest.ErrNoLimit)
		}
		return 0, err
	}
	in := &ingest.Ingest{
		Service:     cfg.Service,
		TopicPrefix: cfg.Kafka.TopicPrefix,
		Contexts:    cfg.Contexts,
		Producer:    cl,
		Log:         rt.log.Named("ingest"),
		Metrics:     rt.metrics.Ingest(),
		MaxInFlight: cfg.Ingest.MaxInFlight,
		Sizes:       sizes,
		// Validated: without either, the listener is loopback.
		LoopbackOnly: cfg.Ingest.TokenFile == "" && cfg.Ingest.TLS.ClientCAFile == "",
	}
	if n := cfg.Ingest.RateLimit; n > 0 {
		burst := cfg.Ingest.RateBurst
		if burst == 0 {
			burst = n
		}
		in.Rate = rate.NewLimiter(rate.Limit(n), burst)
	}
	if cfg.Ingest.TokenFile != "" {
		tok, err := bearer.Open(cfg.Ingest.TokenFile, "ingest", in.Log)
		if err != nil {
			return &ConfigError{Path: "wow.ingest.token-file", Err: err}
		}
		in.Token = tok
	}
	for _, r := range rt.receivers {
		in.Receivers = append(in.Receivers, r)
	}
	rt.ingest = in
	if cfg.Ingest.Listen == "" {
		rt.server.Handle(ingest.Path, in) // validated: metrics listen is set
		return nil
	}
	tc, err := listenerTLS("wow.ingest.tls", cfg.Ingest.TLS, in.Log)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", cfg.Ingest.Listen)
	if err != nil {
		return fmt.Errorf("wow.ingest.listen: %w", err)
	}
	if tc != nil {
		ln = tc.Listen(ln)
	}
	mux := http.NewServeMux()
	mux.Handle(ingest.Path, in)
	rt.ingestLn = ln
	// IdleTimeout: a keep-alive connection left open by a client is closed
	// after a while rather than held for good (each is a file descriptor).
	rt.ingestServer = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 2 * time.Minute,
		ErrorLog: serverLog(in.Log)}
	return nil
}

// serverLog is the error log of an HTTP server of wowd's: its lines
// (mostly failed TLS handshakes: a client without a certificate, a port
// scan) go to log at debug level, where they do not flood the logs of a
// listener reachable from the network.
func serverLog(log *zap.Logger) *stdlog.Logger {
	l, err := zap.NewStdLogAt(log.Named("http"), zap.DebugLevel)
	if err != nil {
		panic(err) // only for a level zap does not know
	}
	return l
}

// listenerTLS opens the TLS files of a listener, configured under key; it
// returns nil when the listener serves plain HTTP.
func listenerTLS(key string, t config.ListenerTLS, log *zap.Logger) (*tlsconf.Reloader, error) {
	if !t.Enabled() {
		return nil, nil
	}
	r, err := tlsconf.New(tlsconf.Files(t), log)
	if err != nil {
		return nil, &ConfigError{Path: key, Err: err}
	}
	return r, nil
}

// IngestAddr returns the address of the ingest endpoint's own listener, or "".
func (rt *Daemon) IngestAddr() string {
	if rt.ingestLn == nil {
		return ""
	}
	return rt.ingestLn.Addr().String()
}

// build creates the handlers and receivers.
func (rt *Daemon) build(reg *handler.Registry) error {
	cfg := rt.cfg
	// Every receiver's client fetches as soon as it is made: each sizes
	// its first fetch to its part of the memory budget among all of them,
	// not among those made before it.
	receivers := 0
	for _, d := range cfg.Dispatchers {
		for _, ctxName := range d.Contexts {
			if len(aggregates(d, cfg.Contexts[ctxName])) > 0 {
				receivers++
			}
		}
	}
	rt.memory.Reserve(receivers)
	for _, name := range slices.Sorted(maps.Keys(cfg.Dispatchers)) {
		d := cfg.Dispatchers[name]
		spec, ok := reg.Lookup(d.Handler.Type)
		if !ok {
			return fmt.Errorf("wow.dispatchers.%s.handler.type: unknown handler type %q (known: %s)",
				name, d.Handler.Type, strings.Join(reg.Names(), ", "))
		}
		obs := &observer{byContext: make(map[string]*receiver.Receiver)}
		h, err := spec.New(d.Handler.Decoded, handler.Deps{
			Dispatcher: name,
			Service:    cfg.Service,
			Logger:     rt.log.Named("handler").With(zap.String("dispatcher", name), zap.String("handler", spec.Name)),
			Observer:   obs,
			Timeout:    d.Handler.Timeout,
		})
		if err != nil {
			// Missing token files, unreadable certificates and the like: the
			// configuration is wrong, not the run.
			return &ConfigError{Path: "wow.dispatchers." + name + ".handler", Err: fmt.Errorf("building the %s handler: %w", spec.Name, err)}
		}
		rt.handlers[name] = h
		blocking := false
		if b, ok := h.(handler.Blocker); ok {
			blocking = b.Blocking()
		}
		for _, ctxName := range d.Contexts {
			bc := cfg.Contexts[ctxName]
			if len(aggregates(d, bc)) == 0 {
				continue // the dispatcher's aggregates filter leaves nothing here
			}
			r, err := rt.receiver(name, d, ctxName, bc, builtHandler{h, blocking, spec.RoutingOnly})
			if err != nil {
				return err
			}
			obs.byContext[ctxName] = r
			rt.receivers = append(rt.receivers, r)
		}
	}
	return nil
}

// ConfigError is a configuration problem found while building the runtime
// (a handler that cannot be built from its options, a listener address in
// use is not one): the process should exit with the configuration code.
type ConfigError struct {
	Path string
	Err  error
}

func (e *ConfigError) Error() string { return e.Path + ": " + e.Err.Error() }
func (e *ConfigError) Unwrap() error { return e.Err }

// GroupID returns the consumer group of a dispatcher's receiver for one
// bounded context: [config.Config.GroupID], which validation checks for
// uniqueness.
func GroupID(cfg *config.Config, dispatcher, alias string) string {
	return cfg.GroupID(dispatcher, alias)
}

// Topics returns every topic the configuration consumes, sorted.
func Topics(cfg *config.Config) []string {
	set := map[string]bool{}
	for _, d := range cfg.Dispatchers {
		for _, t := range DispatcherTopics(cfg, d) {
			set[t] = true
		}
	}
	return slices.Sorted(maps.Keys(set))
}

// DispatcherTopics returns the topics dispatcher d consumes, sorted.
func DispatcherTopics(cfg *config.Config, d config.Dispatcher) []string {
	var out []string
	for _, c := range d.Contexts {
		bc := cfg.Contexts[c]
		for _, agg := range aggregates(d, bc) {
			for _, k := range d.Topics {
				kind, _ := handler.ParseKind(k) // validated with the configuration
				out = append(out, wow.Topic(cfg.Kafka.TopicPrefix, bc.Alias, agg, kind))
			}
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// aggregates returns the aggregates of bc that d consumes.
func aggregates(d config.Dispatcher, bc config.Context) []string {
	return d.AggregatesOf(bc)
}

func set(names []string) map[string]bool {
	m := make(map[string]bool, len(names))
	for _, n := range names {
		m[n] = true
	}
	return m
}

// builtHandler is a dispatcher's handler and what its receivers need to
// know of it.
type builtHandler struct {
	h           handler.Handler
	blocking    bool // handler.Blocker: its calls may block the worker
	routingOnly bool // handler.Spec.RoutingOnly
}

func (rt *Daemon) receiver(dispatcher string, d config.Dispatcher, ctxName string, bc config.Context, bh builtHandler) (*receiver.Receiver, error) {
	cfg := rt.cfg
	routes := make(map[string]receiver.Route)
	for _, agg := range aggregates(d, bc) {
		g := rt.ex.Group(bh.blocking) // mailboxes of (dispatcher, context, aggregate)
		for _, k := range d.Topics {
			kind, err := handler.ParseKind(k)
			if err != nil {
				return nil, err
			}
			routes[wow.Topic(cfg.Kafka.TopicPrefix, bc.Alias, agg, kind)] = receiver.Route{Context: ctxName, Aggregate: agg, Kind: kind, Group: g}
		}
	}
	clientID := cfg.ClientID(dispatcher, bc.Alias)
	log := rt.log.With(zap.String("dispatcher", dispatcher), zap.String("context", ctxName))
	opts, err := ClientOptions(cfg.Kafka, clientID, log, rt.metrics.Registry)
	if err != nil {
		return nil, err
	}
	dlTopic := d.DeadLetter.Topic
	var parking *receiver.Parking
	if d.FailurePolicy() == config.OnFailurePark {
		// The parking clients' options carry no metrics hooks: they
		// register per client ID, once.
		popts, err := ClientOptions(cfg.Kafka, cfg.ParkingClientID(dispatcher, bc.Alias), log, nil)
		if err != nil {
			return nil, err
		}
		parking = &receiver.Parking{StateTopic: park.StateTopic(cfg.Service, dispatcher), Max: d.MaxParked, ClientOpts: popts}
	}
	fetch := rt.memory.Join()
	r, err := receiver.New(receiver.Options{
		Dispatcher:     dispatcher,
		Context:        ctxName,
		Service:        cfg.Service,
		GroupID:        cfg.GroupID(dispatcher, bc.Alias),
		Routes:         routes,
		MaxInFlight:    cfg.Dispatch.MaxInFlight,
		CommitInterval: cfg.Kafka.CommitInterval,
		RevokeTimeout:  cfg.Kafka.RevokeTimeout,
		HandlerTimeout: d.Handler.Timeout,
		Handler:        bh.h,
		HandlerType:    d.Handler.Type,
		Wow:            d.Format == "wow",
		WowRoutingOnly: bh.routingOnly && !d.VersionCheck, // the version is in the full decode
		VersionCheck:   d.VersionCheck,
		OnGapPark:      d.OnGap == "park",
		Events:         set(d.Events),
		Commands:       set(d.Commands),
		DeadLetter: receiver.DeadLetter{
			Enabled: d.DeadLetter.Enabled,
			Topic:   func(src string) string { return strings.ReplaceAll(dlTopic, "{topic}", src) },
		},
		Park:       parking,
		ClientOpts: opts,
		Fetch:      fetch,
		Logger:     log,
		Metrics:    rt.metrics,
		Tracer:     rt.tracer(),
		Ingest:     cfg.Ingest.Enabled,
	})
	if err != nil {
		fetch.Leave() // the others' parts stay whole
		return nil, fmt.Errorf("dispatcher %s, context %s: %w", dispatcher, ctxName, err)
	}
	return r, nil
}

// Metrics returns the runtime's metrics.
func (rt *Daemon) Metrics() *metrics.Metrics { return rt.metrics }

// MetricsAddr returns the address the metrics server listens on, or "".
func (rt *Daemon) MetricsAddr() string {
	if rt.server == nil {
		return ""
	}
	return rt.server.Addr()
}

// Start serves metrics and starts consuming. The receivers start in
// parallel, each asking Kafka for its topics and producer ID first; when ctx
// is done (a stop signal while a broker does not answer) they stop waiting
// for those answers, and Start returns soon: Stop then ends them.
func (rt *Daemon) Start(ctx context.Context) {
	if rt.server != nil {
		rt.server.Start()
	}
	if rt.admin != nil {
		rt.admin.Start()
	}
	if rt.ingestServer != nil {
		rt.ingestDone = make(chan error, 1)
		go func() { // owned by the runtime; ends at Stop
			err := rt.ingestServer.Serve(rt.ingestLn)
			if errors.Is(err, http.ErrServerClosed) {
				err = nil
			}
			rt.ingestDone <- err
		}()
	}
	var wg sync.WaitGroup
	for _, r := range rt.receivers {
		wg.Go(func() { r.Start(ctx) })
	}
	wg.Wait()
	if rt.reload != nil {
		rt.reload.started = true
		go rt.watch() // owned by the daemon; ends at Stop
	}
	rt.log.Info("wowd started", zap.Int("receivers", len(rt.receivers)), zap.Int("workers", rt.ex.Stats().Workers),
		zap.String("metrics", rt.MetricsAddr()), zap.String("admin", rt.AdminAddr()))
}

// Ready reports whether every receiver has joined its group; while stopping
// it reports not ready.
func (rt *Daemon) Ready() (bool, string) {
	if rt.stopping.Load() {
		return false, "stopping"
	}
	joining, reading := 0, 0
	var topicless []string
	for _, r := range rt.receivers {
		switch {
		case r.Ready():
		case !r.Joined():
			joining++
			if ts := r.NoTopicsAtStart(); ts != nil {
				topicless = append(topicless, fmt.Sprintf("%s/%s (%s)", r.Dispatcher(), r.Context(), strings.Join(ts, ", ")))
			}
		default:
			reading++
		}
	}
	var why []string
	if joining > 0 {
		why = append(why, fmt.Sprintf("%d of %d receivers have not joined their consumer group yet", joining, len(rt.receivers)))
	}
	if len(topicless) > 0 {
		why = append(why, "none of the topics of "+strings.Join(topicless, ", ")+" existed at start: a receiver joins once one does (check the context's alias and wow.kafka.topic-prefix)")
	}
	if reading > 0 {
		why = append(why, fmt.Sprintf("%d of %d receivers have not read their parked aggregates' state topic yet", reading, len(rt.receivers)))
	}
	if len(why) > 0 {
		return false, strings.Join(why, "; ")
	}
	return true, ""
}

// Stop shuts down in order within ctx: see the package documentation.
func (rt *Daemon) Stop(ctx context.Context) error {
	rt.stopping.Store(true)
	if r := rt.reload; r != nil {
		r.close() // no handler is reconfigured while they close
		if r.started {
			select {
			case <-r.done:
			case <-ctx.Done():
				rt.log.Warn("stopping without waiting for the configuration reload under way to give up", zap.String("path", r.Path))
			}
		} else {
			_ = r.watcher.Close()
		}
	}
	if q := rt.cfg.Shutdown.QuietPeriod; q > 0 {
		rt.log.Info("quiet period before stopping", zap.Duration("quiet_period", q))
		select {
		case <-time.After(q):
		case <-ctx.Done():
		}
	}
	rt.log.Info("stopping: no more admission, draining")
	if rt.ingest != nil {
		rt.ingest.Stop()
	}
	var (
		mu   sync.Mutex
		errs []error
		wg   sync.WaitGroup
	)
	for _, r := range rt.receivers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := r.Stop(ctx); err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if rt.ingest != nil {
		// The receivers stopped: ingested messages are handled or given up;
		// let their requests publish them before the producer closes, for
		// at least ingestGrace even past the deadline (a publish is one
		// round trip; a caller that gets no answer must retry).
		wait := ingestGrace
		if d, ok := ctx.Deadline(); ok {
			wait = max(wait, time.Until(d))
		}
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), wait)
		if err := rt.ingest.Drain(dctx); err != nil {
			errs = append(errs, err)
		}
		cancel()
	}
	if rt.ingestServer != nil {
		if err := rt.ingestServer.Shutdown(ctx); err != nil {
			_ = rt.ingestServer.Close()
		}
		errs = append(errs, <-rt.ingestDone)
	}
	if rt.ingestClient != nil {
		rt.ingestClient.Close()
	}
	errs = append(errs, rt.closeHandlers(ctx))
	if err := rt.ex.Close(ctx); err != nil {
		errs = append(errs, err)
	}
	if err := rt.stopTracing(ctx); err != nil {
		// Every message was handled and committed: spans the collector
		// did not take are lost observations, not a failed stop (a
		// stop's error makes wowd exit 1 on SIGTERM).
		rt.log.Warn("spans buffered at stop were not all exported", zap.Error(err))
	}
	// The metrics and admin listeners serve to the end, then get
	// serverGrace to finish their requests (a scrape, an operator's page,
	// an ingest request on the metrics listener) whatever is left of the
	// deadline; what is still open then is closed, so a stalled client
	// cannot hold the stop.
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), serverGrace)
	defer cancel()
	type listener struct {
		name     string
		shutdown func(context.Context) (closed bool, err error)
	}
	var listeners []listener
	if rt.server != nil {
		listeners = append(listeners, listener{"metrics", rt.server.Shutdown})
	}
	if rt.admin != nil {
		listeners = append(listeners, listener{"admin", rt.admin.Shutdown})
	}
	for _, l := range listeners {
		closed, err := l.shutdown(sctx)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s listener: %w", l.name, err))
		}
		if closed {
			// As documented: a stalled client neither holds the stop nor
			// makes it unclean.
			rt.log.Info("connections still open after the listener's grace were closed",
				zap.String("listener", l.name), zap.Duration("grace", serverGrace))
		}
	}
	err := errors.Join(errs...)
	if err != nil {
		rt.log.Warn("stopped with problems", zap.Error(err))
	} else {
		rt.log.Info("stopped cleanly")
	}
	return err
}

func (rt *Daemon) closeHandlers(ctx context.Context) error {
	var errs []error
	for name, h := range rt.handlers {
		if c, ok := h.(handler.Closer); ok {
			if err := c.Close(ctx); err != nil {
				errs = append(errs, fmt.Errorf("closing handler of %s: %w", name, err))
			}
		}
	}
	return errors.Join(errs...)
}

// abort releases what New built before failing.
func (rt *Daemon) abort() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, r := range rt.receivers {
		_ = r.Stop(ctx)
	}
	_ = rt.closeHandlers(ctx)
	_ = rt.ex.Close(ctx)
	_ = rt.stopTracing(ctx)
	if rt.ingestClient != nil {
		rt.ingestClient.Close()
	}
	if rt.ingestLn != nil {
		_ = rt.ingestLn.Close()
	}
	if rt.admin != nil {
		_, _ = rt.admin.Shutdown(ctx) // not started: closes its listener
	}
}

// observer receives handler retry events of one dispatcher and hands them to
// the receiver of the message's context.
type observer struct {
	byContext map[string]*receiver.Receiver // written only while building
}

func (o *observer) Retrying(m *handler.Message, attempt int, err error, wait time.Duration) {
	if r := o.byContext[m.Context]; r != nil {
		r.Retrying(m, attempt, err, wait)
	}
}

var (
	_ handler.PanicObserver = (*observer)(nil)
	_ handler.WaitObserver  = (*observer)(nil)
)

func (o *observer) Waiting(ctx context.Context, m *handler.Message) {
	if r := o.byContext[m.Context]; r != nil {
		r.Waiting(ctx, m)
	}
}

func (o *observer) Started(ctx context.Context, m *handler.Message) {
	if r := o.byContext[m.Context]; r != nil {
		r.Started(ctx, m)
	}
}

func (o *observer) PanickedAfterOutcome(context, topic string, partition int32, offset int64, err error) {
	if r := o.byContext[context]; r != nil {
		r.PanickedAfterOutcome(topic, partition, offset, err)
	}
}
