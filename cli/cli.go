// Package cli is wowd's command line. cmd/wowd calls Main; a custom build
// with extra compiled-in handlers does the same from its own main package
// after importing them (see examples/).
package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime/debug"
	"strings"
	"sync"
	"syscall"

	"github.com/spf13/cobra"
	"github.com/spf13/viper"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/wowd/wowd/handler"
	"github.com/wowd/wowd/internal/config"
	_ "github.com/wowd/wowd/internal/handlers" // the built-in handlers
)

// Exit codes.
const (
	ExitOK      = 0 // clean stop
	ExitFailure = 1 // runtime failure
	ExitConfig  = 2 // configuration or usage error
)

// Version is stamped at build time with -ldflags "-X github.com/wowd/wowd/cli.Version=...".
var Version = ""

func version() string {
	if Version != "" {
		return Version
	}
	bi, _ := debug.ReadBuildInfo()
	return buildVersion(bi)
}

// buildVersion is the version the Go toolchain recorded in bi: the module
// version a `go build` in a checkout derives from its commit, else (`go
// run`, `go test`, a build outside git: "(devel)") "devel" followed by the
// commit the build settings name, if any, so that two unstamped builds can
// still be told apart.
func buildVersion(bi *debug.BuildInfo) string {
	if bi == nil {
		return "devel"
	}
	if v := bi.Main.Version; v != "" && v != "(devel)" {
		return v
	}
	var rev string
	modified := false
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			modified = s.Value == "true"
		}
	}
	if rev == "" {
		return "devel"
	}
	v := "devel-" + rev[:min(12, len(rev))]
	if modified {
		v += "-dirty"
	}
	return v
}

// exitError carries an exit code with an error.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

func configError(err error) error { return &exitError{code: ExitConfig, err: err} }

// usageError is a command line the commands do not take: an unknown
// command or flag, a flag value that does not parse or is out of range, a
// missing required flag, an argument. Its exit code is that of a
// configuration error.
func usageError(err error) error {
	var ee *exitError
	if errors.As(err, &ee) {
		return err
	}
	return &exitError{code: ExitConfig, err: err}
}

// Main runs the command line with args (without the program name) and
// returns the process exit code.
func Main(args []string) int {
	return run(args, os.Stdout, os.Stderr, os.Environ(), handler.Default())
}

func run(args []string, stdout, stderr io.Writer, env []string, reg *handler.Registry) int {
	root := newRoot(stdout, stderr, env, reg)
	root.SetArgs(args)
	err := root.Execute()
	if err == nil {
		return ExitOK
	}
	fmt.Fprintln(stderr, "wowd:", termLines(err.Error()))
	var ee *exitError
	if errors.As(err, &ee) {
		return ee.code
	}
	return ExitFailure
}

// app is what the commands share.
type app struct {
	stdout, stderr io.Writer
	env            []string
	reg            *handler.Registry
}

func newRoot(stdout, stderr io.Writer, env []string, reg *handler.Registry) *cobra.Command {
	a := &app{stdout: stdout, stderr: stderr, env: env, reg: reg}
	root := &cobra.Command{
		Use:           "wowd",
		Short:         "Dispatch Kafka messages of Wow services to handlers, in order per aggregate",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.AddCommand(a.runCmd(), a.devCmd(), a.configCmd(), a.handlersCmd(), a.parkedCmd(), a.rewindCmd(), a.statusCmd(), a.versionCmd())
	// Cobra's own commands too, so that usageErrors reaches them.
	root.SetHelpCommand(helpCmd())
	root.InitDefaultHelpCmd()
	root.InitDefaultCompletionCmd()
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError(err) }) // inherited
	usageErrors(root)
	return root
}

// helpCmd is `wowd help [command]`. Cobra's answers an unknown topic with
// the help of the nearest command it finds, root's once usageErrors gave
// root arguments to check, and exits 0: here it is a usage error, as an
// unknown command is everywhere else.
func helpCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "help [command]",
		Short: "Help about any command",
		RunE: func(c *cobra.Command, args []string) error {
			cmd, rest, err := c.Root().Find(args)
			if err == nil && len(rest) > 0 && cmd.HasSubCommands() {
				err = fmt.Errorf("unknown command %q for %q", rest[0], cmd.CommandPath())
			}
			if err == nil && len(args) > 0 && cmd == c.Root() {
				err = fmt.Errorf("unknown command %q for %q", args[0], cmd.CommandPath())
			}
			if err != nil {
				return usageError(fmt.Errorf("help: %w", err))
			}
			cmd.InitDefaultHelpFlag()
			return cmd.Help()
		},
	}
}

// usageErrors makes the errors cobra finds in a command line, other than
// those of flag parsing (root's SetFlagErrorFunc), usage errors in c and
// the commands under it: those of the Args validators and of required
// flags, and an unknown subcommand of a command that only groups others
// (which cobra would answer with the group's help, exit 0, or with a plain
// error, exit 1).
func usageErrors(c *cobra.Command) {
	for _, sub := range c.Commands() {
		usageErrors(sub)
	}
	if !c.Runnable() && c.HasSubCommands() {
		c.Args = func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 {
				return nil
			}
			if cmd.SuggestionsMinimumDistance <= 0 {
				cmd.SuggestionsMinimumDistance = 2 // cobra's default
			}
			hint := ""
			if s := cmd.SuggestionsFor(args[0]); len(s) > 0 {
				hint = "; did you mean " + strings.Join(s, " or ") + "?"
			}
			return fmt.Errorf("unknown command %q for %q%s", args[0], cmd.CommandPath(), hint)
		}
		c.RunE = func(cmd *cobra.Command, _ []string) error { return cmd.Help() }
	}
	if args := c.Args; args != nil {
		c.Args = func(cmd *cobra.Command, a []string) error {
			if err := args(cmd, a); err != nil {
				return usageError(err)
			}
			return nil
		}
	}
	// Cobra checks required flags after PreRunE (and ignores PreRun when
	// PreRunE is set), so they are checked here first.
	if c.Runnable() && c.PreRun == nil {
		pre := c.PreRunE
		c.PreRunE = func(cmd *cobra.Command, args []string) error {
			if err := cmd.ValidateRequiredFlags(); err != nil {
				return usageError(err)
			}
			if err := cmd.ValidateFlagGroups(); err != nil {
				return usageError(err)
			}
			if pre != nil {
				return pre(cmd, args)
			}
			return nil
		}
	}
}

// configFlag adds --config, also read from WOWD_CONFIG, and --set.
func (a *app) configFlag(cmd *cobra.Command, def, help string) {
	cmd.Flags().String("config", def, help+" (env WOWD_CONFIG)")
	cmd.Flags().StringArray("set", nil, "set a key over the file and the environment: wow.log.level=debug; "+
		"repeatable; pairs may be comma-separated, a list is {a,b}, an item key[0]=v, null restores the default")
}

// configPath returns --config of cmd, else WOWD_CONFIG.
func (a *app) configPath(cmd *cobra.Command) string {
	v := viper.New()
	_ = v.BindPFlag("config", cmd.Flags().Lookup("config"))
	for _, kv := range a.env {
		if val, ok := strings.CutPrefix(kv, "WOWD_CONFIG="); ok {
			v.SetDefault("config", val)
		}
	}
	return v.GetString("config")
}

// sources returns the layers over the file: the environment and --set.
func (a *app) sources(cmd *cobra.Command) config.Sources {
	set, _ := cmd.Flags().GetStringArray("set") // defined by configFlag
	return config.Sources{Env: a.env, Set: set}
}

// load reads and validates the configuration of cmd: --config (or
// WOWD_CONFIG), the environment and --set.
func (a *app) load(cmd *cobra.Command) (*config.Config, *config.Origins, error) {
	return a.loadContext(context.Background(), cmd)
}

// loadContext is load that gives up reading wow.metadata once ctx is done.
func (a *app) loadContext(ctx context.Context, cmd *cobra.Command) (*config.Config, *config.Origins, error) {
	path := a.configPath(cmd)
	if path == "" {
		return nil, nil, configError(errors.New("no configuration: pass --config FILE or set WOWD_CONFIG"))
	}
	cfg, origins, err := config.LoadSourcesContext(ctx, path, a.reg, a.sources(cmd))
	if err != nil {
		return nil, nil, configError(err)
	}
	return cfg, origins, nil
}

func (a *app) versionCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the version",
		Args:  cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			_, err := fmt.Fprintln(a.stdout, "wowd", version())
			return err
		},
	}
}

// logger builds the process logger from wow.log; its level can be changed
// in place.
func (a *app) logger(cfg *config.Config) (*zap.Logger, zap.AtomicLevel, error) {
	atom := zap.NewAtomicLevel()
	level, err := zapcore.ParseLevel(cfg.Log.Level)
	if err != nil {
		return nil, atom, configError(fmt.Errorf("wow.log.level: %w", err))
	}
	atom.SetLevel(level)
	var zc zap.Config
	if cfg.Log.Format == "console" {
		zc = zap.NewDevelopmentConfig()
	} else {
		zc = zap.NewProductionConfig()
	}
	// Errors name what failed and why; a stack trace per retried error
	// only buries that.
	zc.DisableStacktrace = true
	zc.Level = atom
	zc.OutputPaths = []string{"stderr"}
	zc.ErrorOutputPaths = []string{"stderr"}
	log, err := zc.Build()
	if err != nil {
		return nil, atom, fmt.Errorf("building the logger: %w", err)
	}
	return log.With(zap.String("service", cfg.Service)), atom, nil
}

// hangups delivers SIGHUP from now on instead of letting it end the
// process (Go's default), until stop; several while one is unread make
// one.
func hangups() (hup <-chan os.Signal, stop func()) {
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, syscall.SIGHUP)
	return ch, func() { signal.Stop(ch) }
}

// signalContext is done at the first SIGTERM or SIGINT; a second one exits
// at once.
func signalContext() (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(context.Background())
	ch := make(chan os.Signal, 2)
	signal.Notify(ch, syscall.SIGTERM, syscall.SIGINT)
	done := make(chan struct{})
	go func() {
		select {
		case <-ch:
			cancel()
		case <-done:
			return
		}
		select {
		case <-ch:
			fmt.Fprintln(os.Stderr, "wowd: second signal, exiting now")
			os.Exit(ExitFailure)
		case <-done:
		}
	}()
	var once sync.Once
	return ctx, func() { // called once the daemon stopped, and deferred as well
		once.Do(func() {
			signal.Stop(ch)
			close(done)
			cancel()
		})
	}
}
