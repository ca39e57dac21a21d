package daemon

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap/zapcore"

	"github.com/wowd/wowd/handler"
	"github.com/wowd/wowd/internal/metrics"
	"github.com/wowd/wowd/internal/testwait"
)

// TestAReloadFollowsARelativePathLinkedElsewhere: `wowd run --config
// conf/wowd.yaml` (a relative path, as typed in a shell), where the path
// is a relative link to a file in another directory, edited in place.
// configuration.md says such an edit counts ("when the path is a link to a
// file in another directory, that directory too, so an edit of that file
// in place counts"). The other directory is watched by its absolute name
// (follow), so its events are named absolutely, while concerns compares
// them with reloader.real, the relative name EvalSymlinks gave for the
// relative path: the edit was never recognised (found by review), and the change waited for a
// SIGHUP or a restart. The same layout given by its absolute path (the
// control subtest) reloads.
func TestAReloadFollowsARelativePathLinkedElsewhere(t *testing.T) {
	reloadSettle = 20 * time.Millisecond
	for _, relative := range []bool{false, true} {
		t.Run(fmt.Sprintf("relative %v", relative), func(t *testing.T) {
			c := newCluster(t)
			yaml := func(level string) []byte {
				return []byte(reloadYAML(c.ListenAddrs()[0], "http://127.0.0.1:1/", 1, level, 1))
			}
			base := t.TempDir()
			for _, d := range []string{"conf", "kept"} {
				if err := os.Mkdir(filepath.Join(base, d), 0o700); err != nil {
					t.Fatal(err)
				}
			}
			target := filepath.Join(base, "kept", "wowd.yaml")
			if err := os.WriteFile(target, yaml("info"), 0o600); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(filepath.Join("..", "kept", "wowd.yaml"), filepath.Join(base, "conf", "wowd.yaml")); err != nil {
				t.Fatal(err)
			}
			t.Chdir(base)
			path := filepath.Join(base, "conf", "wowd.yaml")
			if relative {
				path = filepath.Join("conf", "wowd.yaml")
			}
			// Read unknown: the watcher's first read loads the file, finds
			// nothing to change and counts it, so the edit below comes
			// after it.
			var rt *Daemon
			level := watching(t, path, nil, func(d *Daemon) { rt = d })
			testwait.For(t, 10*time.Second, "the watcher's first read", func() bool { return reloadCount(t, rt, metrics.ReloadUnchanged) == 1 })
			editInPlace(t, target, yaml("error"))
			testwait.For(t, 5*time.Second, "the edit in place of the linked file applied", func() bool { return level.Level() == zapcore.ErrorLevel })
		})
	}
}

// twoSinksYAML is a configuration of two http sinks, a and b, each with
// the handler keys given (indented under handler:).
func twoSinksYAML(broker, a, b string) string {
	return fmt.Sprintf(`wow:
  service: reloader
  kafka:
    bootstrap-servers: [%s]
  contexts:
    example:
      aggregates: [cart]
  dispatchers:
    a:
      topics: [event]
      format: raw
      handler:
        type: http
        url: http://127.0.0.1:1/
%s    b:
      topics: [event]
      format: raw
      handler:
        type: http
        url: http://127.0.0.1:1/
%s  metrics:
    listen: ""
`, broker, a, b)
}

// TestAReloadRefusalNamesEveryProblem: a changed file with two
// problems in two dispatchers, a new header file of sink a that is not
// there (a passing reason) and a request-timeout of sink b that fits only
// the handler.timeout of a restart (a refusal for what the file says), is
// refused, as it must be. configuration.md: such a file "is refused whole
// and logged with every problem", and a request-timeout that does not fit
// "stands until the file changes again". apply returns at the first
// dispatcher's problem (reload.go, the loop over changed): only a's header
// file is logged, b's problem is not named anywhere, and the file is
// counted as retrying and read again and again, although it can never
// apply as it is.
func TestAReloadRefusalNamesEveryProblem(t *testing.T) {
	reloadSettle = 20 * time.Millisecond
	defer func(d time.Duration) { reloadRetryMin = d }(reloadRetryMin)
	reloadRetryMin = 10 * time.Millisecond
	c := newCluster(t)
	broker := c.ListenAddrs()[0]
	const timeouts = "        timeout: 30s\n        request-timeout: 10s\n"
	r := startReloading(t, twoSinksYAML(broker, timeouts, timeouts), documentLoader(handler.Default()))
	missing := filepath.Join(t.TempDir(), "not-there")
	r.write(t, twoSinksYAML(broker,
		timeouts+"        headers-from-file: {X-Token: "+missing+"}\n",
		"        timeout: 60s\n        request-timeout: 40s\n"))
	testwait.For(t, 10*time.Second, "the change refused", func() bool {
		return r.count(t, metrics.ReloadInvalid) > 0 || r.count(t, metrics.ReloadRetrying) > 0
	})
	time.Sleep(30 * reloadRetryMin)
	var logged []string
	for _, e := range r.logs.All() {
		if e.Level >= zapcore.ErrorLevel {
			logged = append(logged, fmt.Sprint(e.Message, ": ", e.ContextMap()["error"]))
		}
	}
	all := strings.Join(logged, "\n")
	if !strings.Contains(all, "wow.dispatchers.b.handler") || !strings.Contains(all, "request-timeout") {
		t.Errorf("sink b's request-timeout, which fits only after a restart, is named in no refusal; logged:\n%s", all)
	}
	if n := r.loads.Load(); n != 1 {
		t.Errorf("a file that cannot apply until it changes was read %d times (retrying counted %d, invalid %d)",
			n, r.count(t, metrics.ReloadRetrying), r.count(t, metrics.ReloadInvalid))
	}
}
