package daemon

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fsnotify/fsnotify"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	zapobserver "go.uber.org/zap/zaptest/observer"

	"github.com/wowd/wowd/handler"
	"github.com/wowd/wowd/internal/config"
	"github.com/wowd/wowd/internal/metrics"
	"github.com/wowd/wowd/internal/testwait"
)

// reloadYAML is a configuration whose http sink POSTs to url with at most
// conc requests in flight, logging at level, with workers workers.
func reloadYAML(broker, url string, conc int, level string, workers int) string {
	return fmt.Sprintf(`wow:
  service: reloader
  kafka:
    bootstrap-servers: [%s]
    commit-interval: 100ms
  contexts:
    example:
      aggregates: [cart]
  dispatch:
    workers: %d
  dispatchers:
    sink:
      topics: [event]
      format: raw
      handler:
        type: http
        url: %s
        max-concurrency: %d
  log:
    level: %s
  metrics:
    listen: ""
`, broker, workers, url, conc, level)
}

// TestReloadUnderARunningDaemon rewrites the configuration file under a
// running daemon: a new log level and sink concurrency apply without a
// restart, a change of a restart-only key is reported and not applied, and
// a file that does not load is refused whole, each counted.
func TestReloadUnderARunningDaemon(t *testing.T) {
	reloadSettle = 20 * time.Millisecond
	c := newCluster(t, kfake.DefaultNumPartitions(1))
	const topic = "wow.example.cart.event"
	if err := c.CreateTopic(topic, 1, nil); err != nil {
		t.Fatal(err)
	}
	var inFlight atomic.Int32
	release := make(chan struct{})
	var releaseOnce sync.Once
	releaseAll := func() { releaseOnce.Do(func() { close(release) }) }
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		inFlight.Add(1)
		defer inFlight.Add(-1)
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	defer srv.Close()
	defer releaseAll() // before srv.Close: the requests end
	broker := c.ListenAddrs()[0]

	path := filepath.Join(t.TempDir(), "wowd.yaml")
	write := func(s string) {
		t.Helper()
		// As an editor does: a new file renamed over the old one.
		tmp := path + ".tmp"
		if err := os.WriteFile(tmp, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, path); err != nil {
			t.Fatal(err)
		}
	}
	write(reloadYAML(broker, srv.URL, 1, "info", 2))
	reg := handler.Default()
	cfg, err := config.Load(path, reg, nil)
	if err != nil {
		t.Fatal(err)
	}
	level := zap.NewAtomicLevelAt(zapcore.InfoLevel)
	core, logs := zapobserver.New(level)
	rt, err := New(cfg, reg, zap.New(core), "test")
	if err != nil {
		t.Fatal(err)
	}
	if err := rt.WatchConfig(Reload{Path: path, Read: []byte(reloadYAML(broker, srv.URL, 1, "info", 2)), Level: level,
		Load: func(context.Context, []byte) (*config.Config, error) { return config.Load(path, reg, nil) }}); err != nil {
		t.Fatal(err)
	}
	rt.Start(context.Background())
	stopped := false
	defer func() {
		if !stopped {
			releaseAll()
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			_ = rt.Stop(ctx)
		}
	}()

	cl, err := kgo.NewClient(kgo.SeedBrokers(broker))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var recs []*kgo.Record
	for i := range 4 { // four aggregates: nothing orders them
		recs = append(recs, &kgo.Record{Topic: topic, Key: fmt.Appendf(nil, "cart-%d", i), Value: []byte("{}")})
	}
	if err := cl.ProduceSync(context.Background(), recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	testwait.For(t, 30*time.Second, "one request in flight", func() bool { return inFlight.Load() == 1 })

	count := func(o metrics.ReloadOutcome) int { return reloadCount(t, rt, o) }

	// Reloadable keys only: applied.
	write(reloadYAML(broker, srv.URL, 4, "debug", 2))
	testwait.For(t, 10*time.Second, "the reload applied", func() bool { return count(metrics.ReloadApplied) == 1 })
	if !level.Enabled(zapcore.DebugLevel) {
		t.Error("log level not debug after the reload")
	}
	testwait.For(t, 10*time.Second, "four requests in flight after max-concurrency went to 4",
		func() bool { return inFlight.Load() == 4 })
	if n := logs.FilterMessage("configuration reloaded").Len(); n != 1 {
		t.Errorf("%d reload logs", n)
	}

	// A restart-only key: reported, not applied; the reloadable one is.
	write(reloadYAML(broker, srv.URL, 4, "warn", 7))
	testwait.For(t, 10*time.Second, "the restart reported", func() bool { return count(metrics.ReloadRestartNeeded) == 1 })
	restart := logs.FilterMessageSnippet("need a restart").All()
	if len(restart) != 1 || !strings.Contains(fmt.Sprint(restart[0].ContextMap()["keys"]), "wow.dispatch.workers") {
		t.Errorf("restart log: %+v", restart)
	}
	if w := rt.ex.Stats().Workers; w != 2 {
		t.Errorf("%d workers: the restart-only change was applied", w)
	}
	if level.Level() != zapcore.WarnLevel {
		t.Errorf("level %v, want warn", level.Level())
	}

	// The restart-only key put back as it runs: no key changed, counted
	// as unchanged (it was logged and counted nowhere).
	write(reloadYAML(broker, srv.URL, 4, "warn", 2))
	testwait.For(t, 10*time.Second, "the revert read", func() bool { return count(metrics.ReloadUnchanged) == 1 })
	if n := count(metrics.ReloadRestartNeeded); n != 1 {
		t.Errorf("%d restarts reported after the revert, want the 1 before", n)
	}

	// A file that does not load: refused, nothing changes.
	write(strings.Replace(reloadYAML(broker, srv.URL, 1, "error", 2), "max-concurrency", "max-concurency", 1))
	testwait.For(t, 10*time.Second, "the invalid file refused", func() bool { return count(metrics.ReloadInvalid) == 1 })
	refused := logs.FilterMessageSnippet("refused").All()
	if len(refused) != 1 || !strings.Contains(refused[0].ContextMap()["error"].(string), `did you mean "max-concurrency"`) {
		t.Errorf("refusal log: %+v", refused)
	}
	if level.Level() != zapcore.WarnLevel {
		t.Errorf("level %v after an invalid file, want warn still", level.Level())
	}
	// Other files of the directory change (a log written there): the
	// refused file is not read again.
	for i := range 5 {
		if err := os.WriteFile(filepath.Join(filepath.Dir(path), "other.log"), fmt.Appendf(nil, "%d", i), 0o600); err != nil {
			t.Fatal(err)
		}
		time.Sleep(2 * reloadSettle)
	}
	if n := count(metrics.ReloadInvalid); n != 1 {
		t.Errorf("%d invalid reloads counted after other files changed, want 1", n)
	}
	if count(metrics.ReloadApplied) != 1 || count(metrics.ReloadRestartNeeded) != 1 {
		t.Errorf("counts applied %d, restart_needed %d", count(metrics.ReloadApplied), count(metrics.ReloadRestartNeeded))
	}

	releaseAll()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	stopped = true
	if err := rt.Stop(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestReloadThroughASwappedLink changes the configuration the way a
// Kubernetes ConfigMap volume does: the file is a link through a directory
// link, ..data, which is swapped to a new directory.
func TestReloadThroughASwappedLink(t *testing.T) {
	reloadSettle = 20 * time.Millisecond
	c := newCluster(t)
	dir := t.TempDir()
	version := func(name, level string) {
		t.Helper()
		if err := os.Mkdir(filepath.Join(dir, name), 0o700); err != nil {
			t.Fatal(err)
		}
		yaml := reloadYAML(c.ListenAddrs()[0], "http://127.0.0.1:1/", 1, level, 1)
		if err := os.WriteFile(filepath.Join(dir, name, "wowd.yaml"), []byte(yaml), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(name, filepath.Join(dir, "..data_tmp")); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(filepath.Join(dir, "..data_tmp"), filepath.Join(dir, "..data")); err != nil {
			t.Fatal(err)
		}
	}
	version("..v1", "info")
	path := filepath.Join(dir, "wowd.yaml")
	if err := os.Symlink(filepath.Join("..data", "wowd.yaml"), path); err != nil {
		t.Fatal(err)
	}
	level := watching(t, path, nil)
	version("..v2", "error")
	testwait.For(t, 10*time.Second, "the level of the new version", func() bool { return level.Level() == zapcore.ErrorLevel })
}

// watching starts a daemon configured from the file at path (read: what
// it held, nil when unknown), watching it as `wowd run` does, and stops it
// at the end of the test. It returns the daemon's log level, which a
// reload of wow.log.level sets. Each of before runs on the daemon before
// it starts.
func watching(t *testing.T, path string, read []byte, before ...func(*Daemon)) zap.AtomicLevel {
	t.Helper()
	reg := handler.Default()
	cfg, err := config.Load(path, reg, nil)
	if err != nil {
		t.Fatal(err)
	}
	level := zap.NewAtomicLevelAt(zapcore.InfoLevel)
	core, _ := zapobserver.New(level)
	rt, err := New(cfg, reg, zap.New(core), "test")
	if err != nil {
		t.Fatal(err)
	}
	if err := rt.WatchConfig(Reload{Path: path, Read: read, Level: level,
		Load: func(_ context.Context, data []byte) (*config.Config, error) {
			return config.Parse(data, path, reg, nil)
		}}); err != nil {
		t.Fatal(err)
	}
	for _, f := range before {
		f(rt)
	}
	rt.Start(context.Background())
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		if err := rt.Stop(ctx); err != nil {
			t.Error(err)
		}
	})
	return level
}

// TestReloadThroughALinkToAnotherDirectory: a configuration path that is
// a link to a file in another directory (a file kept under /opt, linked
// from /etc) is reloaded when that file is edited in place, an event only
// its own directory sees; and again after the link is pointed at a file in
// a third directory, and that one is edited. Only the path's directory was
// watched: such an edit was never applied.
func TestReloadThroughALinkToAnotherDirectory(t *testing.T) {
	reloadSettle = 20 * time.Millisecond
	c := newCluster(t)
	yaml := func(level string) []byte {
		return []byte(reloadYAML(c.ListenAddrs()[0], "http://127.0.0.1:1/", 1, level, 1))
	}
	kept, other := t.TempDir(), t.TempDir()
	target, path := linkedConfig(t, kept, yaml("info"))
	level := watching(t, path, yaml("info"))
	editInPlace(t, target, yaml("error"))
	testwait.For(t, 10*time.Second, "the edit of the linked file applied", func() bool { return level.Level() == zapcore.ErrorLevel })

	moved := relink(t, path, other, yaml("warn"))
	testwait.For(t, 10*time.Second, "the file the link points at now applied", func() bool { return level.Level() == zapcore.WarnLevel })
	editInPlace(t, moved, yaml("debug"))
	testwait.For(t, 10*time.Second, "the edit of the newly linked file applied", func() bool { return level.Level() == zapcore.DebugLevel })
}

// TestReloadSeesAChangeDuringStartUp: a change of the file after the
// configuration was loaded from it and before it was watched (start-up
// takes a while: wow.metadata, the handlers, the receivers) applies once
// the daemon runs, whether what the file held at the load is known (as
// `wowd run` passes it) or not; it was taken for the running
// configuration, and the daemon kept running what the file no longer said.
func TestReloadSeesAChangeDuringStartUp(t *testing.T) {
	reloadSettle = 20 * time.Millisecond
	for _, known := range []bool{true, false} {
		t.Run(fmt.Sprintf("read known %v", known), func(t *testing.T) {
			c := newCluster(t)
			reg := handler.Default()
			r := &reloading{path: filepath.Join(t.TempDir(), "wowd.yaml"), level: zap.NewAtomicLevelAt(zapcore.InfoLevel)}
			yaml := reloadYAML(c.ListenAddrs()[0], "http://127.0.0.1:1/", 1, "info", 1)
			r.write(t, yaml)
			cfg, err := config.Load(r.path, reg, nil)
			if err != nil {
				t.Fatal(err)
			}
			r.write(t, reloadYAML(c.ListenAddrs()[0], "http://127.0.0.1:1/", 1, "debug", 1))
			if r.rt, err = New(cfg, reg, zap.NewNop(), "test"); err != nil {
				t.Fatal(err)
			}
			var read []byte
			if known {
				read = []byte(yaml)
			}
			err = r.rt.WatchConfig(Reload{Path: r.path, Read: read, Level: r.level,
				Load: func(context.Context, []byte) (*config.Config, error) { return config.Load(r.path, reg, nil) }})
			if err != nil {
				t.Fatal(err)
			}
			r.rt.Start(context.Background())
			defer r.stop(t, 20*time.Second, nil)
			testwait.For(t, 10*time.Second, "the change made during start-up applied",
				func() bool { return r.count(t, metrics.ReloadApplied) == 1 })
			if !r.level.Enabled(zapcore.DebugLevel) {
				t.Error("log level not debug, as the file says")
			}
		})
	}
}

// headerYAML is a configuration whose http sink sends the header
// Authorization read from the file token, logging at level.
func headerYAML(broker, token, level string) string {
	return fmt.Sprintf(`wow:
  service: reloader
  kafka:
    bootstrap-servers: [%s]
  contexts:
    example:
      aggregates: [cart]
  dispatchers:
    sink:
      topics: [event]
      format: raw
      handler:
        type: http
        url: http://127.0.0.1:1/
        headers-from-file: {Authorization: %s}
  log:
    level: %s
  metrics:
    listen: ""
`, broker, token, level)
}

// reloading is a started daemon watching its configuration file.
type reloading struct {
	rt      *Daemon
	path    string
	level   zap.AtomicLevel
	logs    *zapobserver.ObservedLogs
	loads   atomic.Int32 // calls of Load
	stopped bool         // by the test
}

// startReloading writes yaml to a file and starts a daemon on it watching
// the file, reading it again with load (config.Load when nil). The daemon
// stops at the end of the test, unless the test stopped it.
func startReloading(t *testing.T, yaml string, load func(ctx context.Context, path string, data []byte) (*config.Config, error)) *reloading {
	t.Helper()
	reg := handler.Default()
	if load == nil {
		load = func(_ context.Context, path string, _ []byte) (*config.Config, error) {
			return config.Load(path, reg, nil)
		}
	}
	r := &reloading{path: filepath.Join(t.TempDir(), "wowd.yaml"), level: zap.NewAtomicLevelAt(zapcore.InfoLevel)}
	r.write(t, yaml)
	cfg, err := config.Load(r.path, reg, nil)
	if err != nil {
		t.Fatal(err)
	}
	core, logs := zapobserver.New(zapcore.DebugLevel)
	r.logs = logs
	if r.rt, err = New(cfg, reg, zap.New(core), "test"); err != nil {
		t.Fatal(err)
	}
	err = r.rt.WatchConfig(Reload{Path: r.path, Read: []byte(yaml), Level: r.level, Load: func(ctx context.Context, data []byte) (*config.Config, error) {
		r.loads.Add(1)
		return load(ctx, r.path, data)
	}})
	if err != nil {
		t.Fatal(err)
	}
	r.rt.Start(context.Background())
	t.Cleanup(func() {
		if !r.stopped {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			_ = r.rt.Stop(ctx)
		}
	})
	return r
}

// stop stops the daemon within d, and fails t if Stop takes 5s longer
// (a stop after its deadline still gets to commit and leave the groups);
// then it calls unblock, if not nil, to let Stop end.
func (r *reloading) stop(t *testing.T, d time.Duration, unblock func()) {
	t.Helper()
	r.stopped = true
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	start := time.Now()
	stopped := make(chan struct{})
	go func() { // owned by this function, which waits for it
		defer close(stopped)
		_ = r.rt.Stop(ctx)
	}()
	select {
	case <-stopped:
	case <-time.After(d + 5*time.Second):
		t.Errorf("Stop with a deadline of %v still runs after %v", d, time.Since(start))
		if unblock != nil {
			unblock()
		}
		<-stopped
	}
}

// write replaces the file as an editor does: a new file renamed over it.
func (r *reloading) write(t *testing.T, s string) {
	t.Helper()
	tmp := r.path + ".tmp"
	if err := os.WriteFile(tmp, []byte(s), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, r.path); err != nil {
		t.Fatal(err)
	}
}

// count is wowd_config_reloads_total{outcome=o}.
func (r *reloading) count(t *testing.T, o metrics.ReloadOutcome) int {
	t.Helper()
	return reloadCount(t, r.rt, o)
}

// reloadCount is rt's wowd_config_reloads_total{outcome=o}, -1 when absent.
func reloadCount(t *testing.T, rt *Daemon, o metrics.ReloadOutcome) int {
	t.Helper()
	mfs, err := rt.Metrics().Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "wowd_config_reloads_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			if m.GetLabel()[0].GetValue() == o.String() {
				return int(m.GetCounter().GetValue())
			}
		}
	}
	return -1
}

// documentLoader reads the file as `wowd run` does when it changes: the
// document, not the files it names, giving up on wow.metadata when ctx is
// done.
func documentLoader(reg *handler.Registry) func(ctx context.Context, path string, data []byte) (*config.Config, error) {
	return func(ctx context.Context, path string, data []byte) (*config.Config, error) {
		cfg, _, err := config.ParseSourcesContext(ctx, data, path, reg, config.Sources{})
		return cfg, err
	}
}

// TestReloadRetriesAPassingRefusal: a changed file refused for a reason
// outside it (a header file of the http sink not there yet, as when a
// secret is mounted a moment after the ConfigMap changed) is read again,
// with a growing pause, until it applies, though the file does not change
// again; the refusal is logged and counted once, not per attempt. A file
// refused for what it says is not read again.
func TestReloadRetriesAPassingRefusal(t *testing.T) {
	reloadSettle = 20 * time.Millisecond
	defer func(d time.Duration) { reloadRetryMin = d }(reloadRetryMin)
	reloadRetryMin = 10 * time.Millisecond
	reg := handler.Default()
	for _, tc := range []struct {
		name string
		load func(ctx context.Context, path string, data []byte) (*config.Config, error)
	}{
		// As `wowd run` reads it again: the document, not the files it
		// names; the sink reads its header files.
		{"document", documentLoader(reg)},
		// With the files it names checked with the configuration.
		{"files", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newCluster(t)
			dir := t.TempDir()
			token := func(name string) string { // whole at once: a retry may read it any time
				p := filepath.Join(dir, name)
				if err := os.WriteFile(p+".tmp", []byte("Bearer "+name), 0o600); err != nil {
					t.Fatal(err)
				}
				if err := os.Rename(p+".tmp", p); err != nil {
					t.Fatal(err)
				}
				return p
			}
			r := startReloading(t, headerYAML(c.ListenAddrs()[0], token("old"), "info"), tc.load)

			next := filepath.Join(dir, "new") // not there yet
			r.write(t, headerYAML(c.ListenAddrs()[0], next, "debug"))
			testwait.For(t, 10*time.Second, "the change refused", func() bool { return r.count(t, metrics.ReloadRetrying) == 1 })
			testwait.For(t, 10*time.Second, "three attempts", func() bool { return r.loads.Load() >= 3 })
			if r.level.Enabled(zapcore.DebugLevel) {
				t.Fatal("the refused change applied")
			}
			token("new")
			testwait.For(t, 10*time.Second, "the change applied once its header file is there",
				func() bool { return r.count(t, metrics.ReloadApplied) == 1 })
			if !r.level.Enabled(zapcore.DebugLevel) {
				t.Error("log level not debug after the reload")
			}
			if n := r.count(t, metrics.ReloadRetrying); n != 1 {
				t.Errorf("%d passing refusals counted, want 1", n)
			}
			if n := r.count(t, metrics.ReloadInvalid); n != 0 {
				t.Errorf("a passing refusal counted as invalid %d times, want 0", n)
			}
			if n := r.logs.FilterMessageSnippet("cannot be applied yet").Len(); n != 1 || r.logs.FilterMessageSnippet("refused").Len() != 0 {
				t.Errorf("%d refusals logged, want 1, for a passing reason: %+v", n, r.logs.FilterMessageSnippet("configuration file").All())
			}
		})
	}

	t.Run("invalid", func(t *testing.T) {
		c := newCluster(t)
		r := startReloading(t, reloadYAML(c.ListenAddrs()[0], "http://127.0.0.1:1/", 1, "info", 1), nil)
		r.write(t, strings.Replace(reloadYAML(c.ListenAddrs()[0], "http://127.0.0.1:1/", 2, "debug", 1), "max-concurrency", "max-concurency", 1))
		testwait.For(t, 10*time.Second, "the invalid file refused", func() bool { return r.count(t, metrics.ReloadInvalid) == 1 })
		time.Sleep(30 * reloadRetryMin)
		if n := r.loads.Load(); n != 1 {
			t.Errorf("an invalid file read %d times, want once", n)
		}
	})
}

// TestReloadBesideANewEnvironmentHeader: a change of headers-from-env,
// which needs a restart, naming a variable wowd's environment does not set,
// is reported as needing a restart, and the reloadable keys of the same
// file apply. The sink read the environment again on reload, so the whole
// reload was refused and retried until wowd stopped (the environment of a
// running process does not change), counted as retrying.
func TestReloadBesideANewEnvironmentHeader(t *testing.T) {
	reloadSettle = 20 * time.Millisecond
	c := newCluster(t)
	r := startReloading(t, reloadYAML(c.ListenAddrs()[0], "http://127.0.0.1:1/", 1, "info", 1), documentLoader(handler.Default()))
	yaml := strings.Replace(reloadYAML(c.ListenAddrs()[0], "http://127.0.0.1:1/", 2, "debug", 1),
		"        max-concurrency: 2\n", "        max-concurrency: 2\n        headers-from-env: {X-Token: WOWD_TEST_NOT_SET_ANYWHERE}\n", 1)
	r.write(t, yaml)
	testwait.For(t, 10*time.Second, "the change read", func() bool {
		return r.count(t, metrics.ReloadRestartNeeded) > 0 || r.count(t, metrics.ReloadRetrying) > 0
	})
	if n := r.count(t, metrics.ReloadRestartNeeded); n != 1 {
		t.Errorf("%d reloads needing a restart counted, want 1 (retrying: %d)", n, r.count(t, metrics.ReloadRetrying))
	}
	if !r.level.Enabled(zapcore.DebugLevel) {
		t.Error("the new log level not applied beside a key needing a restart")
	}
	if n := r.logs.FilterMessage("configuration reloaded").FilterField(zap.Strings("applied", []string{
		"wow.dispatchers.sink.handler.max-concurrency", "wow.log.level"})).Len(); n != 1 {
		t.Errorf("%d reloads applying max-concurrency and the log level logged, want 1", n)
	}
	if n := r.logs.FilterMessageSnippet("need a restart").FilterField(zap.Strings("keys", []string{"wow.dispatchers.sink.handler.headers-from-env.X-Token"})).Len(); n != 1 {
		t.Errorf("%d warnings naming headers-from-env, want 1: %+v", n, r.logs.FilterMessageSnippet("configuration").All())
	}
}

// TestReloadRefusesATimeoutThatFitsOnlyAfterARestart: a file raising the
// dispatcher's handler.timeout (which needs a restart) and the sink's
// request-timeout past the running handler.timeout is refused for what it
// says: counted as invalid, logged once, and not read again while it stays
// as it is. It was refused as for a passing reason: counted as retrying and
// read again every minute until wowd stopped, though nothing outside the
// file could let it apply.
func TestReloadRefusesATimeoutThatFitsOnlyAfterARestart(t *testing.T) {
	reloadSettle = 20 * time.Millisecond
	defer func(d time.Duration) { reloadRetryMin = d }(reloadRetryMin)
	reloadRetryMin = 10 * time.Millisecond
	c := newCluster(t)
	yaml := func(level, timeouts string) string {
		return strings.Replace(reloadYAML(c.ListenAddrs()[0], "http://127.0.0.1:1/", 1, level, 1),
			"        max-concurrency: 1\n", "        max-concurrency: 1\n"+timeouts, 1)
	}
	r := startReloading(t, yaml("info", "        timeout: 30s\n        request-timeout: 10s\n"), documentLoader(handler.Default()))
	r.write(t, yaml("debug", "        timeout: 60s\n        request-timeout: 40s\n"))
	testwait.For(t, 10*time.Second, "the change refused", func() bool {
		return r.count(t, metrics.ReloadInvalid) > 0 || r.count(t, metrics.ReloadRetrying) > 0
	})
	time.Sleep(30 * reloadRetryMin)
	if n := r.count(t, metrics.ReloadInvalid); n != 1 {
		t.Errorf("%d refusals for what the file says counted, want 1 (retrying: %d)", n, r.count(t, metrics.ReloadRetrying))
	}
	if n := r.loads.Load(); n != 1 {
		t.Errorf("the refused file read %d times, want once", n)
	}
	if r.level.Enabled(zapcore.DebugLevel) {
		t.Error("the log level of the refused file applied")
	}
	refused := r.logs.FilterMessageSnippet("refused").All()
	if len(refused) != 1 || !strings.Contains(fmt.Sprint(refused[0].ContextMap()["error"]), "request-timeout") {
		t.Errorf("refusals logged: %+v, want one naming request-timeout", refused)
	}
}

// TestReloadAppliesToADispatcherPutBack: a file that renames a dispatcher
// (a change for a restart), then one that puts it back with a new
// max-concurrency, applies the new value to its running sink. The running
// configuration was taken to lack the dispatcher after the first, so the
// second was logged as changing no key and the sink kept its limit.
func TestReloadAppliesToADispatcherPutBack(t *testing.T) {
	reloadSettle = 20 * time.Millisecond
	c := newCluster(t)
	yaml := reloadYAML(c.ListenAddrs()[0], "http://127.0.0.1:1/", 1, "info", 1)
	r := startReloading(t, yaml, nil)
	r.write(t, strings.Replace(yaml, "    sink:\n", "    sink2:\n", 1))
	testwait.For(t, 10*time.Second, "the rename reported", func() bool { return r.count(t, metrics.ReloadRestartNeeded) == 1 })
	r.write(t, reloadYAML(c.ListenAddrs()[0], "http://127.0.0.1:1/", 3, "info", 1))
	testwait.For(t, 10*time.Second, "the dispatcher put back read", func() bool { return r.loads.Load() == 2 })
	testwait.For(t, 10*time.Second, "its new max-concurrency applied", func() bool {
		return r.logs.FilterMessage("configuration reloaded").FilterField(zap.Strings("applied", []string{
			"wow.dispatchers.sink.handler.max-concurrency"})).Len() == 1
	})
	if n := r.count(t, metrics.ReloadApplied); n != 1 {
		t.Errorf("%d reloads applied counted, want 1", n)
	}
}

// TestReloadAppliesWhatItRead: the file written again while a reload
// loads it, then back as the reload read it before the next read (an editor
// saving twice, a tool writing a file then correcting it), ends with what
// the file says applied. The reload applied what Load read of the file,
// the second version, and took the first for handled: the file's last
// version compared equal to it and was never applied.
func TestReloadAppliesWhatItRead(t *testing.T) {
	reloadSettle = 20 * time.Millisecond
	c := newCluster(t)
	yaml := func(level string) string { return reloadYAML(c.ListenAddrs()[0], "http://127.0.0.1:1/", 1, level, 1) }
	load := documentLoader(handler.Default())
	var r *reloading
	r = startReloading(t, yaml("info"), func(ctx context.Context, path string, data []byte) (*config.Config, error) {
		if r.loads.Load() == 1 { // written again meanwhile, then back once loaded
			r.write(t, yaml("error"))
			defer r.write(t, yaml("debug"))
		}
		return load(ctx, path, data)
	})
	r.write(t, yaml("debug"))
	testwait.For(t, 10*time.Second, "the change applied", func() bool { return r.count(t, metrics.ReloadApplied) >= 1 })
	time.Sleep(20 * reloadSettle) // the last write settled and read
	if got := r.level.Level(); got != zapcore.DebugLevel {
		t.Errorf("log level %v, the file says debug", got)
	}
}

// TestStopDoesNotWaitForASlowReload: Stop during a reload whose Load is
// slow and does not give up (a custom Load, a file system that hangs)
// returns within its deadline, and the reload, when its Load returns at
// last, reconfigures nothing: Stop began closing the handlers.
func TestStopDoesNotWaitForASlowReload(t *testing.T) {
	reloadSettle = 20 * time.Millisecond
	c := newCluster(t)
	yaml := reloadYAML(c.ListenAddrs()[0], "http://127.0.0.1:1/", 1, "info", 1)
	entered, release := make(chan struct{}, 1), make(chan struct{})
	r := startReloading(t, yaml, func(_ context.Context, path string, _ []byte) (*config.Config, error) {
		entered <- struct{}{}
		<-release // not ctx
		return config.Load(path, nil, nil)
	})
	r.write(t, reloadYAML(c.ListenAddrs()[0], "http://127.0.0.1:1/", 2, "debug", 1))
	<-entered
	var once sync.Once
	unblock := func() { once.Do(func() { close(release) }) }
	r.stop(t, 500*time.Millisecond, unblock)
	unblock()
	<-r.rt.reload.done
	if r.level.Enabled(zapcore.DebugLevel) {
		t.Error("the log level changed after Stop began")
	}
	if n := r.logs.FilterMessage("configuration reloaded").Len(); n != 0 {
		t.Errorf("%d reloads applied after Stop began", n)
	}
}

// TestStopEndsAMetadataFetch: Stop during a reload waiting for
// wow.metadata, from a service that does not answer, ends the fetch: the
// reload gives up at once instead of at wow.metadata-timeout, and Stop
// returns within its deadline, having waited for it.
func TestStopEndsAMetadataFetch(t *testing.T) {
	reloadSettle = 20 * time.Millisecond
	meta, err := os.ReadFile("../config/testdata/wow-metadata.json")
	if err != nil {
		t.Fatal(err)
	}
	var calls atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if calls.Add(1) > 1 { // the first at start
			<-r.Context().Done()
			return
		}
		_, _ = w.Write(meta)
	}))
	defer srv.Close()
	c := newCluster(t)
	yaml := func(level string) string {
		return fmt.Sprintf(`wow:
  service: reloader
  metadata: %s
  metadata-timeout: 30s
  kafka:
    bootstrap-servers: [%s]
  dispatchers:
    sink:
      topics: [event]
      contexts: [example-service]
      handler: {type: log}
  log:
    level: %s
  metrics:
    listen: ""
`, srv.URL, c.ListenAddrs()[0], level)
	}
	r := startReloading(t, yaml("info"), documentLoader(handler.Default()))
	r.write(t, yaml("debug"))
	testwait.For(t, 10*time.Second, "the reload asking for wow.metadata", func() bool { return calls.Load() == 2 })
	r.stop(t, 500*time.Millisecond, nil)
	select {
	case <-r.rt.reload.done:
	default:
		t.Error("Stop returned before the reload gave up")
	}
	if r.level.Enabled(zapcore.DebugLevel) {
		t.Error("the log level changed after Stop began")
	}
}

// TestReloadNow: ReloadNow (SIGHUP) reads the file and applies it though
// it did not change since it was refused, for what it says (a Load that
// refused it once; the same file read again is accepted) or for a passing
// reason whose retry is far off; it reports false when no file is watched
// or once Stop began.
func TestReloadNow(t *testing.T) {
	reloadSettle = 20 * time.Millisecond
	defer func(d time.Duration) { reloadRetryMin = d }(reloadRetryMin)
	reloadRetryMin = time.Hour
	t.Run("refused for what it says", func(t *testing.T) {
		c := newCluster(t)
		var loads atomic.Int32
		r := startReloading(t, reloadYAML(c.ListenAddrs()[0], "http://127.0.0.1:1/", 1, "info", 1),
			func(_ context.Context, path string, _ []byte) (*config.Config, error) {
				if loads.Add(1) == 1 {
					return nil, &config.Errors{File: path, List: []config.Error{{Path: "wow.log.level", Msg: "refused by the test"}}}
				}
				return config.Load(path, nil, nil)
			})
		r.write(t, reloadYAML(c.ListenAddrs()[0], "http://127.0.0.1:1/", 1, "debug", 1))
		testwait.For(t, 10*time.Second, "the change refused", func() bool { return r.count(t, metrics.ReloadInvalid) == 1 })
		if !r.rt.ReloadNow() {
			t.Fatal("ReloadNow: nothing to reload")
		}
		testwait.For(t, 10*time.Second, "the unchanged file applied", func() bool { return r.count(t, metrics.ReloadApplied) == 1 })
		if !r.level.Enabled(zapcore.DebugLevel) {
			t.Error("log level not debug after ReloadNow")
		}
		for range 3 { // no change: logged, not counted
			r.rt.ReloadNow()
		}
		testwait.For(t, 10*time.Second, "the file read again", func() bool {
			return r.logs.FilterMessage("configuration file read again; no key changed").Len() > 0
		})
		if n := r.count(t, metrics.ReloadApplied); n != 1 {
			t.Errorf("%d reloads applied counted, want 1", n)
		}
		r.stop(t, 20*time.Second, nil)
		if r.rt.ReloadNow() {
			t.Error("ReloadNow after Stop: a file to reload")
		}
	})
	t.Run("refused for a passing reason", func(t *testing.T) {
		c := newCluster(t)
		dir := t.TempDir()
		old := filepath.Join(dir, "old")
		if err := os.WriteFile(old, []byte("Bearer old"), 0o600); err != nil {
			t.Fatal(err)
		}
		r := startReloading(t, headerYAML(c.ListenAddrs()[0], old, "info"), documentLoader(handler.Default()))
		next := filepath.Join(dir, "new")
		r.write(t, headerYAML(c.ListenAddrs()[0], next, "debug"))
		testwait.For(t, 10*time.Second, "the change refused", func() bool { return r.count(t, metrics.ReloadRetrying) == 1 })
		if err := os.WriteFile(next, []byte("Bearer new"), 0o600); err != nil {
			t.Fatal(err)
		}
		r.rt.ReloadNow()
		testwait.For(t, 10*time.Second, "the change applied before its retry", func() bool { return r.count(t, metrics.ReloadApplied) == 1 })
	})
	t.Run("no file watched", func(t *testing.T) {
		c := newCluster(t)
		path := filepath.Join(t.TempDir(), "wowd.yaml")
		if err := os.WriteFile(path, []byte(reloadYAML(c.ListenAddrs()[0], "http://127.0.0.1:1/", 1, "info", 1)), 0o600); err != nil {
			t.Fatal(err)
		}
		cfg, err := config.Load(path, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		rt, err := New(cfg, nil, zap.NewNop(), "test")
		if err != nil {
			t.Fatal(err)
		}
		if rt.ReloadNow() {
			t.Error("ReloadNow without WatchConfig: a file to reload")
		}
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		if err := rt.Stop(ctx); err != nil {
			t.Fatal(err)
		}
	})
}

// TestReloadReadsAfterLostEvents: when the kernel's queue of file events
// overflows, the change of the file may be among those lost. The overflow
// was only logged, and the change waited for the next one or a SIGHUP; the
// file is read again now. The watcher's events are replaced by a channel
// that never delivers, so the change is seen through the overflow only.
func TestReloadReadsAfterLostEvents(t *testing.T) {
	reloadSettle = 20 * time.Millisecond
	c := newCluster(t)
	reg := handler.Default()
	r := &reloading{path: filepath.Join(t.TempDir(), "wowd.yaml"), level: zap.NewAtomicLevelAt(zapcore.InfoLevel)}
	r.write(t, reloadYAML(c.ListenAddrs()[0], "http://127.0.0.1:1/", 1, "info", 1))
	cfg, err := config.Load(r.path, reg, nil)
	if err != nil {
		t.Fatal(err)
	}
	if r.rt, err = New(cfg, reg, zap.NewNop(), "test"); err != nil {
		t.Fatal(err)
	}
	// Read unknown: the watcher's first read loads the file (and finds
	// nothing to change), so the test knows when it is done.
	var loads atomic.Int32
	err = r.rt.WatchConfig(Reload{Path: r.path, Level: r.level, Load: func(_ context.Context, b []byte) (*config.Config, error) {
		defer loads.Add(1)
		return config.Parse(b, r.path, reg, nil)
	}})
	if err != nil {
		t.Fatal(err)
	}
	errs := make(chan error)
	r.rt.reload.events, r.rt.reload.errs = make(chan fsnotify.Event), errs
	r.rt.Start(context.Background())
	defer r.stop(t, 20*time.Second, nil)
	testwait.For(t, 10*time.Second, "the first read", func() bool { return loads.Load() == 1 })
	r.write(t, reloadYAML(c.ListenAddrs()[0], "http://127.0.0.1:1/", 1, "debug", 1))
	time.Sleep(10 * reloadSettle)
	if n := r.count(t, metrics.ReloadApplied); n != 0 || loads.Load() != 1 {
		t.Fatalf("%d reloads applied, %d loads, with no event seen", n, loads.Load())
	}
	errs <- fmt.Errorf("reading events: %w", fsnotify.ErrEventOverflow)
	testwait.For(t, 10*time.Second, "the change applied after the overflow",
		func() bool { return r.count(t, metrics.ReloadApplied) == 1 })
	if !r.level.Enabled(zapcore.DebugLevel) {
		t.Error("log level not debug, as the file says")
	}
}

// TestReloadFollowsALinkMovedDuringLostEvents: the path is a link to a
// file in another directory; it is pointed at a third directory while the
// watcher's events are lost (dropped here, as a queue overflow drops
// them), and the overflow is reported. The read after the overflow applied
// the new file but kept watching the old directory, so an edit in place of
// the file the link points at now was never seen.
func TestReloadFollowsALinkMovedDuringLostEvents(t *testing.T) {
	reloadSettle = 20 * time.Millisecond
	c := newCluster(t)
	yaml := func(level string) []byte {
		return []byte(reloadYAML(c.ListenAddrs()[0], "http://127.0.0.1:1/", 1, level, 1))
	}
	kept, other := t.TempDir(), t.TempDir()
	_, path := linkedConfig(t, kept, yaml("info"))
	var lose atomic.Bool
	errs := make(chan error)
	level := watching(t, path, yaml("info"), func(rt *Daemon) {
		events := make(chan fsnotify.Event)
		real := rt.reload.watcher.Events
		done := rt.reload.done
		go func() { // ends when the watcher closes, as the daemon stops
			for ev := range real {
				if lose.Load() {
					continue
				}
				select {
				case events <- ev:
				case <-done:
					return
				}
			}
		}()
		rt.reload.events, rt.reload.errs = events, errs
	})
	lose.Store(true)
	moved := relink(t, path, other, yaml("warn"))
	time.Sleep(5 * reloadSettle) // the events are in, and lost
	lose.Store(false)
	errs <- fmt.Errorf("reading events: %w", fsnotify.ErrEventOverflow)
	testwait.For(t, 10*time.Second, "the file the link points at now applied", func() bool { return level.Level() == zapcore.WarnLevel })
	editInPlace(t, moved, yaml("debug"))
	testwait.For(t, 10*time.Second, "the edit in place of the newly linked file applied", func() bool { return level.Level() == zapcore.DebugLevel })
}

// linkedConfig writes data to wowd.yaml in dir and links to it from
// wowd.yaml in a directory of its own; it returns the file and the link.
func linkedConfig(t *testing.T, dir string, data []byte) (target, path string) {
	t.Helper()
	target = filepath.Join(dir, "wowd.yaml")
	if err := os.WriteFile(target, data, 0o600); err != nil {
		t.Fatal(err)
	}
	path = filepath.Join(t.TempDir(), "wowd.yaml")
	if err := os.Symlink(target, path); err != nil {
		t.Fatal(err)
	}
	return target, path
}

// relink writes data to wowd.yaml in dir and points the link path at it,
// replacing the link in one rename; it returns the new file.
func relink(t *testing.T, path, dir string, data []byte) string {
	t.Helper()
	moved := filepath.Join(dir, "wowd.yaml")
	if err := os.WriteFile(moved, data, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(moved, path+".tmp"); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(path+".tmp", path); err != nil {
		t.Fatal(err)
	}
	return moved
}

// editInPlace writes data over file, the same file, as an editor writing
// through does.
func editInPlace(t *testing.T, file string, data []byte) {
	t.Helper()
	f, err := os.OpenFile(file, os.O_WRONLY|os.O_TRUNC, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write(data); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestReloadFitsRequestTimeoutWithTheRunningBatch: the batch keys take a
// restart, so a file's new request-timeout must fit the running
// handler.timeout with the running batch.linger, whatever linger the file
// names. A file lowering the linger and raising request-timeout was applied
// (8.5 s of request after 3 s of linger in a 10 s try); a file raising the
// timeout and the linger (both for a restart) beside reloadable keys was
// refused whole, its log level and max-concurrency with it.
func TestReloadFitsRequestTimeoutWithTheRunningBatch(t *testing.T) {
	reloadSettle = 20 * time.Millisecond
	yaml := func(broker, level string, conc int, limits string) string {
		return strings.Replace(reloadYAML(broker, "http://127.0.0.1:1/", conc, level, 1),
			fmt.Sprintf("        max-concurrency: %d\n", conc), fmt.Sprintf("        max-concurrency: %d\n%s", conc, limits), 1)
	}
	const running = "        timeout: 10s\n        request-timeout: 5s\n        batch: {max-messages: 10, linger: 3s}\n"

	t.Run("a request-timeout that fits only with the file's linger", func(t *testing.T) {
		c := newCluster(t)
		b := c.ListenAddrs()[0]
		r := startReloading(t, yaml(b, "info", 1, running), documentLoader(handler.Default()))
		r.write(t, yaml(b, "debug", 1, "        timeout: 10s\n        request-timeout: 8500ms\n        batch: {max-messages: 10, linger: 1s}\n"))
		testwait.For(t, 10*time.Second, "the change read", func() bool {
			return r.count(t, metrics.ReloadInvalid)+r.count(t, metrics.ReloadRestartNeeded)+r.count(t, metrics.ReloadApplied) > 0
		})
		if n := r.count(t, metrics.ReloadInvalid); n != 1 {
			t.Errorf("invalid %d, restart needed %d: want the file refused", n, r.count(t, metrics.ReloadRestartNeeded))
		}
		if r.level.Enabled(zapcore.DebugLevel) {
			t.Error("the refused file's log level applied")
		}
		refused := r.logs.FilterMessageSnippet("refused").All()
		if len(refused) != 1 || !strings.Contains(fmt.Sprint(refused[0].ContextMap()["error"]), "batch.linger: 3s") {
			t.Errorf("refusals logged: %+v, want one naming the running linger", refused)
		}
	})

	t.Run("restart-only limits beside reloadable keys", func(t *testing.T) {
		c := newCluster(t)
		b := c.ListenAddrs()[0]
		r := startReloading(t, yaml(b, "info", 1, running), documentLoader(handler.Default()))
		r.write(t, yaml(b, "debug", 2, "        timeout: 60s\n        request-timeout: 5s\n        batch: {max-messages: 10, linger: 30s}\n"))
		testwait.For(t, 10*time.Second, "the change read", func() bool {
			return r.count(t, metrics.ReloadInvalid)+r.count(t, metrics.ReloadRestartNeeded)+r.count(t, metrics.ReloadApplied) > 0
		})
		if n := r.count(t, metrics.ReloadRestartNeeded); n != 1 {
			t.Errorf("restart needed %d, invalid %d: want the reloadable keys applied and the rest reported", n, r.count(t, metrics.ReloadInvalid))
		}
		if !r.level.Enabled(zapcore.DebugLevel) {
			t.Error("the new log level not applied")
		}
		if n := r.logs.FilterMessage("configuration reloaded").FilterField(zap.Strings("applied", []string{
			"wow.dispatchers.sink.handler.max-concurrency", "wow.log.level"})).Len(); n != 1 {
			t.Errorf("%d reloads applying max-concurrency and the log level logged, want 1: %+v", n, r.logs.FilterMessageSnippet("configuration").All())
		}
	})
}

// TestReloadReportsARepeatedRefusalOfANewChange: a refusal for a passing
// reason is logged and counted once while its timed retries repeat it,
// but a new change of the file, or a SIGHUP, refused for the same reason
// is news to the operator who made it: it is logged and counted again. It
// was neither (a SIGHUP logged only that it read the file).
func TestReloadReportsARepeatedRefusalOfANewChange(t *testing.T) {
	reloadSettle = 20 * time.Millisecond
	was := reloadRetryMin
	t.Cleanup(func() { reloadRetryMin = was }) // after the daemon's stop, registered later
	reloadRetryMin = time.Hour                 // no timed retry during the test
	c := newCluster(t)
	dir := t.TempDir()
	old := filepath.Join(dir, "old")
	if err := os.WriteFile(old, []byte("Bearer old"), 0o600); err != nil {
		t.Fatal(err)
	}
	r := startReloading(t, headerYAML(c.ListenAddrs()[0], old, "info"), documentLoader(handler.Default()))
	missing := filepath.Join(dir, "new") // never there
	r.write(t, headerYAML(c.ListenAddrs()[0], missing, "debug"))
	testwait.For(t, 10*time.Second, "the change refused", func() bool { return r.count(t, metrics.ReloadRetrying) == 1 })
	r.write(t, headerYAML(c.ListenAddrs()[0], missing, "warn"))
	testwait.For(t, 10*time.Second, "the new change refused", func() bool { return r.count(t, metrics.ReloadRetrying) == 2 })
	r.rt.ReloadNow()
	testwait.For(t, 10*time.Second, "the SIGHUP's read refused", func() bool { return r.count(t, metrics.ReloadRetrying) == 3 })
	if n := r.logs.FilterMessageSnippet("cannot be applied yet").Len(); n != 3 {
		t.Errorf("%d refusals logged for a change, a new change and a SIGHUP, want 3", n)
	}
	if l := r.level.Level(); l != zapcore.InfoLevel {
		t.Errorf("log level %v: a refused file's applied", l)
	}
}
