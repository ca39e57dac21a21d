package config_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/wowd/wowd/handler"
	"github.com/wowd/wowd/internal/config"
	"github.com/wowd/wowd/internal/tlsconf/tlstest"
)

// TestLoadOpensTheNamedFiles: loading a configuration file opens every file
// it names (TLS certificates, keys and CAs, token and password files, a
// handler's files) and reports each that cannot be used with the other
// problems, at once: `config validate` finds them, not the start, one at a
// time.
func TestLoadOpensTheNamedFiles(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	srv := tlstest.WriteServer(t, dir, "localhost", nil)
	other := tlstest.WriteServer(t, t.TempDir(), "other", nil)
	missing := filepath.Join(dir, "missing")
	notPEM := write("not.pem", "hello\n")
	empty := write("empty", " \n")
	token := write("token", "s3cret\n")
	cfg := write("wowd.yaml", `wow:
  service: s
  kafka:
    bootstrap-servers: [k:9092]
    tls:
      enabled: true
      ca-file: `+notPEM+`
      cert-file: `+srv.CertFile+`
      key-file: `+notPEM+`
    sasl: {mechanism: oauthbearer, token-file: `+empty+`}
  metrics:
    listen: 127.0.0.1:0
    tls: {cert-file: `+srv.CertFile+`, key-file: `+srv.KeyFile+`, client-ca-file: `+srv.CertFile+`}
  admin:
    listen: 127.0.0.1:0
    token-file: `+missing+`
    tls: {cert-file: `+srv.CertFile+`, key-file: `+other.KeyFile+`}
  ingest:
    enabled: true
    token-file: `+token+`
  contexts:
    c: {aggregates: [a]}
  dispatch:
    workers: -1
  dispatchers:
    d:
      topics: [event]
      handler:
        type: files
        tls: {ca-file: `+missing+`}
        headers-from-file: {Authorization: `+empty+`}
`)
	_, _, err := config.LoadSources(cfg, filesRegistry(), config.Sources{})
	if err == nil {
		t.Fatal("loaded")
	}
	msg := err.Error()
	for _, want := range []string{
		"wow.dispatch.workers: must be >= 0",
		"wow.kafka.tls.ca-file: " + notPEM + " holds no PEM certificate",
		"wow.kafka.tls.key-file: " + notPEM + " holds no PEM private key",
		"wow.kafka.sasl.token-file: " + empty + " is empty",
		"wow.admin.token-file: open " + missing + ": no such file or directory",
		"wow.admin.tls.key-file: does not go with wow.admin.tls.cert-file: tls: private key does not match public key",
		"wow.dispatchers.d.handler.tls.ca-file: open " + missing,
		"wow.dispatchers.d.handler.headers-from-file.Authorization: " + empty + " is empty",
	} {
		if !strings.Contains(msg, want) {
			t.Errorf("errors lack %q:\n%s", want, msg)
		}
	}
	if n := strings.Count(msg, "\n") + 1; n != 8 {
		t.Errorf("%d errors, want 8:\n%s", n, msg)
	}
	if strings.Contains(msg, "s3cret") || strings.Contains(msg, "hello") {
		t.Errorf("errors show a file's content:\n%s", msg)
	}

	// Parse checks the document alone: the files it names are the
	// business of the machine that runs it.
	data, _ := os.ReadFile(cfg)
	_, err = config.Parse(data, cfg, filesRegistry(), nil)
	if err == nil || strings.Count(err.Error(), "\n") != 0 {
		t.Errorf("Parse: %v, want only the workers error", err)
	}
}

// filesConfig is the configuration of a handler type with files of its
// own, named like the http sink's.
type filesConfig struct {
	TLS struct {
		CAFile string `config:"ca-file" desc:"CAs."`
	} `config:"tls"`
	HeadersFromFile map[string]string `config:"headers-from-file" desc:"Header values."`
}

func filesRegistry() *handler.Registry {
	r := testRegistry()
	r.Register(handler.Spec{Name: "files", New: newNothing, Config: func() any { return &filesConfig{} }})
	return r
}

// TestFileLimitsAreTheReaders: a file is held to the size its reader takes,
// no less and no more: a CA bundle over a megabyte is used by the Kafka
// client and must pass; an admin token over 4 KiB is refused by the admin
// listener at start and must not pass.
func TestFileLimitsAreTheReaders(t *testing.T) {
	dir := t.TempDir()
	srv := tlstest.WriteServer(t, dir, "localhost", nil)
	ca, err := os.ReadFile(srv.CertFile)
	if err != nil {
		t.Fatal(err)
	}
	bundle := filepath.Join(dir, "bundle.pem")
	if err := os.WriteFile(bundle, []byte(strings.Repeat(string(ca), 1+(2<<20)/len(ca))), 0o600); err != nil {
		t.Fatal(err)
	}
	bigToken := filepath.Join(dir, "token")
	if err := os.WriteFile(bigToken, []byte(strings.Repeat("t", 5000)), 0o600); err != nil {
		t.Fatal(err)
	}
	bigJWT := filepath.Join(dir, "jwt")
	if err := os.WriteFile(bigJWT, []byte(strings.Repeat("j", 20000)), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(dir, "wowd.yaml")
	if err := os.WriteFile(cfg, []byte(`wow:
  service: s
  kafka:
    bootstrap-servers: [k:9092]
    tls: {enabled: true, ca-file: `+bundle+`}
    sasl: {mechanism: oauthbearer, token-file: `+bigJWT+`}
  admin:
    listen: 127.0.0.1:0
    token-file: `+bigToken+`
  contexts:
    c: {aggregates: [a]}
  dispatchers:
    d:
      topics: [event]
      handler: {type: files}
`), 0o600); err != nil {
		t.Fatal(err)
	}
	_, _, err = config.LoadSources(cfg, filesRegistry(), config.Sources{})
	var errs *config.Errors
	if !errors.As(err, &errs) || len(errs.List) != 1 || !strings.Contains(err.Error(), "wow.admin.token-file: "+bigToken+" is larger than 4096 bytes") {
		t.Fatalf("want only the admin token refused for its size, got: %v", err)
	}
}

// TestInvalidTellsWhatMayPass: a refusal is final (Invalid) when every
// problem is in what the configuration says; one found in a file it names
// or in wow.metadata, with whatever follows from it, may pass while the
// configuration stays, as may a configuration file that cannot be read.
func TestInvalidTellsWhatMayPass(t *testing.T) {
	dir := t.TempDir()
	const head = "wow:\n  service: s\n  kafka: {bootstrap-servers: ['k:9092']}\n"
	const contexts = "  contexts: {c: {aggregates: [a]}}\n"
	const dispatchers = "  dispatchers: {d: {topics: [event], contexts: [c], handler: {type: log}}}\n"
	tests := []struct {
		name, yaml string
		files      bool // loaded with the files it names
		want       bool
	}{
		{"an unknown key", head + contexts + dispatchers + "  dispatch: {worker: 2}\n", false, true},
		{"a value out of range", head + contexts + dispatchers + "  dispatch: {workers: -1}\n", true, true},
		{"wow.metadata not there", head + "  metadata: missing.json\n" + dispatchers, false, false},
		{"wow.metadata not there and an unknown key", head + "  metadata: missing.json\n" + dispatchers + "  dispatch: {worker: 2}\n", false, false},
		{"a named file not there", head + contexts + dispatchers + "  admin: {listen: '127.0.0.1:0', token-file: " + filepath.Join(dir, "token") + "}\n", true, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "wowd.yaml")
			if err := os.WriteFile(path, []byte(tt.yaml), 0o600); err != nil {
				t.Fatal(err)
			}
			var err error
			if tt.files {
				_, err = config.Load(path, handler.Default(), nil)
			} else {
				_, err = config.Parse([]byte(tt.yaml), path, handler.Default(), nil)
			}
			if err == nil {
				t.Fatal("loaded")
			}
			if got := config.Invalid(err); got != tt.want {
				t.Errorf("Invalid %v, want %v, for:\n%v", got, tt.want, err)
			}
			if got := config.Invalid(fmt.Errorf("reloading: %w", err)); got != tt.want {
				t.Errorf("Invalid %v wrapped, want %v", got, tt.want)
			}
		})
	}
	_, err := config.Load(filepath.Join(dir, "gone.yaml"), handler.Default(), nil)
	if err == nil || config.Invalid(err) {
		t.Errorf("a configuration file that cannot be read: Invalid with %v", err)
	}
	if config.Invalid(nil) {
		t.Error("Invalid(nil)")
	}
}
