package cli

import (
	"fmt"
	"strings"
	"testing"

	"github.com/wowd/wowd/handler"
)

// TestListenersOnOneAddressAreAConfigurationError: two of wowd's own listeners configured
// on the same address (wow.admin.listen equal to wow.metrics.listen, or
// wow.ingest.listen written out as the metrics address, where the docs say
// an empty one serves ingest on the metrics listener) passed `wowd config
// validate` ("ok", exit 0), and `wowd run` then failed with exit 1 (found
// by review), a
// runtime failure, saying "bind: address already in use", which sends the
// user looking for another process on the port. The file contradicts
// itself: a configuration error, which validate is to report (README:
// "every problem at once; exit 2 if any") and run to exit 2 on.
func TestListenersOnOneAddressAreAConfigurationError(t *testing.T) {
	for _, tc := range []struct{ name, keys string }{
		{"admin on the metrics address", `
  metrics:
    listen: 127.0.0.1:%[1]d
  admin:
    listen: 127.0.0.1:%[1]d`},
		{"ingest on the metrics address", `
  metrics:
    listen: 127.0.0.1:%[1]d
  ingest:
    enabled: true
    listen: 127.0.0.1:%[1]d`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			port := freePort(t)
			path := writeConfig(t, `wow:
  service: s
  kafka:
    bootstrap-servers: [127.0.0.1:1]
  contexts:
    c:
      aggregates: [x]
  dispatchers:
    d:
      topics: [event]
      handler: {type: log}
  shutdown:
    timeout: 1s`+fmt.Sprintf(tc.keys, port)+"\n")
			code, stdout, stderr := wowd(t, "config", "validate", "--config", path)
			if code != ExitConfig {
				t.Errorf("config validate: exit %d, want %d (two listeners on 127.0.0.1:%d); stdout %q stderr %q",
					code, ExitConfig, port, strings.TrimSpace(stdout), strings.TrimSpace(stderr))
			}
			code, _, stderr = wowd(t, "run", "--config", path)
			if code != ExitConfig {
				t.Errorf("run: exit %d, want %d (a configuration error); stderr:\n%s", code, ExitConfig, stderr)
			}
		})
	}
}

// TestDevNamesTheFileFromWOWD_CONFIG: the README runs `wowd run`
// with WOWD_CONFIG=wowd.yaml and starts the quick start with `wowd dev
// --demo`, which reads WOWD_CONFIG too. With it still exported (a shell,
// an .envrc), `wowd dev --demo` takes the production file, and its refusal
// of that file's broker names neither the file nor WOWD_CONFIG: "wowd dev
// (wow.kafka.bootstrap-servers[0], wow.dev.partitions): embedded broker
// setting: address "10.1.1.1:9092": …", an address the user never typed,
// for a command given no file; every other configuration error starts with
// the file's name. (commands.go, the devbroker.ErrSetting branch of devCmd.)
func TestDevNamesTheFileFromWOWD_CONFIG(t *testing.T) {
	path := writeConfig(t, remoteBrokerYAML)
	var out, errOut strings.Builder
	code := run([]string{"dev", "--demo"}, &out, &errOut, []string{"WOWD_CONFIG=" + path}, handler.Default())
	if code != ExitConfig {
		t.Fatalf("exit %d, want %d\n%s%s", code, ExitConfig, out.String(), errOut.String())
	}
	if !strings.Contains(errOut.String(), path) && !strings.Contains(errOut.String(), "WOWD_CONFIG") {
		t.Fatalf("`wowd dev --demo` with WOWD_CONFIG=%s refused that file's broker without naming the file or WOWD_CONFIG:\n%s",
			path, errOut.String())
	}
}
