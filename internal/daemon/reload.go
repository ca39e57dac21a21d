package daemon

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/fsnotify/fsnotify"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/wowd/wowd/internal/config"
	"github.com/wowd/wowd/internal/metrics"
)

// Reload is what the daemon needs to apply changes of its configuration
// file while it runs.
type Reload struct {
	// Path is the configuration file.
	Path string
	// Read is what the file held before the running configuration was
	// loaded from it; nil when unknown. The watcher reads the file as it
	// starts, and applies it as a change unless it still holds Read: a
	// change made during start-up, before the file was watched, is not
	// missed.
	Read []byte
	// Load reads data, the file's contents as the watcher just read them,
	// over the same environment and --set arguments as at start, and
	// validates it. It gives up when ctx is done: Stop began. It reads
	// data, not the file again: what is applied is what the watcher takes
	// for handled (a file written again meanwhile, then back as it was,
	// would be taken for applied otherwise).
	Load func(ctx context.Context, data []byte) (*config.Config, error)
	// Level is the logger's level, set in place when wow.log.level
	// changes.
	Level zap.AtomicLevel
}

// reconfigurer is a handler that takes new values of its reloadable keys
// (tagged reload:"true") while it runs, such as the http sink.
type reconfigurer interface {
	// Reconfigure checks cfg, the handler's configuration decoded again,
	// which differs from the running one only in reloadable keys, and
	// returns the function that applies it; an error leaves the handler as
	// it is. apply runs concurrently with Handle: the handler makes that
	// safe.
	Reconfigure(cfg any) (apply func(), err error)
}

// reloadSettle is how long the file must stay unchanged after an event
// before it is read: editors and `kubectl` write it in several steps.
var reloadSettle = 200 * time.Millisecond

// A change refused for a passing reason is read again after
// reloadRetryMin, then after twice as long each time it is refused again,
// up to reloadRetryMax.
var (
	reloadRetryMin = time.Second
	reloadRetryMax = time.Minute
)

// reloader watches the configuration file. Its goroutine, started by
// Start and stopped by Stop, is the only one to touch last, real, realDir,
// applied, wait, force and failure while it runs; started and done belong to Start
// and Stop; now is ReloadNow's.
type reloader struct {
	Reload
	watcher  *fsnotify.Watcher
	events   <-chan fsnotify.Event // the watcher's (a test's stand-in)
	errs     <-chan error          // the watcher's (a test's stand-in)
	count    *metrics.Reloads
	last     []byte         // the contents last handled: applied, or refused for what they say; at first Reload.Read
	real     string         // the file the path led to when last looked at
	realDir  string         // real's directory, watched too when it is not the path's; "": not watched
	applied  *config.Config // the running configuration, reloadable keys as last applied
	wait     time.Duration  // the pause before the next retry of a passing refusal; 0: none due
	failure  string         // the passing refusal last logged; "" since the last handled read or SIGHUP
	failedOn []byte         // the contents failure was for
	force    bool           // the read due is asked for (ReloadNow): it reads contents handled already
	now      chan struct{}  // ReloadNow's requests, one pending at most; never closed
	started  bool           // set by Start: the goroutine runs
	done     chan struct{}  // closed when the goroutine ends

	// ctx is cancelled when Stop begins: it ends the goroutine and the
	// reload under way (Load).
	ctx    context.Context
	cancel context.CancelFunc

	// mu guards closing, set when Stop begins. A reload applies its
	// changes holding it, and not once closing is set: no handler is
	// reconfigured after Stop began, though Stop does not wait for a
	// reload that is slow to give up.
	mu      sync.Mutex
	closing bool
}

// close ends the reloads: the one under way gives up, and none applies
// anything from now on.
func (r *reloader) close() {
	r.cancel()
	r.mu.Lock()
	r.closing = true
	r.mu.Unlock()
}

// WatchConfig makes the daemon apply changes of its configuration file
// while it runs, from Start to Stop: log level, and the handler keys tagged
// reload:"true" (the http sink's limits, request timeout and header files).
// A change of any other key is logged as needing a restart and not applied;
// a file that does not load is logged and refused whole. A refusal for what
// the file says (config.Invalid) stands until the file changes again; one
// for a passing reason (the file or a header file it names cannot be read,
// wow.metadata does not answer, ...) is tried again, after 1s, then twice as
// long each time up to a minute, until the file applies or changes. Each
// change read is counted in wowd_config_reloads_total, a passing refusal
// once per distinct error. ReloadNow reads the file at once, changed or
// not. Call it before Start.
func (rt *Daemon) WatchConfig(r Reload) error {
	// Absolute from here on: the watcher names events by the directories
	// it watches, and a relative path's link target (EvalSymlinks keeps
	// it relative) would never match them.
	if abs, err := filepath.Abs(r.Path); err == nil {
		r.Path = abs
	}
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return fmt.Errorf("watching the configuration: %w", err)
	}
	// The directory, not the file: an editor or a Kubernetes ConfigMap
	// replaces the file, and a watch on the old one would see nothing more.
	if err := w.Add(filepath.Dir(r.Path)); err != nil {
		_ = w.Close()
		return fmt.Errorf("watching the configuration: %w", err)
	}
	// Watched from here on; a change made before is found by the read as
	// the watcher starts (watch), which compares the file with r.Read.
	real, err := filepath.EvalSymlinks(r.Path)
	if err != nil {
		_ = w.Close()
		return fmt.Errorf("watching the configuration: %w", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	rt.reload = &reloader{
		Reload:  r,
		watcher: w,
		events:  w.Events,
		errs:    w.Errors,
		count:   rt.metrics.Reloads(),
		last:    r.Read,
		applied: rt.cfg,
		done:    make(chan struct{}),
		now:     make(chan struct{}, 1),
		ctx:     ctx,
		cancel:  cancel,
	}
	rt.reload.follow(real, rt.log)
	return nil
}

// watch reads the file when it changed and settled, and again while a
// change is refused for a passing reason, until Stop.
func (rt *Daemon) watch() {
	r := rt.reload
	defer close(r.done)
	defer func() { _ = r.watcher.Close() }()
	settle := time.NewTimer(time.Hour)
	settle.Stop()
	defer settle.Stop()
	retry := time.NewTimer(time.Hour)
	retry.Stop()
	defer retry.Stop()
	// The file may have changed since the running configuration was read
	// from it, before it was watched: read as for a change.
	rt.read(false, retry)
	for {
		select {
		case <-r.ctx.Done():
			return
		case ev, ok := <-r.events:
			if !ok {
				return
			}
			if r.concerns(ev, rt.log) {
				settle.Reset(reloadSettle)
			}
		case err, ok := <-r.errs:
			if !ok {
				return
			}
			if errors.Is(err, fsnotify.ErrEventOverflow) {
				// The kernel's queue overflowed: a change of the file may
				// be among the events lost. Read it as for a change (its
				// contents are compared with those last handled).
				rt.log.Warn("watching the configuration file: events were lost, reading it again", zap.String("path", r.Path), zap.Error(err))
				settle.Reset(reloadSettle)
				continue
			}
			rt.log.Warn("watching the configuration file", zap.String("path", r.Path), zap.Error(err))
		case <-settle.C:
			r.wait = 0 // a new change: its retries start over
			rt.read(false, retry)
		case <-r.now:
			// Asked for: its refusal is logged and counted even when it
			// repeats the last one.
			r.wait, r.failure = 0, ""
			rt.log.Info("reading the configuration file again, as asked", zap.String("path", r.Path))
			rt.read(true, retry)
		case <-retry.C:
			rt.read(false, retry)
		}
	}
}

// read reads the file (see reloadFile), even if its contents were handled
// already when force (or when the read retried is forced), and arranges
// the next retry after a refusal for a passing reason, or ends the
// retries.
func (rt *Daemon) read(force bool, retry *time.Timer) {
	r := rt.reload
	r.force = r.force || force
	if !rt.reloadFile(r.force) {
		r.wait = 0
		r.failure, r.failedOn = "", nil
		r.force = false
		retry.Stop()
		return
	}
	r.wait = min(max(2*r.wait, reloadRetryMin), reloadRetryMax)
	retry.Reset(r.wait)
}

// ReloadNow asks for the configuration file to be read and applied now,
// even if its contents did not change (SIGHUP): a reload refused for a
// reason that has passed need not wait for its retry, nor one refused for
// what the file says for the file to change. It does not wait: the watcher
// reads the file, and logs and counts what came of it as for a change.
// Requests made while one is pending make one read. It reports whether a
// configuration file is watched: false without WatchConfig or once Stop
// began, when there is nothing to reload. Safe to call at any time, from
// any goroutine; a request made before Start is served when it starts.
func (rt *Daemon) ReloadNow() bool {
	r := rt.reload
	if r == nil || r.ctx.Err() != nil {
		return false
	}
	select {
	case r.now <- struct{}{}:
	default: // one is pending: it reads the file as it is then
	}
	return true
}

// concerns reports whether ev, an event in the file's directory or in that
// of the file its path links to, may have changed the file: an event of
// the path or of the file it leads to, or one after which its path leads
// to another file (a Kubernetes ConfigMap volume swaps a link to a
// directory). Other files of the directories, such as a log written there,
// are not the configuration's business.
func (r *reloader) concerns(ev fsnotify.Event, log *zap.Logger) bool {
	if name := filepath.Clean(ev.Name); name == filepath.Clean(r.Path) || name == filepath.Clean(r.real) {
		return true
	}
	real, err := filepath.EvalSymlinks(r.Path)
	if err != nil || real == r.real {
		return false
	}
	r.follow(real, log)
	return true
}

// follow records real as the file the path leads to, and watches its
// directory too when that is not the path's own: a file a link points at
// from another directory, edited in place, changes only there. The
// directory watched for the file before, if any, is let go (a Kubernetes
// ConfigMap's previous version directory is gone by then anyway).
func (r *reloader) follow(real string, log *zap.Logger) {
	r.real = real
	dir, _ := filepath.Abs(filepath.Dir(real))
	own, _ := filepath.Abs(filepath.Dir(r.Path))
	if dir == r.realDir {
		return
	}
	if r.realDir != "" {
		_ = r.watcher.Remove(r.realDir) // may be gone
		r.realDir = ""
	}
	if dir == own {
		return
	}
	if err := r.watcher.Add(dir); err != nil {
		log.Warn("watching the directory of the file the configuration path links to; changes made there in place need a SIGHUP",
			zap.String("path", r.Path), zap.String("file", real), zap.Error(err))
		return
	}
	r.realDir = dir
}

// reloadFile reads the configuration file and applies what changed. It
// reports whether the read was refused for a passing reason, to be tried
// again: contents count as handled once applied, or refused for what they
// say (config.Invalid); only those are not read again while they stay the
// same, unless force.
func (rt *Daemon) reloadFile(force bool) (passing bool) {
	r := rt.reload
	// Where the path leads, looked at again at every read: a link pointed
	// elsewhere whose events were lost (an overflow), or read for a SIGHUP,
	// is followed from here on.
	if real, err := filepath.EvalSymlinks(r.Path); err == nil && real != r.real {
		r.follow(real, rt.log)
	}
	data, err := os.ReadFile(r.Path)
	if err != nil {
		rt.refused(fmt.Errorf("reading %s: %w", r.Path, err), nil)
		return true
	}
	if !force && bytes.Equal(data, r.last) {
		return false // touched, or written again as it was: refused or applied already
	}
	outcome, err := rt.apply(data)
	if err != nil {
		if r.ctx.Err() != nil {
			rt.log.Info("the configuration reload under way is abandoned: stopping", zap.String("path", r.Path))
			return false
		}
		if !config.Invalid(err) {
			rt.refused(err, data)
			return true
		}
		r.last = data
		rt.log.Error("the configuration file changed but is refused; the running configuration stays",
			zap.String("path", r.Path), zap.Error(err))
		r.count.Count(metrics.ReloadInvalid)
		return false
	}
	r.last = data
	r.count.Count(outcome)
	return false
}

// refused logs and counts a refusal for a passing reason of the file's
// contents data, once while it repeats with the same error for the same
// contents (retries, an event that changed nothing): a new change refused
// for the same reason is reported, as is a SIGHUP's read (see watch).
func (rt *Daemon) refused(err error, data []byte) {
	r := rt.reload
	if err.Error() == r.failure && bytes.Equal(data, r.failedOn) {
		return
	}
	r.failure, r.failedOn = err.Error(), data
	rt.log.Error("the configuration file cannot be applied yet; it is read again until it can, the running configuration stays meanwhile",
		zap.String("path", r.Path), zap.Error(err))
	r.count.Count(metrics.ReloadRetrying)
}

// apply loads the configuration again from data, the file's contents, and
// applies its reloadable changes, all or none, and returns the outcome to
// count.
func (rt *Daemon) apply(data []byte) (metrics.ReloadOutcome, error) {
	r := rt.reload
	cfg, err := r.Load(r.ctx, data)
	if err != nil {
		return 0, err
	}
	// What needs a restart is what differs from the configuration the
	// daemon started with; what may apply is what differs from the last
	// applied.
	fromStart, err := config.Changes(rt.cfg, cfg, rt.reg)
	if err != nil {
		return 0, err
	}
	var restart []string
	for _, c := range fromStart {
		_, canReload := rt.handlers[dispatcherOf(c.Path, cfg)].(reconfigurer)
		if !c.Reload || (c.Path != "wow.log.level" && !canReload) {
			restart = append(restart, c.Path)
		}
	}
	changed, err := config.Changes(r.applied, cfg, rt.reg)
	if err != nil {
		return 0, err
	}
	var (
		applied []string
		commits []func()
		level   *zapcore.Level
		done    = map[string]bool{} // dispatchers whose handler was prepared
		refused []error             // of the dispatchers' handlers, each problem
	)
	for _, c := range changed {
		if !c.Reload {
			continue
		}
		if c.Path == "wow.log.level" {
			l, err := zapcore.ParseLevel(cfg.Log.Level)
			if err != nil {
				return 0, fmt.Errorf("wow.log.level: %w", err)
			}
			level = &l
			applied = append(applied, c.Path)
			continue
		}
		name := dispatcherOf(c.Path, cfg)
		h, ok := rt.handlers[name].(reconfigurer)
		if !ok {
			continue // in restart
		}
		applied = append(applied, c.Path)
		if done[name] {
			continue
		}
		done[name] = true
		if err := fitsRunningTry(r.Path, name, cfg, rt.cfg); err != nil {
			refused = append(refused, err)
			continue
		}
		commit, err := h.Reconfigure(cfg.Dispatchers[name].Handler.Decoded)
		if err != nil {
			refused = append(refused, fmt.Errorf("wow.dispatchers.%s.handler: %w", name, err))
			continue
		}
		commits = append(commits, commit)
	}
	if len(refused) > 0 {
		// Every dispatcher's problem at once, nothing applied (the
		// prepared ones are dropped uncommitted). One the file itself
		// refuses (config.Invalid) goes first: the file then stands
		// refused until it changes, however passing the others are.
		slices.SortStableFunc(refused, func(a, b error) int {
			ia, ib := config.Invalid(a), config.Invalid(b)
			switch {
			case ia && !ib:
				return -1
			case ib && !ia:
				return 1
			}
			return 0
		})
		return 0, errors.Join(refused...)
	}
	r.mu.Lock()
	if r.closing {
		r.mu.Unlock()
		return 0, fmt.Errorf("applying the configuration: %w", context.Canceled)
	}
	if level != nil {
		r.Level.SetLevel(*level)
	}
	for _, commit := range commits {
		commit()
	}
	r.mu.Unlock()
	r.applied = running(cfg, r.applied, rt.cfg)
	if len(applied) > 0 {
		rt.log.Info("configuration reloaded", zap.String("path", r.Path), zap.Strings("applied", applied))
	}
	if len(restart) > 0 {
		slices.Sort(restart)
		rt.log.Warn("configuration changed: these keys need a restart and were not applied",
			zap.String("path", r.Path), zap.Strings("keys", restart))
		return metrics.ReloadRestartNeeded, nil
	}
	if len(applied) == 0 {
		rt.log.Info("configuration file read again; no key changed", zap.String("path", r.Path))
		return metrics.ReloadUnchanged, nil
	}
	return metrics.ReloadApplied, nil
}

// running returns the running configuration once cfg's reloadable keys
// were applied over prev, the one before: cfg, but a dispatcher whose
// handler, built from start, cannot take cfg's (removed, or of another
// type: a change for a restart) keeps its entry of prev, the settings its
// handler still runs with. Were it taken from cfg, a later file putting
// the dispatcher back with new reloadable values would compare with a
// configuration lacking it, and they would not apply.
func running(cfg, prev, start *config.Config) *config.Config {
	out := *cfg
	out.Dispatchers = maps.Clone(cfg.Dispatchers)
	for name, d := range start.Dispatchers {
		if now, ok := cfg.Dispatchers[name]; !ok || now.Handler.Type != d.Handler.Type {
			out.Dispatchers[name] = prev.Dispatchers[name]
		}
	}
	return &out
}

// runningFitter is a handler configuration whose time limits, as a reload
// would apply them, must fit in a try of the handler.timeout the handler
// runs with, its restart-only keys in force as running (the configuration
// the handler was built from) has them (handlers.HTTPConfig: a new
// request-timeout with the running batch.linger).
type runningFitter interface {
	FitRunning(running any, tryTimeout time.Duration) error
}

// fitsRunningTry reports, as a refusal for what the file at path says,
// whether the time limits of dispatcher name's handler in cfg, with its
// restart-only keys as start has them, do not fit in a try of the
// handler.timeout it runs with, that of start: those take a restart to
// change, so what the file says of them neither makes room nor takes it.
// Validated, cfg's fit its own handler.timeout: a file raising both would
// otherwise be refused by the handler as for a passing reason, and read
// again every minute until wowd stopped.
func fitsRunningTry(path, name string, cfg, start *config.Config) error {
	tb, ok := cfg.Dispatchers[name].Handler.Decoded.(runningFitter)
	was := start.Dispatchers[name].Handler
	if !ok || was.Timeout <= 0 {
		return nil
	}
	if err := tb.FitRunning(was.Decoded, was.Timeout); err != nil {
		return &config.Errors{File: path, List: []config.Error{{
			Path: "wow.dispatchers." + name + ".handler",
			Msg:  fmt.Sprintf("%v; a new handler.timeout or batch.linger applies at a restart only", err),
		}}}
	}
	return nil
}

// dispatcherOf returns the dispatcher whose handler key path is: the
// longest name it starts with, names holding dots.
func dispatcherOf(path string, cfg *config.Config) string {
	name := ""
	for n := range cfg.Dispatchers {
		if strings.HasPrefix(path, "wow.dispatchers."+n+".handler.") && len(n) > len(name) {
			name = n
		}
	}
	return name
}
