package config_test

import (
	"bytes"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/wowd/wowd/internal/config"
)

const testdata = "testdata/"

const minimalYAML = `
wow:
  service: audit
  kafka:
    bootstrap-servers: [localhost:9092]
  contexts:
    zeta:
      aggregates: [order]
    alpha:
      alias: shop.alpha
      aggregates: [cart, invoice]
    mid:
      aggregates: [item]
  dispatchers:
    all:
      topics: [event]
      handler:
        type: http
        url: http://127.0.0.1:8080/wow
`

func mustParse(t *testing.T, yaml string, env ...string) *config.Config {
	t.Helper()
	c, err := config.Parse([]byte(yaml), "test.yaml", testRegistry(), env)
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	return c
}

func parseErrors(t *testing.T, yaml string, env ...string) *config.Errors {
	t.Helper()
	_, err := config.Parse([]byte(yaml), "test.yaml", testRegistry(), env)
	var errs *config.Errors
	if !errors.As(err, &errs) {
		t.Fatalf("Parse returned %v (%T), want *config.Errors", err, err)
	}
	return errs
}

func TestDefault(t *testing.T) {
	c := config.Default()
	k := c.Kafka
	switch {
	case k.TopicPrefix != "wow.", k.ClientID != "wowd", k.StartOffset != "earliest", k.GroupProtocol != "classic",
		k.FetchMaxBytes != 16<<20, k.FetchMaxPartitionBytes != 1<<20, k.FetchMaxWait != 500*time.Millisecond,
		k.SessionTimeout != 45*time.Second, k.RebalanceTimeout != time.Minute, k.HeartbeatInterval != 3*time.Second,
		k.CommitInterval != time.Second, k.RevokeTimeout != 20*time.Second, k.TLS.Enabled, k.SASL.Mechanism != "":
		t.Errorf("kafka defaults: %+v", k)
	}
	if c.Dispatch != (config.Dispatch{Workers: 0, MaxInFlight: 256, Throughput: 16, BlockingWorkers: 64}) {
		t.Errorf("dispatch defaults: %+v", c.Dispatch)
	}
	if c.Metrics.Listen != "127.0.0.1:9464" || c.Log != (config.Log{Level: "info", Format: "json"}) ||
		c.Shutdown != (config.Shutdown{Timeout: 30 * time.Second}) || c.Dev != (config.Dev{Partitions: 8}) {
		t.Errorf("defaults: %+v %+v %+v %+v", c.Metrics, c.Log, c.Shutdown, c.Dev)
	}
	if c.Contexts == nil || len(c.Contexts) != 0 || c.Dispatchers == nil || len(c.Dispatchers) != 0 {
		t.Errorf("maps: %v %v", c.Contexts, c.Dispatchers)
	}
}

func TestParseFillsDefaults(t *testing.T) {
	got := mustParse(t, minimalYAML)

	want := config.Default()
	want.Service = "audit"
	want.Kafka.BootstrapServers = []string{"localhost:9092"}
	want.Contexts = map[string]config.Context{
		"zeta":  {Alias: "zeta", Aggregates: []string{"order"}},
		"alpha": {Alias: "shop.alpha", Aggregates: []string{"cart", "invoice"}},
		"mid":   {Alias: "mid", Aggregates: []string{"item"}},
	}
	want.Dispatchers = map[string]config.Dispatcher{"all": {
		Topics:     []string{"event"},
		Contexts:   []string{"alpha", "mid", "zeta"},
		Format:     "wow",
		DeadLetter: config.DeadLetter{Enabled: true, Topic: "{topic}.dlq"},
		MaxParked:  config.DefaultMaxParked,
		OnGap:      "log",
		Handler: config.Handler{
			Type:    "http",
			Timeout: time.Minute,
			Raw:     map[string]any{"url": "http://127.0.0.1:8080/wow"},
			Decoded: &httpConfig{URL: "http://127.0.0.1:8080/wow", Timeout: 5 * time.Second},
		},
	}}
	if !reflect.DeepEqual(got, &want) {
		t.Errorf("got  %+v\nwant %+v", got, &want)
	}
}

func TestGoodConfigs(t *testing.T) {
	files, err := filepath.Glob(testdata + "good/*.yaml")
	if err != nil || len(files) < 2 {
		t.Fatalf("good configs: %v %v", files, err)
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			if _, err := config.Load(f, testRegistry(), nil); err != nil {
				t.Error(err)
			}
		})
	}
}

func TestLoadMissingFile(t *testing.T) {
	_, err := config.Load(testdata+"nope.yaml", testRegistry(), nil)
	if !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("got %v, want fs.ErrNotExist", err)
	}
}

func TestEnvOverrides(t *testing.T) {
	c := mustParse(t, minimalYAML,
		"PATH=/bin",
		"WOW_DISPATCH_WORKERS=8",
		"WOW_DISPATCH_MAX_IN_FLIGHT=64",
		"WOW_KAFKA_BOOTSTRAP_SERVERS=kafka-1:9092, kafka-2:9092",
		"WOW_KAFKA_TOPIC_PREFIX=",
		"WOW_KAFKA_TLS_ENABLED=true",
		"WOW_SHUTDOWN_TIMEOUT=1m30s",
		"WOW_SERVICE=other",
		"WOW_DEV_PARTITIONS=2",
		"WOW_KAFKA_SASL_MECHANISM=plain",
		"WOW_KAFKA_SASL_USERNAME=u",
		"WOW_KAFKA_SASL_PASSWORD=p=w",
	)
	switch {
	case c.Dispatch.Workers != 8, c.Dispatch.MaxInFlight != 64:
		t.Errorf("dispatch: %+v", c.Dispatch)
	case !slices.Equal(c.Kafka.BootstrapServers, []string{"kafka-1:9092", "kafka-2:9092"}):
		t.Errorf("bootstrap servers: %q", c.Kafka.BootstrapServers)
	case c.Kafka.TopicPrefix != "wow.":
		t.Errorf("an empty variable changed the topic prefix to %q", c.Kafka.TopicPrefix)
	case !c.Kafka.TLS.Enabled, c.Shutdown.Timeout != 90*time.Second, c.Service != "other", c.Dev.Partitions != 2:
		t.Errorf("overrides not applied: %+v", c)
	case c.Kafka.SASL != (config.SASL{Mechanism: "plain", Username: "u", Password: "p=w"}):
		t.Errorf("sasl: %+v", c.Kafka.SASL)
	}
}

func TestEnvBadValues(t *testing.T) {
	errs := parseErrors(t, minimalYAML,
		"WOW_DISPATCH_WORKERS=eight",
		"WOW_SHUTDOWN_TIMEOUT=30",
		"WOW_DISPATCH_THROUGHPUT=0",
		"WOW_KAFKA_CLIENT_ID=shop\x9d\xc2", // `wowd config print` could not write it
	)
	msg := errs.Error()
	for _, want := range []string{
		`test.yaml: wow.dispatch.workers: WOW_DISPATCH_WORKERS: "eight" is not an integer`,
		`wow.shutdown.timeout: WOW_SHUTDOWN_TIMEOUT: "30" is not a duration`,
		`test.yaml: wow.dispatch.throughput: must be >= 1, got 0 (set by WOW_DISPATCH_THROUGHPUT)`,
		`wow.kafka.client-id: WOW_KAFKA_CLIENT_ID: not valid UTF-8`,
	} {
		if !strings.Contains(msg, want) {
			t.Errorf("errors do not contain %q:\n%s", want, msg)
		}
	}
	if len(errs.List) != 4 {
		t.Errorf("got %d errors, want 4:\n%s", len(errs.List), msg)
	}
}

func TestEnvVarsAndKeys(t *testing.T) {
	vars := config.EnvVars()
	if !slices.IsSorted(vars) || len(slices.Compact(slices.Clone(vars))) != len(vars) {
		t.Errorf("EnvVars not sorted and unique: %v", vars)
	}
	for _, v := range []string{"WOW_SERVICE", "WOW_KAFKA_BOOTSTRAP_SERVERS", "WOW_DISPATCH_WORKERS",
		"WOW_DISPATCH_MAX_IN_FLIGHT", "WOW_KAFKA_SASL_PASSWORD", "WOW_METRICS_LISTEN", "WOW_DEV_PARTITIONS"} {
		if !slices.Contains(vars, v) {
			t.Errorf("EnvVars lacks %s", v)
		}
	}

	keys := config.Keys()
	var paths, withEnv []string
	var env []string
	for _, k := range keys {
		paths = append(paths, k.Path)
		if k.Type == "" || k.Description == "" {
			t.Errorf("key %s lacks a type or description: %+v", k.Path, k)
		}
		if k.Env != "" {
			withEnv = append(withEnv, k.Env)
			if k.Default != "" {
				env = append(env, k.Env+"="+k.Default)
			}
		}
	}
	slices.Sort(withEnv)
	if !slices.Equal(withEnv, vars) {
		t.Errorf("Keys env %v != EnvVars %v", withEnv, vars)
	}
	for _, p := range []string{"wow.service", "wow.kafka.revoke-timeout", "wow.contexts.<name>.alias",
		"wow.dispatchers.<name>.handler.type", "wow.dispatch.blocking-workers", "wow.dev.demo"} {
		if !slices.Contains(paths, p) {
			t.Errorf("Keys lacks %s", p)
		}
	}

	// The documented defaults, set through the environment, are the defaults.
	if got, want := mustParse(t, minimalYAML, env...), mustParse(t, minimalYAML); !reflect.DeepEqual(got, want) {
		t.Errorf("documented defaults differ from Default():\n%+v\n%+v", got, want)
	}
}

func TestWriteYAMLMasksSecretsAndRoundTrips(t *testing.T) {
	reg := testRegistry()
	data, err := os.ReadFile("testdata/full.yaml")
	if err != nil {
		t.Fatal(err)
	}
	// Parse: the TLS files it names are not on this machine.
	c, err := config.Parse(data, "testdata/full.yaml", reg, nil) // handler keys of the test registry
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := c.WriteYAML(&out, reg); err != nil {
		t.Fatal(err)
	}
	text := out.String()
	for _, secret := range []string{"s3cret", "abc123"} {
		if strings.Contains(text, secret) {
			t.Errorf("output shows secret %q:\n%s", secret, text)
		}
	}
	for _, want := range []string{"password: '******'", "token: '******'", "rebalance-timeout: 2m\n",
		"  dispatchers:\n    audit-log:\n", "contexts: [Billing, sales]", "request-timeout: 2s"} {
		if !strings.Contains(text, want) {
			t.Errorf("output lacks %q:\n%s", want, text)
		}
	}

	back, err := config.Parse(out.Bytes(), "printed", reg, nil)
	if err != nil {
		t.Fatalf("printed config does not parse: %v\n%s", err, text)
	}
	var again bytes.Buffer
	if err := back.WriteYAML(&again, reg); err != nil {
		t.Fatal(err)
	}
	if again.String() != text {
		t.Errorf("printing is not stable:\n%s\n---\n%s", text, again.String())
	}

	// Equal but for the masked secrets and the raw handler keys, which now
	// include the handlers' defaults.
	if back.Kafka.SASL.Password != "******" {
		t.Errorf("password read back as %q", back.Kafka.SASL.Password)
	}
	back.Kafka.SASL.Password = c.Kafka.SASL.Password
	cart := back.Dispatchers["cart-projection"]
	cart.Handler.Decoded.(*httpConfig).Token = "abc123"
	for _, cfg := range []*config.Config{c, back} {
		for name, d := range cfg.Dispatchers {
			d.Handler.Raw = nil
			// The print writes the effective on-failure where the file
			// left it to the format: the same policy, now explicit.
			d.OnFailure = d.FailurePolicy()
			cfg.Dispatchers[name] = d
		}
	}
	if !reflect.DeepEqual(back, c) {
		t.Errorf("read back\n%+v\nwant\n%+v", back, c)
	}
}

func TestWriteYAMLUnknownHandler(t *testing.T) {
	c := mustParse(t, minimalYAML)
	if err := c.WriteYAML(&bytes.Buffer{}, nil); err == nil || !strings.Contains(err.Error(), `"http"`) {
		t.Errorf("WriteYAML with a registry lacking http: %v", err)
	}
}

func TestBadConfigs(t *testing.T) {
	tests := []struct {
		file string
		n    int // number of errors
		want []string
	}{
		{"unknown-top-level-key.yaml", 2, []string{
			"bad/unknown-top-level-key.yaml:1:1: version: unknown key",
			"bad/unknown-top-level-key.yaml:14:3: wow.telemetry: unknown key"}},
		{"unknown-nested-key.yaml", 1, []string{"bad/unknown-nested-key.yaml:9:5: wow.dispatch.workerz: unknown key"}},
		{"metadata-mismatch.yaml", 3, []string{
			`:7:5: wow.contexts.example-service: disagrees with wow.metadata: context "example-service": alias "shop", but the metadata has "example"`,
			`wow.contexts.example-service.aggregates: disagrees with wow.metadata: context "example-service", aggregate "invoice": not in the metadata`,
			`aggregate "order": in the metadata but not inline`}},
		{"filters.yaml", 4, []string{
			`:12:7: wow.dispatchers.raw-events.events: needs format wow`,
			`wow.dispatchers.commands-only.aggregates[0]: "order" is not an aggregate of the dispatcher's contexts`,
			`wow.dispatchers.commands-only.events: needs topics event or state`,
			`wow.dispatchers.commands-only.format: "json" is not one of wow, raw`}},
		{"parking.yaml", 8, []string{
			`wow.dispatchers.gap-unchecked.on-gap: park needs version-check true`,
			`wow.dispatchers.raw-park.on-failure: park needs format wow`,
			`wow.dispatchers.raw-park.version-check: needs format wow`,
			`wow.dispatchers.commands.version-check: needs topics event`,
			`wow.dispatchers.commands.on-gap: park needs on-failure park (now dead-letter)`,
			`wow.dispatchers.commands.max-parked: must be at least 1`,
			`wow.dispatchers.typo.on-failure: "parking" is not one of park, dead-letter`,
			`wow.dispatchers.typo.on-gap: "stop" is not one of log, park`}},
		{"case-sensitive.yaml", 1, []string{`:8:3: wow.Dispatch: unknown key (did you mean "dispatch"?)`}},
		{"wrong-type.yaml", 5, []string{
			`:4:5: wow.kafka.bootstrap-servers: expected a list, got "127.0.0.1:9092"`,
			`:7:7: wow.contexts.example.aggregates: expected a list, got "cart"`,
			`:9:5: wow.dispatch.workers: "many" is not an integer`,
			`:16:5: wow.shutdown.timeout: "30" is not a duration`,
			`:17:3: wow.dev: expected a mapping, got true`}},
		{"negative-workers.yaml", 1, []string{":9:5: wow.dispatch.workers: must be >= 0, got -1"}},
		{"max-in-flight-zero.yaml", 1, []string{":9:5: wow.dispatch.max-in-flight: must be >= 1, got 0"}},
		{"unknown-topic-kind.yaml", 1, []string{
			`:10:23: wow.dispatchers.cart-projection.topics[1]: "events" is not one of command, event, state`}},
		{"unknown-context.yaml", 1, []string{
			`:11:18: wow.dispatchers.cart.contexts[0]: unknown context "exampel" (configured: example)`}},
		{"unknown-handler-type.yaml", 1, []string{
			`:12:9: wow.dispatchers.cart.handler.type: unknown handler type "htp" (known: discard, http, log)`}},
		{"handler-config-error.yaml", 3, []string{
			"wow.dispatchers.cart.handler.url: required",
			`:13:9: wow.dispatchers.cart.handler.request-timeout: "soon" is not a duration`,
			":14:9: wow.dispatchers.cart.handler.urll: unknown key"}},
		{"dead-letter-loop.yaml", 4, []string{
			`:12:9: wow.dispatchers.itself.dead-letter.topic: "{topic}" sends the dead letters of wow.example.cart.event to wow.example.cart.event, a topic the dispatcher consumes`,
			`:18:9: wow.dispatchers.another-of-its-topics.dead-letter.topic: "wow.example.cart.command" sends the dead letters of wow.example.cart.command to wow.example.cart.command`,
			`wow.dispatchers.ping.dead-letter.topic: "wow.example.order.event" sends dead letters round a loop of dispatchers: wow.example.order.state -(ping)-> wow.example.order.event, wow.example.order.event -(pong)-> wow.example.order.state`,
			`wow.dispatchers.pong.dead-letter.topic: "wow.example.order.state" sends dead letters round a loop of dispatchers: wow.example.order.event -(pong)-> wow.example.order.state, wow.example.order.state -(ping)-> wow.example.order.event`}},
		{"request-timeout-past-try.yaml", 1, []string{
			`:15:9: wow.dispatchers.cart.handler.request-timeout: 10s must be less than the dispatcher's handler.timeout (5s)`}},
		{"memory.yaml", 2, []string{
			":6:5: wow.memory.limit: must be at least 32MiB, got 12 MiB",
			":7:5: wow.memory.fetch-percent: must be 1 to 90, got 95"}},
		{"missing-service.yaml", 1, []string{"wow.service: required"}},
		{"missing-bootstrap-servers.yaml", 1, []string{"wow.kafka.bootstrap-servers: required"}},
		{"kafka-client-limits.yaml", 7, []string{
			":5:5: wow.kafka.client-id: must be at most 249 bytes, got 250",
			":6:5: wow.kafka.fetch-max-wait: must be from 10ms to 596h31m23.647s, got 5ms",
			":7:5: wow.kafka.session-timeout: must be from 100ms to",
			":8:5: wow.kafka.rebalance-timeout: must be from 100ms to",
			":9:5: wow.kafka.fetch-max-bytes: must be at most 104857600 (the largest response the Kafka client reads), got 209715200",
			`:14:5: wow.tracing.sampling-ratio: "NaN" is not a number from 0 to 1`,
			`wow.dispatchers.cart: Kafka client ID "ccc`}},
		{"revoke-timeout.yaml", 1, []string{
			":6:5: wow.kafka.revoke-timeout: must be less than wow.kafka.rebalance-timeout (30s), got 30s"}},
		{"duplicate-alias.yaml", 1, []string{
			`:9:7: wow.contexts.shop.alias: alias "example" is also the alias of context "example"`}},
		{"colliding-topics.yaml", 1, []string{
			`:11:20: wow.contexts.y.aggregates[0]: aggregate "b.c" of context "y" has the topics of aggregate "c" of context "x" (wow.a.b.c.*): their messages could not be told apart`}},
		{"duplicate-key.yaml", 1, []string{":13:3: wow.service: duplicate key (first at line 2)"}},
		{"security.yaml", 3, []string{
			"wow.kafka.tls.key-file: required with wow.kafka.tls.cert-file",
			":6:7: wow.kafka.tls.cert-file: set, but wow.kafka.tls.enabled is false",
			"wow.kafka.sasl.password: required with wow.kafka.sasl.mechanism"}},
		{"ingest-unauthenticated.yaml", 1, []string{
			`wow.ingest.token-file: required: wow.ingest.listen "0.0.0.0:9465" is not loopback, so anyone who reaches it could publish; set wow.ingest.token-file`}},
		{"ingest-on-public-metrics.yaml", 1, []string{
			`wow.ingest.listen: required: ingest would be served on the metrics listener "0.0.0.0:9464", which is not loopback`,
			"set wow.ingest.listen to an address of its own"}},
		{"ingest-no-host.yaml", 1, []string{
			`wow.ingest.token-file: required: wow.ingest.listen "[::]:9465" is not loopback`}},
		{"syntax-error.yaml", 1, []string{"bad/syntax-error.yaml:3: did not find expected"}},
		{"not-wow.yaml", 3, []string{":1:1: service: unknown key", "wow: required"}},
		{"many-errors.yaml", 11, []string{
			"wow.service: required",
			`:3:25: wow.kafka.bootstrap-servers[0]: "127.0.0.1" is not host:port`,
			`:4:5: wow.kafka.start-offset: "newest" is not one of earliest, latest`,
			`:7:26: wow.contexts.example.aggregates[1]: duplicate aggregate "cart"`,
			":9:5: wow.dispatch.workers: must be >= 0, got -4",
			":10:5: wow.dispatch.throughput: must be >= 1, got 0",
			":13:7: wow.dispatchers.cart.topics: required",
			`:14:18: wow.dispatchers.cart.contexts[0]: unknown context "nope"`,
			"wow.dispatchers.cart.handler.url: required",
			`:18:5: wow.log.level: "verbose" is not one of debug, info, warn, error`,
			":21:5: wow.shutdown.quiet-period: must be less than wow.shutdown.timeout (5s), got 10s"}},
	}
	files, _ := filepath.Glob(testdata + "bad/*.yaml")
	if len(files) != len(tests) {
		t.Errorf("%d files in bad/, %d in the table", len(files), len(tests))
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			_, err := config.Load(testdata+"bad/"+tt.file, testRegistry(), nil)
			var errs *config.Errors
			if !errors.As(err, &errs) {
				t.Fatalf("got %v (%T), want *config.Errors", err, err)
			}
			msg := err.Error()
			for _, want := range tt.want {
				if !strings.Contains(msg, want) {
					t.Errorf("errors lack %q:\n%s", want, msg)
				}
			}
			if len(errs.List) != tt.n || strings.Count(msg, "\n")+1 != tt.n {
				t.Errorf("got %d errors, want %d:\n%s", len(errs.List), tt.n, msg)
			}
		})
	}
}

func TestMoreRules(t *testing.T) {
	tests := []struct {
		name, yaml, want string
	}{
		{"handler missing", "  dispatchers:\n    d:\n      topics: [event]\n", "wow.dispatchers.d.handler: required"},
		{"handler type missing", "  dispatchers:\n    d:\n      topics: [event]\n      handler:\n        url: x\n",
			"wow.dispatchers.d.handler.type: required (known: discard, http, log)"},
		{"discard takes nothing", "  dispatchers:\n    d:\n      topics: [event]\n      handler:\n        type: discard\n        x: 1\n",
			`wow.dispatchers.d.handler.x: unknown key (handler "discard" takes no configuration)`},
		{"handler wrong type", "  dispatchers:\n    d:\n      topics: [event]\n      handler:\n        type: http\n        url: x\n        headers: {a: [1]}\n",
			"wow.dispatchers.d.handler.headers[a]: expected string, got a list"},
		{"empty contexts", "  dispatchers:\n    d:\n      topics: [event]\n      contexts: []\n      handler: {type: log}\n",
			"wow.dispatchers.d.contexts: empty: leave it out"},
		{"bad name", "  dispatchers:\n    -d:\n      topics: [event]\n      handler: {type: log}\n",
			`wow.dispatchers.-d: invalid name "-d"`},
		{"duplicate topic", "  dispatchers:\n    d:\n      topics: [event, event]\n      handler: {type: log}\n",
			`wow.dispatchers.d.topics[1]: duplicate topic kind "event"`},
	}
	const head = "wow:\n  service: s\n  kafka:\n    bootstrap-servers: [k:9092]\n  contexts:\n    c:\n      aggregates: [a]\n"
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			errs := parseErrors(t, head+tt.yaml)
			if !strings.Contains(errs.Error(), tt.want) || len(errs.List) != 1 {
				t.Errorf("errors:\n%s\nwant exactly one, containing %q", errs, tt.want)
			}
		})
	}
}

func TestErrorFormat(t *testing.T) {
	errs := &config.Errors{File: "f.yaml", List: []config.Error{
		{Path: "wow.a", Line: 3, Col: 5, Msg: "bad"},
		{Path: "wow.b", Msg: "required"},
		{Line: 7, Msg: "syntax"},
	}}
	want := "f.yaml:3:5: wow.a: bad\nf.yaml: wow.b: required\nf.yaml:7: syntax"
	if errs.Error() != want {
		t.Errorf("got\n%s\nwant\n%s", errs.Error(), want)
	}
}

func TestNoContextsReportedOnce(t *testing.T) {
	errs := parseErrors(t, "wow:\n  service: s\n  kafka: {bootstrap-servers: ['k:9092']}\n"+
		"  dispatchers: {d: {topics: [event], handler: {type: log}}}\n")
	if len(errs.List) != 1 || errs.List[0].Path != "wow.contexts" {
		t.Errorf("errors:\n%s\nwant only wow.contexts: required", errs)
	}
}

// TestIngestListeners: ingest needs a bearer token off loopback, and is
// served on the metrics listener only when that is loopback.
func TestIngestListeners(t *testing.T) {
	const head = "wow:\n  service: s\n  kafka:\n    bootstrap-servers: [k:9092]\n  contexts:\n    c:\n      aggregates: [a]\n" +
		"  dispatchers:\n    d:\n      topics: [event]\n      handler: {type: log}\n"
	tests := []struct {
		name, metrics, listen, token, want string // want "": valid
	}{
		{"default metrics listener", "", "", "", ""},
		{"loopback metrics listener", "127.0.0.2:9464", "", "", ""},
		{"ipv6 loopback metrics listener", "'[::1]:9464'", "", "", ""},
		{"localhost metrics listener", "localhost:9464", "", "", ""},
		{"loopback own listener", "0.0.0.0:9464", "127.0.0.1:9465", "", ""},
		{"localhost own listener", "0.0.0.0:9464", "LOCALHOST:9465", "", ""},
		{"public own listener with a token", "0.0.0.0:9464", "0.0.0.0:9465", "/run/t", ""},
		{"public own listener without a token", "0.0.0.0:9464", "10.0.0.1:9465", "", "wow.ingest.token-file: required"},
		{"all interfaces without a token", "", ":9465", "", "wow.ingest.token-file: required"},
		{"hostname without a token", "", "wowd.local:9465", "", "wow.ingest.token-file: required"},
		{"public metrics listener", ":9464", "", "", "wow.ingest.listen: required: ingest would be served on the metrics listener"},
		{"public metrics listener with a token", "0.0.0.0:9464", "", "/run/t", "wow.ingest.listen: required: ingest would be served on the metrics listener"},
		{"no metrics listener", `""`, "", "", "wow.ingest.listen: required when wow.metrics.listen is empty"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			y := head
			if tt.metrics != "" {
				y += "  metrics:\n    listen: " + tt.metrics + "\n"
			}
			y += "  ingest:\n    enabled: true\n"
			if tt.listen != "" {
				y += "    listen: " + tt.listen + "\n"
			}
			if tt.token != "" {
				y += "    token-file: " + tt.token + "\n"
			}
			if tt.want == "" {
				c := mustParse(t, y)
				if c.Ingest.TokenFile != tt.token {
					t.Errorf("token file %q", c.Ingest.TokenFile)
				}
				return
			}
			errs := parseErrors(t, y)
			if !strings.Contains(errs.Error(), tt.want) || len(errs.List) != 1 {
				t.Errorf("errors:\n%s\nwant exactly one, containing %q", errs, tt.want)
			}
		})
	}
	// Disabled, nothing is required of its listeners.
	mustParse(t, head+"  metrics:\n    listen: 0.0.0.0:9464\n  ingest:\n    listen: 0.0.0.0:9465\n")
	// The environment sets the token file too.
	if c := mustParse(t, head+"  ingest:\n    enabled: true\n    listen: 0.0.0.0:9465\n", "WOW_INGEST_TOKEN_FILE=/run/t"); c.Ingest.TokenFile != "/run/t" {
		t.Errorf("WOW_INGEST_TOKEN_FILE: %q", c.Ingest.TokenFile)
	}
}

// TestListenerTLS: the TLS keys of wowd's own listeners come in pairs, a
// client CA needs a certificate, and mutual TLS authenticates ingest off
// loopback as a token file does.
func TestListenerTLS(t *testing.T) {
	const head = "wow:\n  service: s\n  kafka:\n    bootstrap-servers: [k:9092]\n  contexts:\n    c:\n      aggregates: [a]\n" +
		"  dispatchers:\n    d:\n      topics: [event]\n      handler: {type: log}\n"
	tests := []struct {
		name, yaml string
		want       []string // nil: valid
	}{
		{"metrics TLS", "  metrics:\n    listen: 0.0.0.0:9464\n    tls: {cert-file: /c, key-file: /k, client-ca-file: /ca}\n", nil},
		{"metrics cert without key", "  metrics:\n    tls: {cert-file: /c}\n",
			[]string{"wow.metrics.tls.key-file: required with wow.metrics.tls.cert-file"}},
		{"metrics key without cert", "  metrics:\n    tls: {key-file: /k}\n",
			[]string{"wow.metrics.tls.cert-file: required with wow.metrics.tls.key-file"}},
		{"client CA alone", "  metrics:\n    tls: {client-ca-file: /ca}\n",
			[]string{"wow.metrics.tls.cert-file: required with wow.metrics.tls.client-ca-file"}},
		{"metrics TLS without a listener", "  metrics:\n    listen: ''\n    tls: {cert-file: /c, key-file: /k}\n",
			[]string{"wow.metrics.tls.cert-file: set, but wow.metrics.listen is empty"}},
		{"public ingest with mutual TLS", "  ingest:\n    enabled: true\n    listen: 0.0.0.0:9465\n    tls: {cert-file: /c, key-file: /k, client-ca-file: /ca}\n", nil},
		{"public ingest with TLS but no client CA", "  ingest:\n    enabled: true\n    listen: 0.0.0.0:9465\n    tls: {cert-file: /c, key-file: /k}\n",
			[]string{"wow.ingest.token-file: required", "or wow.ingest.tls.client-ca-file (with cert-file and key-file)"}},
		{"public ingest with a client CA but no certificate", "  ingest:\n    enabled: true\n    listen: 0.0.0.0:9465\n    tls: {client-ca-file: /ca}\n",
			[]string{"wow.ingest.tls.cert-file: required with wow.ingest.tls.client-ca-file"}},
		{"ingest TLS on the metrics listener", "  ingest:\n    enabled: true\n    token-file: /t\n    tls: {cert-file: /c, key-file: /k}\n",
			[]string{"wow.ingest.tls: set, but ingest has no listener of its own", "wow.metrics.tls"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.want == nil {
				mustParse(t, head+tt.yaml)
				return
			}
			errs := parseErrors(t, head+tt.yaml)
			for _, w := range tt.want {
				if !strings.Contains(errs.Error(), w) {
					t.Errorf("errors:\n%s\nwant one containing %q", errs, w)
				}
			}
			if len(errs.List) != 1 {
				t.Errorf("errors:\n%s\nwant exactly one", errs)
			}
		})
	}
	c := mustParse(t, head, "WOW_INGEST_TLS_CLIENT_CA_FILE=/ca", "WOW_INGEST_TLS_CERT_FILE=/c", "WOW_INGEST_TLS_KEY_FILE=/k", "WOW_INGEST_LISTEN=127.0.0.1:1")
	if want := (config.ListenerTLS{CertFile: "/c", KeyFile: "/k", ClientCAFile: "/ca"}); c.Ingest.TLS != want {
		t.Errorf("ingest TLS from the environment: %+v, want %+v", c.Ingest.TLS, want)
	}
}

// TestSASLCredentials: each mechanism takes its credentials, a password
// comes from the file or the file's twin but not both, and credentials
// without a mechanism or of another mechanism are refused, by key.
func TestSASLCredentials(t *testing.T) {
	const head = "wow:\n  service: s\n  contexts:\n    c:\n      aggregates: [a]\n" +
		"  dispatchers:\n    d:\n      topics: [event]\n      handler: {type: log}\n" +
		"  kafka:\n    bootstrap-servers: [k:9092]\n    sasl:\n"
	tests := []struct {
		name, sasl string
		want       []string // nil: valid
	}{
		{"plain with password", "      {mechanism: plain, username: u, password: p}", nil},
		{"scram with password file", "      {mechanism: scram-sha-512, username: u, password-file: /run/p}", nil},
		{"oauthbearer", "      {mechanism: oauthbearer, token-file: /run/jwt}", nil},
		{"both passwords", "      {mechanism: plain, username: u, password: p, password-file: /run/p}",
			[]string{"wow.kafka.sasl.password-file: set together with wow.kafka.sasl.password: set only one of them"}},
		{"no password", "      {mechanism: scram-sha-256, username: u}",
			[]string{"wow.kafka.sasl.password: required with wow.kafka.sasl.mechanism scram-sha-256 (or wow.kafka.sasl.password-file)"}},
		{"oauthbearer without token", "      {mechanism: oauthbearer}",
			[]string{"wow.kafka.sasl.token-file: required with wow.kafka.sasl.mechanism oauthbearer"}},
		{"oauthbearer with a password", "      {mechanism: oauthbearer, token-file: /t, username: u, password-file: /p}",
			[]string{"wow.kafka.sasl.username: not used with wow.kafka.sasl.mechanism oauthbearer", "wow.kafka.sasl.password-file: not used"}},
		{"token file with plain", "      {mechanism: plain, username: u, password: p, token-file: /t}",
			[]string{"wow.kafka.sasl.token-file: needs wow.kafka.sasl.mechanism oauthbearer, not plain"}},
		{"password file without mechanism", "      {password-file: /p}",
			[]string{"wow.kafka.sasl.mechanism: required with SASL credentials"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			y := head + tt.sasl + "\n"
			if tt.want == nil {
				mustParse(t, y)
				return
			}
			errs := parseErrors(t, y)
			for _, w := range tt.want {
				if !strings.Contains(errs.Error(), w) {
					t.Errorf("errors:\n%s\nwant one containing %q", errs, w)
				}
			}
			if len(errs.List) != len(tt.want) {
				t.Errorf("errors:\n%s\nwant %d", errs, len(tt.want))
			}
		})
	}
	c := mustParse(t, head+"      {mechanism: plain, username: u}\n", "WOW_KAFKA_SASL_PASSWORD_FILE=/run/p")
	if c.Kafka.SASL.PasswordFile != "/run/p" {
		t.Errorf("WOW_KAFKA_SASL_PASSWORD_FILE: %q", c.Kafka.SASL.PasswordFile)
	}
}

// TestIngestBounds: the ingest bounds have defaults and refuse negative
// values and a burst without a rate, by key.
func TestIngestBounds(t *testing.T) {
	const head = "wow:\n  service: s\n  kafka:\n    bootstrap-servers: [k:9092]\n  contexts:\n    c:\n      aggregates: [a]\n" +
		"  dispatchers:\n    d:\n      topics: [event]\n      handler: {type: log}\n"
	c := mustParse(t, head)
	if c.Ingest.MaxInFlight != 256 || c.Ingest.RateLimit != 0 || c.Ingest.RateBurst != 0 {
		t.Errorf("defaults: %+v", c.Ingest)
	}
	c = mustParse(t, head+"  ingest: {enabled: true, max-in-flight: 0, rate-limit: 50, rate-burst: 10}\n")
	if c.Ingest.MaxInFlight != 0 || c.Ingest.RateLimit != 50 || c.Ingest.RateBurst != 10 {
		t.Errorf("set: %+v", c.Ingest)
	}
	errs := parseErrors(t, head+"  ingest: {max-in-flight: -1, rate-limit: -2}\n")
	for _, w := range []string{"wow.ingest.max-in-flight: must be >= 0, got -1", "wow.ingest.rate-limit: must be >= 0, got -2"} {
		if !strings.Contains(errs.Error(), w) {
			t.Errorf("errors:\n%s\nwant %q", errs, w)
		}
	}
	errs = parseErrors(t, head+"  ingest: {rate-burst: 5}\n")
	if !strings.Contains(errs.Error(), "wow.ingest.rate-burst: needs wow.ingest.rate-limit") || len(errs.List) != 1 {
		t.Errorf("errors:\n%s\nwant one: rate-burst needs rate-limit", errs)
	}
}

// TestAdminListener: the admin listener is off by default, and needs a
// bearer token off loopback.
func TestAdminListener(t *testing.T) {
	const head = "wow:\n  service: s\n  kafka:\n    bootstrap-servers: [k:9092]\n  contexts:\n    c:\n      aggregates: [a]\n" +
		"  dispatchers:\n    d:\n      topics: [event]\n      handler: {type: log}\n"
	if c := mustParse(t, head); c.Admin != (config.Admin{}) {
		t.Errorf("default admin %+v, want off", c.Admin)
	}
	tests := []struct {
		name, listen, token, want string // want "": valid
	}{
		{"loopback", "127.0.0.1:9465", "", ""},
		{"ipv6 loopback", "'[::1]:9465'", "", ""},
		{"any port", "127.0.0.1:0", "", ""},
		{"public with a token", "0.0.0.0:9465", "/run/t", ""},
		{"public without a token", "0.0.0.0:9465", "", "wow.admin.token-file: required"},
		{"all interfaces without a token", ":9465", "", "wow.admin.token-file: required"},
		{"not host:port", "9465", "/run/t", "wow.admin.listen: \"9465\" is not host:port"},
		{"public with mutual TLS", "0.0.0.0:9465\n    tls: {cert-file: /c, key-file: /k, client-ca-file: /ca}", "", ""},
		{"public with TLS but no client CA", "0.0.0.0:9465\n    tls: {cert-file: /c, key-file: /k}", "", "or wow.admin.tls.client-ca-file"},
		{"TLS without a key", "127.0.0.1:9465\n    tls: {cert-file: /c}", "", "wow.admin.tls.key-file: required with wow.admin.tls.cert-file"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			y := head + "  admin:\n    listen: " + tt.listen + "\n"
			if tt.token != "" {
				y += "    token-file: " + tt.token + "\n"
			}
			if tt.want == "" {
				if c := mustParse(t, y); c.Admin.TokenFile != tt.token {
					t.Errorf("token file %q", c.Admin.TokenFile)
				}
				return
			}
			errs := parseErrors(t, y)
			if !strings.Contains(errs.Error(), tt.want) || len(errs.List) != 1 {
				t.Errorf("errors:\n%s\nwant exactly one, containing %q", errs, tt.want)
			}
		})
	}
	if c := mustParse(t, head, "WOW_ADMIN_LISTEN=127.0.0.1:9465"); c.Admin.Listen != "127.0.0.1:9465" {
		t.Errorf("WOW_ADMIN_LISTEN: %q", c.Admin.Listen)
	}
	if errs := parseErrors(t, head+"  admin:\n    tls: {cert-file: /c, key-file: /k}\n"); !strings.Contains(errs.Error(), "wow.admin.tls.cert-file: set, but wow.admin.listen is empty") {
		t.Errorf("TLS without a listener: %s", errs)
	}
}

// TestWriteYAMLRedactsURLPasswords: a password written into a URL (a
// handler's url) is printed as xxxxx, and the value of each query
// parameter as the mask (a token in the query was printed in the clear);
// a user name without a password and a parameter without a value are
// masked too (either may be a token); the user beside a password, the
// names of parameters with a value and the rest of the URL are kept.
func TestWriteYAMLRedactsURLPasswords(t *testing.T) {
	reg := testRegistry()
	const y = "wow:\n  service: s\n  kafka:\n    bootstrap-servers: [k:9092]\n  contexts:\n    c:\n      aggregates: [a]\n" +
		"  dispatchers:\n" +
		"    d:\n      topics: [event]\n      handler: {type: http, url: 'https://sink:pw-in-url-41d2@sink.example:8443/wow?x=1'}\n" +
		"    e:\n      topics: [event]\n      handler: {type: http, url: 'https://t0ken-as-user-93ac@sink.example/plain'}\n" +
		"    f:\n      topics: [event]\n      handler: {type: http, url: 'https://sink.example/hook?token=tok-in-query-77f1&env=prod&flag'}\n"
	c, err := config.Parse([]byte(y), "test.yaml", reg, nil)
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := c.WriteYAML(&out, reg); err != nil {
		t.Fatal(err)
	}
	text := out.String()
	if strings.Contains(text, "pw-in-url-41d2") || strings.Contains(text, "tok-in-query-77f1") || strings.Contains(text, "t0ken-as-user-93ac") {
		t.Errorf("output shows the URL's password or query token:\n%s", text)
	}
	for _, want := range []string{"url: https://sink:xxxxx@sink.example:8443/wow?x=******", "url: https://xxxxx@sink.example/plain",
		"url: https://sink.example/hook?token=******&env=******&******"} {
		if !strings.Contains(text, want) {
			t.Errorf("output lacks %q:\n%s", want, text)
		}
	}
}

// TestEmptyKey: a key without a name, written empty or null (a bare "?"),
// is reported at its line, at the top of the file and inside it.
func TestEmptyKey(t *testing.T) {
	tests := map[string]string{
		"?\n":                       "x.yaml:1:2: a key without a name",
		`"": 1` + "\n":              "x.yaml:1:1: a key without a name",
		minimalYAML + "  \"\": 1\n": ": wow.: a key without a name",
	}
	for data, want := range tests {
		_, err := config.Parse([]byte(data), "x.yaml", testRegistry(), nil)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Parse(%q) = %v, want a problem with %q", data, err, want)
		}
	}
}

// TestDispatchUpperBounds: the executor allocates per worker, and every
// blocking worker may hold an OS thread; values far past any machine are
// refused rather than run out of memory or threads.
func TestDispatchUpperBounds(t *testing.T) {
	for _, tt := range []struct {
		env, want string
	}{
		{"WOW_DISPATCH_WORKERS=100000000", "wow.dispatch.workers: must be at most 4096, got 100000000"},
		{"WOW_DISPATCH_MAX_IN_FLIGHT=10000000", "wow.dispatch.max-in-flight: must be at most 65536, got 10000000"},
		{"WOW_DISPATCH_BLOCKING_WORKERS=20000", "wow.dispatch.blocking-workers: must be at most 4096, got 20000"},
		{"WOW_DISPATCH_THROUGHPUT=1000000", "wow.dispatch.throughput: must be at most 65536, got 1000000"},
	} {
		errs := parseErrors(t, minimalYAML, tt.env)
		if len(errs.List) != 1 || !strings.Contains(errs.Error(), tt.want) {
			t.Errorf("%s: errors:\n%s\nwant one containing %q", tt.env, errs, tt.want)
		}
	}
	for _, env := range []string{"WOW_DISPATCH_WORKERS=4096", "WOW_DISPATCH_MAX_IN_FLIGHT=65536", "WOW_DISPATCH_BLOCKING_WORKERS=4096", "WOW_DISPATCH_THROUGHPUT=65536"} {
		mustParse(t, minimalYAML, env)
	}
}

// TestMetadataTimeoutMustBePositive: a negative or zero
// wow.metadata-timeout was silently replaced by the default.
func TestMetadataTimeoutMustBePositive(t *testing.T) {
	for _, v := range []string{"-1s", "0s"} {
		errs := parseErrors(t, minimalYAML, "WOW_METADATA_TIMEOUT="+v)
		want := "wow.metadata-timeout: must be > 0, got " + v
		if len(errs.List) != 1 || !strings.Contains(errs.Error(), want) {
			t.Errorf("%s: errors:\n%s\nwant one containing %q", v, errs, want)
		}
	}
}

// TestEnvUnknownVariables: a WOW_* variable that names no key is a typo
// that would silently do nothing; every one is reported, with the closest
// variable. Other variables, WOWD_* (wowd's own, not keys) included, are
// not wowd's configuration.
func TestEnvUnknownVariables(t *testing.T) {
	errs := parseErrors(t, minimalYAML,
		"WOW_DISPATCH_WORKRS=8",
		"WOW_LOG_LEVEL=debug",
		"WOW_KAFKA_BOOTSTRAP_SERVER=k:9092",
		"WOW_UNRELATED_THING=",
		"WOW_WOWD_SERVICE_HOST=10.0.0.1", // a Kubernetes service link
		"WOW_WOWD_PORT=tcp://10.0.0.1:9464",
		"WOW_WOWD_PORT_9464_TCP_ADDR=10.0.0.1",
		"WOW_CONTEXT_NAME=example", // a Wow service's Spring property
		"WOWD_CONFIG=/etc/wowd/wowd.yaml",
		"WOWD_SINK_TOKEN=x",
		"WOW=1",
		"PATH=/bin",
	)
	msg := errs.Error()
	for _, want := range []string{
		"test.yaml: wow.dispatch.workers: set by WOW_DISPATCH_WORKERS, not WOW_DISPATCH_WORKRS (a variable that names no key)",
		"test.yaml: wow.kafka.bootstrap-servers: set by WOW_KAFKA_BOOTSTRAP_SERVERS, not WOW_KAFKA_BOOTSTRAP_SERVER (a variable that names no key)",
	} {
		if !strings.Contains(msg, want) {
			t.Errorf("errors lack %q:\n%s", want, msg)
		}
	}
	if len(errs.List) != 2 {
		t.Errorf("got %d errors, want 2 (the near misses):\n%s", len(errs.List), msg)
	}
}
