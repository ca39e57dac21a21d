package cli

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/wowd/wowd/handler"
	"github.com/wowd/wowd/internal/config"
)

// writeConfig writes yaml to a file in a temporary directory and returns
// its path.
func writeConfig(t *testing.T, yaml string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "wowd.yaml")
	if err := os.WriteFile(path, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestRunRefusesCollidingClientIDs: two receivers whose client IDs meet
// through a dash (dispatcher a-b with context c, dispatcher a with context
// b-c) made `run` panic registering the second client's metrics; now it is
// a configuration error naming both, before anything is built.
func TestRunRefusesCollidingClientIDs(t *testing.T) {
	path := writeConfig(t, `wow:
  service: s
  kafka:
    bootstrap-servers: [127.0.0.1:1]
  metrics:
    listen: 127.0.0.1:0
  contexts:
    b-c:
      aggregates: [x]
    c:
      aggregates: [y]
  dispatchers:
    a:
      topics: [event]
      contexts: [b-c]
      handler: {type: log}
    a-b:
      topics: [event]
      contexts: [c]
      handler: {type: log}
`)
	var stdout, stderr bytes.Buffer
	code := run([]string{"run", "--config", path}, &stdout, &stderr, nil, handler.Default())
	if code != ExitConfig {
		t.Fatalf("exit %d, want %d:\n%s", code, ExitConfig, stderr.String())
	}
	for _, want := range []string{"wow.dispatchers.a-b:", `Kafka client ID "wowd-a-b-c"`, "dispatcher a's receiver for context b-c"} {
		if !strings.Contains(stderr.String(), want) {
			t.Errorf("stderr lacks %q:\n%s", want, stderr.String())
		}
	}
}

// TestConfigValidateOpensFiles: `config validate` reports the files the
// configuration names that cannot be used together with its other
// problems; --no-files checks a configuration meant for another machine
// (its secrets mounted there) without them.
func TestConfigValidateOpensFiles(t *testing.T) {
	dir := t.TempDir()
	path := writeConfig(t, `wow:
  service: s
  kafka:
    bootstrap-servers: [127.0.0.1:1]
    sasl: {mechanism: plain, username: u, password-file: `+filepath.Join(dir, "password")+`}
  admin:
    listen: 127.0.0.1:0
    token-file: `+filepath.Join(dir, "token")+`
  dispatch:
    workers: -1
  contexts:
    c:
      aggregates: [y]
  dispatchers:
    a:
      topics: [event]
      handler: {type: log}
`)
	var stdout, stderr bytes.Buffer
	code := run([]string{"config", "validate", "--config", path}, &stdout, &stderr, nil, handler.Default())
	if code != ExitConfig {
		t.Fatalf("exit %d, want %d:\n%s", code, ExitConfig, stderr.String())
	}
	for _, want := range []string{"wow.dispatch.workers: must be >= 0", "wow.kafka.sasl.password-file: open ", "wow.admin.token-file: open "} {
		if !strings.Contains(stderr.String(), want) {
			t.Errorf("stderr lacks %q:\n%s", want, stderr.String())
		}
	}

	stderr.Reset()
	code = run([]string{"config", "validate", "--no-files", "--config", path}, &stdout, &stderr, nil, handler.Default())
	if code != ExitConfig || strings.Contains(stderr.String(), "-file") || !strings.Contains(stderr.String(), "wow.dispatch.workers") {
		t.Errorf("--no-files: exit %d:\n%s", code, stderr.String())
	}
}

// TestConfigValidateCountsTheReceiversRunMakes: a context where a
// dispatcher's aggregates filter leaves nothing gets no receiver, and
// config validate's count says so.
func TestConfigValidateCountsTheReceiversRunMakes(t *testing.T) {
	path := writeConfig(t, `wow:
  service: s
  kafka:
    bootstrap-servers: [127.0.0.1:1]
  contexts:
    shop:
      aggregates: [cart, order]
    billing:
      aggregates: [invoice]
  dispatchers:
    carts:
      topics: [event]
      aggregates: [cart]
      handler: {type: log}
    everything:
      topics: [event]
      handler: {type: log}
`)
	var stdout, stderr bytes.Buffer
	if code := run([]string{"config", "validate", "--config", path}, &stdout, &stderr, nil, handler.Default()); code != ExitOK {
		t.Fatalf("exit %d:\n%s", code, stderr.String())
	}
	if want := "(2 dispatchers, 3 receivers, "; !strings.Contains(stdout.String(), want) {
		t.Fatalf("stdout %q lacks %q", stdout.String(), want)
	}
}

// TestOperatorCommandsNeedOnlyTheirFiles: config print, rewind and parked
// run from an operator's machine (rewind after the deployment is scaled to
// zero), where the daemon's certificates and token files are not: they
// must not be refused for files they do not use. A Kafka client file they
// do use is still a configuration error when they build their client.
func TestOperatorCommandsNeedOnlyTheirFiles(t *testing.T) {
	dir := t.TempDir()
	yaml := `wow:
  service: s
  kafka:
    bootstrap-servers: [127.0.0.1:1]
  admin:
    listen: 127.0.0.1:0
    token-file: ` + filepath.Join(dir, "admin-token") + `
  contexts:
    c:
      aggregates: [y]
  dispatchers:
    a:
      topics: [event]
      on-failure: park
      handler: {type: log}
`
	path := writeConfig(t, yaml)
	var stdout, stderr bytes.Buffer
	if code := run([]string{"config", "print", "--config", path}, &stdout, &stderr, nil, handler.Default()); code != ExitOK {
		t.Errorf("config print: exit %d:\n%s", code, stderr.String())
	}
	for _, args := range [][]string{
		{"rewind", "--config", path, "--dispatcher", "a", "--to", "earliest", "--timeout", "1s"},
		{"parked", "list", "--config", path, "--dispatcher", "a"},
	} {
		stderr.Reset()
		code := run(args, &stdout, &stderr, nil, handler.Default())
		t.Logf("%s: exit %d: %s", args[0], code, stderr.String())
		if strings.Contains(stderr.String(), "admin-token") {
			t.Errorf("%s refused a file it does not use:\n%s", args[0], stderr.String())
		}
	}
	bad := writeConfig(t, strings.Replace(yaml, "  admin:", "    tls: {ca-file: "+filepath.Join(dir, "ca.pem")+"}\n  admin:", 1))
	stderr.Reset()
	if code := run([]string{"rewind", "--config", bad, "--dispatcher", "a", "--to", "earliest"}, &stdout, &stderr, nil, handler.Default()); code != ExitConfig || !strings.Contains(stderr.String(), "wow.kafka.tls.ca-file") {
		t.Errorf("rewind with a missing Kafka CA file: exit %d, want %d naming the key:\n%s", code, ExitConfig, stderr.String())
	}
}

// TestReloadReadsTheDocumentOnly: a reload is not refused for a file the
// configuration names being missing for a moment (a secret updated after
// the configuration that names it, a certificate rotated file by file):
// refused, it would wait for its retry.
func TestReloadReadsTheDocumentOnly(t *testing.T) {
	dir := t.TempDir()
	path := writeConfig(t, `wow:
  service: s
  kafka:
    bootstrap-servers: [127.0.0.1:1]
  admin:
    listen: 127.0.0.1:0
    token-file: `+filepath.Join(dir, "admin-token")+`
  contexts:
    c:
      aggregates: [y]
  dispatchers:
    a:
      topics: [event]
      handler: {type: log}
`)
	a := &app{reg: handler.Default()}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.reloadLoader(path, config.Sources{})(context.Background(), data); err != nil {
		t.Fatalf("reload refused: %v", err)
	}
	if _, err := a.reloadLoader(path, config.Sources{})(context.Background(), []byte("wow: {dispatch: {workers: -1}}")); err == nil {
		t.Fatal("a reload of an invalid document was not refused")
	}
}
