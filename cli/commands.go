package cli

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"
	"go.uber.org/zap"

	"github.com/wowd/wowd/configs"
	"github.com/wowd/wowd/internal/config"
	"github.com/wowd/wowd/internal/daemon"
	"github.com/wowd/wowd/internal/devbroker"
	"github.com/wowd/wowd/internal/handlerconfig"
	"github.com/wowd/wowd/internal/wow"
)

func (a *app) runCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "run",
		Short: "Run the daemon",
		Long: `Run the daemon with the configuration file.

SIGTERM or SIGINT stops it: no more admission, unfinished messages drain
within wow.shutdown.timeout, offsets are committed, and it exits 0 (1 if the
timeout cut the drain short: the unfinished messages are delivered again).
Exit code 1 means a runtime failure, 2 a configuration or usage error. Changes of the
configuration file apply while it runs as far as they can; SIGHUP reads the
file again at once, changed or not.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			hup, stopHup := hangups() // from here on, SIGHUP does not end wowd
			defer stopHup()
			// From here on too, SIGTERM and SIGINT stop wowd with exit 0:
			// reading wow.metadata can take a while.
			ctx, stopSignals := signalContext()
			defer stopSignals()
			// Before the load: a change of the file from here on, before
			// it is watched, is applied once wowd runs.
			read, _ := os.ReadFile(a.configPath(cmd))
			cfg, _, err := a.loadContext(ctx, cmd)
			if ctx.Err() != nil {
				return a.stoppedBeforeStart()
			}
			if err != nil {
				return err
			}
			return a.serve(ctx, cmd, cfg, read, hup, nil)
		},
	}
	a.configFlag(cmd, "", "configuration file")
	return cmd
}

// stoppedBeforeStart is the end of a command stopped by SIGTERM or SIGINT
// while it read its configuration: exit 0, as for a stop once it runs.
func (a *app) stoppedBeforeStart() error {
	fmt.Fprintln(a.stderr, "wowd: signal received while reading the configuration; stopped before starting")
	return nil
}

// serve runs the runtime until a signal (signals, from signalContext, is
// done), then stops it within the shutdown timeout. While `wowd run` runs,
// changes of its configuration file are applied as far as they can be (see
// daemon.WatchConfig), and SIGHUP reads it again at once; without a file
// watched, SIGHUP is logged and ignored. hup is from hangups, called before
// the configuration was read (which can take a while: wow.metadata), so that
// a SIGHUP meanwhile does not end wowd; one received then reads the file
// again once the runtime runs. read is what the file held before cfg was
// loaded from it (see daemon.Reload), nil when unknown. extra runs after the
// runtime started (dev mode's demo traffic) and returns a function that
// undoes it.
func (a *app) serve(signals context.Context, cmd *cobra.Command, cfg *config.Config, read []byte, hup <-chan os.Signal, extra func(ctx context.Context, log *zap.Logger) (func(), error)) error {
	log, level, err := a.logger(cfg)
	if err != nil {
		return err
	}
	defer func() { _ = log.Sync() }()
	rt, err := daemon.New(cfg, a.reg, log, version())
	var ce *daemon.ConfigError
	if errors.As(err, &ce) {
		return configError(err)
	}
	if err != nil {
		return err
	}
	if extra == nil {
		rt.ApplyMemoryLimit() // not in dev mode: its broker's records live in this process
	}
	// Not in dev mode, which changes the configuration it read (the
	// embedded broker's address, --demo, --partitions).
	if path := a.configPath(cmd); path != "" && extra == nil {
		src := a.sources(cmd)
		err := rt.WatchConfig(daemon.Reload{Path: path, Read: read, Level: level, Load: a.reloadLoader(path, src)})
		if err != nil {
			log.Warn("changes of the configuration file will need a restart", zap.Error(err))
		}
	}
	ctx, cancel := context.WithCancel(signals)
	defer cancel()
	rt.Start(ctx)
	var (
		undo     func()
		extraErr error
	)
	if extra != nil {
		if undo, extraErr = extra(ctx, log); extraErr != nil {
			log.Error("starting dev extras; shutting down", zap.Error(extraErr))
			cancel()
		}
	}
	waitStop(ctx, hup, rt, log)
	if extraErr == nil {
		log.Info("signal received, shutting down", zap.Duration("timeout", cfg.Shutdown.Timeout))
	}
	if undo != nil {
		undo()
	}
	stopCtx, stopCancel := context.WithTimeout(context.Background(), cfg.Shutdown.Timeout)
	defer stopCancel()
	if err := rt.Stop(stopCtx); err != nil {
		return errors.Join(extraErr, fmt.Errorf("stopping: %w", err))
	}
	return extraErr
}

// waitStop returns when ctx is done, asking rt to read its configuration
// file again at each SIGHUP meanwhile.
func waitStop(ctx context.Context, hup <-chan os.Signal, rt *daemon.Daemon, log *zap.Logger) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-hup:
			if rt.ReloadNow() {
				log.Info("SIGHUP: reading the configuration file again")
			} else {
				log.Info("SIGHUP: no configuration file is watched; nothing to reload")
			}
		}
	}
}

func (a *app) devCmd() *cobra.Command {
	var (
		demo       bool
		partitions int
	)
	cmd := &cobra.Command{
		Use:   "dev",
		Short: "Run the daemon on an embedded Kafka-compatible broker",
		Long: `Run the daemon on an embedded Kafka-compatible broker (franz-go's kfake)
listening on the first bootstrap address, with every configured topic
created. Without --config it uses the compiled-in configs/dev.yaml: the Wow
example domain and a dispatcher that logs every message. --demo produces
Wow-shaped event streams to the event topics. Any Kafka client can produce to
and consume from the broker (kcat -b 127.0.0.1:9092 -L). Nothing is kept
after it stops.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			hup, stopHup := hangups() // from here on, SIGHUP does not end wowd
			defer stopHup()
			ctx, stopSignals := signalContext() // and SIGTERM or SIGINT stops it with exit 0
			defer stopSignals()
			var cfg *config.Config
			var err error
			if a.configPath(cmd) != "" {
				cfg, _, err = a.loadContext(ctx, cmd)
			} else if cfg, _, err = config.ParseSourcesContext(ctx, configs.Dev, "configs/dev.yaml", a.reg, a.sources(cmd)); err != nil {
				err = configError(err)
			}
			if ctx.Err() != nil {
				return a.stoppedBeforeStart()
			}
			if err != nil {
				return err
			}
			if cmd.Flags().Changed("demo") {
				cfg.Dev.Demo = demo
			}
			if cmd.Flags().Changed("partitions") {
				if partitions < 1 || partitions > devbroker.MaxPartitions {
					return configError(fmt.Errorf("--partitions %d: want 1 to %d", partitions, devbroker.MaxPartitions))
				}
				cfg.Dev.Partitions = partitions
			}
			topics := daemon.Topics(cfg)
			demoTopics := demoTopics(cfg, topics)
			if cfg.Dev.Demo && len(demoTopics) == 0 {
				return configError(errors.New("wow.dev.demo: no dispatcher reads an event topic, so the demo has nowhere to write: add event to a dispatcher's topics"))
			}
			b, err := devbroker.Start(cfg.Kafka.BootstrapServers[0], cfg.Dev.Partitions, topics)
			if errors.Is(err, devbroker.ErrSetting) {
				from := "configs/dev.yaml (compiled in)"
				switch path := a.configPath(cmd); {
				case path != "" && cmd.Flags().Changed("config"):
					from = path
				case path != "":
					from = path + " (from WOWD_CONFIG; unset it for the compiled-in configs/dev.yaml)"
				}
				return configError(fmt.Errorf("wowd dev, %s: wow.kafka.bootstrap-servers[0], wow.dev.partitions: %w", from, err))
			}
			if err != nil {
				return err
			}
			defer b.Close()
			cfg.Kafka.BootstrapServers = []string{b.Addr()}
			fmt.Fprintf(a.stderr, "wowd dev: embedded broker on %s with %d topics of %d partitions\n", b.Addr(), len(topics), cfg.Dev.Partitions)
			return a.serve(ctx, cmd, cfg, nil, hup, func(ctx context.Context, log *zap.Logger) (func(), error) {
				if !cfg.Dev.Demo {
					return nil, nil
				}
				dctx, stop := context.WithCancel(ctx)
				d, err := devbroker.StartDemo(dctx, []string{b.Addr()}, demoTopics, 5, log)
				if err != nil {
					stop()
					return nil, err
				}
				return func() { stop(); d.Wait() }, nil
			})
		},
	}
	a.configFlag(cmd, "", "configuration file (default: the compiled-in configs/dev.yaml)")
	cmd.Flags().BoolVar(&demo, "demo", false, "produce demo traffic (overrides wow.dev.demo)")
	cmd.Flags().IntVar(&partitions, "partitions", 0, "partitions per topic, 1 to 1000 (overrides wow.dev.partitions)")
	return cmd
}

// demoTopics returns the event topics among topics (those the dispatchers
// read), each with the context and aggregate its messages must name: the
// demo writes what wowd accepts.
func demoTopics(cfg *config.Config, topics []string) []devbroker.DemoTopic {
	var out []devbroker.DemoTopic
	for _, name := range slices.Sorted(maps.Keys(cfg.Contexts)) {
		bc := cfg.Contexts[name]
		for _, agg := range bc.Aggregates {
			t := wow.Topic(cfg.Kafka.TopicPrefix, bc.Alias, agg, wow.KindEvent)
			if slices.Contains(topics, t) {
				out = append(out, devbroker.DemoTopic{Topic: t, Context: name, Aggregate: agg})
			}
		}
	}
	return out
}

func (a *app) configCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "config", Short: "Check or print a configuration"}
	var noFiles bool
	validate := &cobra.Command{
		Use:   "validate",
		Short: "Check a configuration: every problem is reported; exit 2 if any",
		Long: `Check a configuration: every problem is reported; exit 2 if any. The
files it names (TLS certificates, keys and CAs, token and password files, a
handler's *-file keys) are opened and checked as ` + "`wowd run`" + ` would use them,
and so are the environment variables a handler reads (the http sink's
headers-from-env) and, with tracing on, OTEL_RESOURCE_ATTRIBUTES; --no-files leaves both out, for a configuration of
another machine (a container whose secrets are mounted there).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var cfg *config.Config
			var err error
			if noFiles {
				cfg, _, err = a.loadDocument(cmd)
			} else {
				cfg, _, err = a.load(cmd)
			}
			if err != nil {
				return err
			}
			receivers := 0 // as the daemon makes them: not where the aggregates filter leaves nothing
			for _, d := range cfg.Dispatchers {
				for _, c := range d.Contexts {
					if len(d.AggregatesOf(cfg.Contexts[c])) > 0 {
						receivers++
					}
				}
			}
			_, err = fmt.Fprintf(a.stdout, "%s: ok (%d dispatchers, %d receivers, %d topics)\n",
				a.configPath(cmd), len(cfg.Dispatchers), receivers, len(daemon.Topics(cfg)))
			return err
		},
	}
	a.configFlag(validate, "", "configuration file")
	validate.Flags().BoolVar(&noFiles, "no-files", false, "do not open the files the configuration names, nor read the environment variables its handlers name")
	var plain bool
	print := &cobra.Command{
		Use:   "print",
		Short: "Print the effective configuration, defaults included, secrets masked",
		Long: `Print the effective configuration, defaults included, secrets masked. A
comment after each value says where it came from: default, the file and
line, env WOW_..., or --set; each dispatcher's, the consumer groups its
receivers join.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, origins, err := a.loadDocument(cmd)
			if err != nil {
				return err
			}
			if plain {
				return cfg.WriteYAML(a.stdout, a.reg)
			}
			return cfg.WriteOrigins(a.stdout, a.reg, origins)
		},
	}
	a.configFlag(print, "", "configuration file")
	print.Flags().BoolVar(&plain, "plain", false, "leave out where each value came from")
	cmd.AddCommand(validate, print)
	return cmd
}

// reloadLoader returns what a reload of the file at path reads from its
// contents, data: the document with src, not the files it names. The
// daemon reads those itself and rides out their rotation (a certificate
// and key written one after the other); a reload refused for one would
// wait for its retry.
func (a *app) reloadLoader(path string, src config.Sources) func(context.Context, []byte) (*config.Config, error) {
	return func(ctx context.Context, data []byte) (*config.Config, error) {
		cfg, _, err := config.ParseSourcesContext(ctx, data, path, a.reg, src)
		return cfg, err
	}
}

// loadDocument is load without opening the files the configuration
// names: the document, the environment and --set alone. For the commands
// that run elsewhere than the daemon (rewind and parked from an operator's
// machine, config print): they need none of the daemon's certificates and
// token files, and the Kafka client's are read, and reported as
// configuration errors, when they build it.
func (a *app) loadDocument(cmd *cobra.Command) (*config.Config, *config.Origins, error) {
	path := a.configPath(cmd)
	if path == "" {
		return nil, nil, configError(errors.New("no configuration: pass --config FILE or set WOWD_CONFIG"))
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, nil, configError(fmt.Errorf("config: %w", err))
	}
	cfg, origins, err := config.ParseSources(data, path, a.reg, a.sources(cmd))
	if err != nil {
		return nil, nil, configError(err)
	}
	return cfg, origins, nil
}

func (a *app) handlersCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "handlers",
		Short: "List the compiled-in handler types and their configuration",
		Args:  cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			tw := tabwriter.NewWriter(a.stdout, 2, 4, 2, ' ', 0)
			for _, name := range a.reg.Names() {
				spec, _ := a.reg.Lookup(name)
				fmt.Fprintf(tw, "%s\t%s\n", name, spec.Summary)
				for _, f := range handlerconfig.Fields(spec) {
					var notes []string
					if f.Required {
						notes = append(notes, "required")
					}
					if f.Default != "" {
						notes = append(notes, "default "+f.Default)
					}
					if f.Secret {
						notes = append(notes, "secret")
					}
					fmt.Fprintf(tw, "  %s\t%s\t%s %s\n", f.Name, f.Type, f.Description, paren(notes))
				}
			}
			return errors.Join(tw.Flush())
		},
	}
}

func paren(notes []string) string {
	if len(notes) == 0 {
		return ""
	}
	return "(" + strings.Join(notes, "; ") + ")"
}
