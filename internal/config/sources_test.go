package config_test

import (
	"bytes"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/wowd/wowd/handler"
	"github.com/wowd/wowd/internal/config"
)

// layeredYAML sets log.level and dispatch.workers in the file (lines 3 and
// 5), leaving log.format and dispatch.throughput to their defaults.
const layeredYAML = `wow:
  log:
    level: warn
  dispatch:
    workers: 2
  service: audit
  kafka:
    bootstrap-servers: [localhost:9092]
  contexts:
    shop:
      aggregates: [cart]
  dispatchers:
    Cart:
      topics: [event]
      handler:
        type: http
        url: http://127.0.0.1:8080/wow
`

func parseSources(t *testing.T, yaml string, src config.Sources) (*config.Config, *config.Origins, error) {
	t.Helper()
	return config.ParseSources([]byte(yaml), "wowd.yaml", testRegistry(), src)
}

// TestLayersPrecedence checks each layer over the one below it, and that
// each value says where it came from.
func TestLayersPrecedence(t *testing.T) {
	env := []string{"WOW_LOG_LEVEL=error", "WOW_DISPATCH_THROUGHPUT=4", "WOW_DISPATCH_WORKERS=3", "PATH=/bin"}
	set := []string{"wow.dispatch.workers=5", "wow.dispatchers.Cart.handler.request-timeout=2s,wow.kafka.client-id=me"}
	c, o, err := parseSources(t, layeredYAML, config.Sources{Env: env, Set: set})
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		path, origin string
		got, want    any
	}{
		{"wow.log.format", "default", c.Log.Format, "json"},                                  // default only
		{"wow.log.level", "env WOW_LOG_LEVEL", c.Log.Level, "error"},                         // env over file
		{"wow.dispatch.throughput", "env WOW_DISPATCH_THROUGHPUT", c.Dispatch.Throughput, 4}, // env over default
		{"wow.dispatch.workers", "--set", c.Dispatch.Workers, 5},                             // --set over env over file
		{"wow.kafka.client-id", "--set", c.Kafka.ClientID, "me"},                             // second pair of one argument
		{"wow.service", "wowd.yaml:6", c.Service, "audit"},                                   // file over default
		{"wow.kafka.bootstrap-servers", "wowd.yaml:8", c.Kafka.BootstrapServers[0], "localhost:9092"},
		{"wow.dispatchers.Cart.handler.url", "wowd.yaml:17", c.Dispatchers["Cart"].Handler.Raw["url"], "http://127.0.0.1:8080/wow"},
		{"wow.dispatchers.Cart.handler.request-timeout", "--set", c.Dispatchers["Cart"].Handler.Decoded.(*httpConfig).Timeout, 2 * time.Second},
	}
	for _, tc := range cases {
		if tc.got != tc.want {
			t.Errorf("%s = %v, want %v", tc.path, tc.got, tc.want)
		}
		if o := o.Of(tc.path); o != tc.origin {
			t.Errorf("Origin(%s) = %q, want %q", tc.path, o, tc.origin)
		}
	}
}

func TestSetSyntax(t *testing.T) {
	c, o, err := parseSources(t, layeredYAML, config.Sources{Set: []string{
		`wow.kafka.bootstrap-servers={a:9092,b:9092}`,
		`wow.dispatchers.Cart.aggregates[1]=cart`, // grows the list with an empty item
	}})
	if err == nil || !strings.Contains(err.Error(), "aggregates[0]") {
		t.Fatalf("a list item after a gap: %v", err)
	}
	c, o, err = parseSources(t, layeredYAML, config.Sources{Set: []string{
		`wow.kafka.bootstrap-servers={a:9092,b:9092}`,
		`wow.dispatchers.Cart.handler.headers.X-Note=a\,b`,
		`wow.contexts.shop.aggregates[0]=order`,
		`wow.log.level=null`, // back to the default, under the file
	}})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(c.Kafka.BootstrapServers, []string{"a:9092", "b:9092"}) {
		t.Errorf("list: %q", c.Kafka.BootstrapServers)
	}
	if h := c.Dispatchers["Cart"].Handler.Decoded.(*httpConfig).Headers; h["X-Note"] != "a,b" {
		t.Errorf("map entry with an escaped comma: %q", h)
	}
	if a := c.Contexts["shop"].Aggregates; !slices.Equal(a, []string{"order"}) {
		t.Errorf("list item: %q", a)
	}
	if c.Log.Level != "info" {
		t.Errorf("null: level %q, want the default", c.Log.Level)
	}
	if o := o.Of("wow.contexts.shop.aggregates"); o != "--set" {
		t.Errorf("origin of a list with an item set: %q", o)
	}
}

// TestSetErrors checks that a --set key that does not exist is named with
// its argument and the closest key, and that every problem, of the file,
// the environment and --set, comes at once.
func TestSetErrors(t *testing.T) {
	bad := strings.Replace(layeredYAML, "workers: 2", "workerz: 2", 1)
	_, _, err := parseSources(t, bad, config.Sources{
		Env: []string{"WOW_SHUTDOWN_TIMEOUT=soon"},
		Set: []string{
			"wow.log.levle=debug",
			"wow.dispatchers.Cart.handler.request-timout=1s",
			"log.level=debug",
			"wow.kafka.client-id",
			"wow.dispatch.throughput=many",
		}})
	var errs *config.Errors
	if !errors.As(err, &errs) {
		t.Fatalf("err = %v", err)
	}
	want := []string{
		`wowd.yaml:5:5: wow.dispatch.workerz: unknown key (did you mean "workers"?)`,
		`wow.log.levle: unknown key (did you mean "level"?) (set by --set wow.log.levle)`,
		`wow.dispatchers.Cart.handler.request-timout: unknown key (did you mean "request-timeout"?) (set by --set wow.dispatchers.Cart.handler.request-timout)`,
		`--set log.level: keys start with wow. (wow.log.level)`,
		`--set: argument 4: want key=value`,
		`wow.dispatch.throughput: "many" is not an integer (set by --set wow.dispatch.throughput)`,
		`wow.shutdown.timeout: WOW_SHUTDOWN_TIMEOUT: "soon" is not a duration`,
	}
	msg := err.Error()
	for _, w := range want {
		if !strings.Contains(msg, w) {
			t.Errorf("missing %q in:\n%s", w, msg)
		}
	}
	if len(errs.List) != len(want) {
		t.Errorf("%d errors, want %d:\n%s", len(errs.List), len(want), msg)
	}
}

// TestWriteOrigins checks that config print's annotations name each
// value's source, and that secrets stay masked.
func TestWriteOrigins(t *testing.T) {
	c, o, err := parseSources(t, layeredYAML, config.Sources{
		Env: []string{"WOW_KAFKA_SASL_PASSWORD=hunter2", "WOW_KAFKA_SASL_MECHANISM=plain", "WOW_KAFKA_SASL_USERNAME=u"},
		Set: []string{"wow.dispatchers.Cart.handler.token=s3cret"}})
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := c.WriteOrigins(&out, testRegistry(), o); err != nil {
		t.Fatal(err)
	}
	s := out.String()
	for _, line := range []string{
		"level: warn # wowd.yaml:3",
		"format: json # default",
		"password: '******' # env WOW_KAFKA_SASL_PASSWORD",
		"token: '******' # --set",
		"bootstrap-servers: ['localhost:9092'] # wowd.yaml:8",
	} {
		if !strings.Contains(s, line) {
			t.Errorf("missing %q in:\n%s", line, s)
		}
	}
	for _, secret := range []string{"hunter2", "s3cret"} {
		if strings.Contains(s, secret) {
			t.Errorf("secret %q printed:\n%s", secret, s)
		}
	}
}

// TestChanges checks which changed keys a running wowd may apply: the
// reloadable fixed keys and handler keys, not a handler key of a
// dispatcher whose type changed, and never a secret's value.
func TestChanges(t *testing.T) {
	old, _, err := parseSources(t, layeredYAML, config.Sources{})
	if err != nil {
		t.Fatal(err)
	}
	cur, _, err := parseSources(t, layeredYAML, config.Sources{Set: []string{
		"wow.log.level=debug",
		"wow.dispatch.workers=9",
		"wow.dispatchers.Cart.handler.request-timeout=3s",
		"wow.dispatchers.Cart.handler.token=rotated",
		"wow.dispatchers.Cart.handler.timeout=2m",
	}})
	if err != nil {
		t.Fatal(err)
	}
	got, err := config.Changes(old, cur, testRegistry())
	if err != nil {
		t.Fatal(err)
	}
	want := []config.Change{
		{Path: "wow.dispatch.workers"},
		{Path: "wow.dispatchers.Cart.handler.request-timeout", Reload: true},
		{Path: "wow.dispatchers.Cart.handler.timeout"},
		{Path: "wow.dispatchers.Cart.handler.token"},
		{Path: "wow.log.level", Reload: true},
	}
	if !slices.Equal(got, want) {
		t.Errorf("Changes:\n got %+v\nwant %+v", got, want)
	}
	if same, _ := config.Changes(old, old, testRegistry()); len(same) != 0 {
		t.Errorf("no change: %+v", same)
	}
	typed, _, err := parseSources(t, layeredYAML, config.Sources{Set: []string{
		"wow.dispatchers.Cart.handler.type=log", "wow.dispatchers.Cart.handler.url=null"}})
	if err != nil {
		t.Fatal(err)
	}
	got, _ = config.Changes(old, typed, testRegistry())
	for _, c := range got {
		if c.Reload {
			t.Errorf("%s reloadable although the handler type changed", c.Path)
		}
	}
}

// TestSetThroughAnAlias checks that a --set key under a YAML alias changes
// that place only, not the anchored value the alias stands for.
func TestSetThroughAnAlias(t *testing.T) {
	yaml := strings.Replace(layeredYAML, "      handler:\n        type: http", "      handler: &h\n        type: http", 1) + `    Other:
      topics: [event]
      handler: *h
`
	c, _, err := parseSources(t, yaml, config.Sources{Set: []string{"wow.dispatchers.Other.handler.request-timeout=3s"}})
	if err != nil {
		t.Fatal(err)
	}
	if got := c.Dispatchers["Other"].Handler.Decoded.(*httpConfig).Timeout; got != 3*time.Second {
		t.Errorf("Other: %v", got)
	}
	if got := c.Dispatchers["Cart"].Handler.Decoded.(*httpConfig).Timeout; got != 5*time.Second {
		t.Errorf("Cart, the anchor: %v, want the default", got)
	}
}

// TestSetAddsAMapping checks that the problems of a mapping a --set pair
// added name that pair, though they concern keys it did not set.
func TestSetAddsAMapping(t *testing.T) {
	_, _, err := parseSources(t, layeredYAML, config.Sources{Set: []string{"wow.dispatchers.New.handler.type=discard"}})
	want := `wow.dispatchers.New.topics: required: at least one of command, event, state (set by --set wow.dispatchers.New.handler.type)`
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("err = %v\nwant %s", err, want)
	}
}

// TestWriteOriginsMaskedMap: a secret mapping is printed masked as one
// value; when --set gave one of its entries, it says --set, not default.
func TestWriteOriginsMaskedMap(t *testing.T) {
	type sealed struct {
		Headers map[string]string `config:"headers" secret:"true"`
	}
	reg := testRegistry()
	reg.Register(handler.Spec{Name: "sealed", New: newNothing, Config: func() any { return &sealed{} }})
	yaml := strings.Replace(layeredYAML, "type: http\n        url: http://127.0.0.1:8080/wow\n", "type: sealed\n", 1)
	c, o, err := config.ParseSources([]byte(yaml), "wowd.yaml", reg,
		config.Sources{Set: []string{"wow.dispatchers.Cart.handler.headers.Authorization=Bearer s3cret"}})
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := c.WriteOrigins(&out, reg, o); err != nil {
		t.Fatal(err)
	}
	if s := out.String(); !strings.Contains(s, "headers: '******' # --set") || strings.Contains(s, "s3cret") {
		t.Errorf("want headers: '******' # --set in:\n%s", s)
	}
	if got := o.Of("wow.dispatchers.Cart.handler.headers"); got != "--set" {
		t.Errorf("Of(headers) = %q, want --set", got)
	}
}

// TestSetErrorsKeepValuesOut: a problem with a key set by --set named the
// whole pair, so `--set wow.kafka.sasl.password=$PW` printed the password
// on stderr (into a CI log) when the mechanism was not set, and so did a
// mistyped secret key or an unclosed brace. The environment's problems name
// the variable, not its value; --set's now name the key.
func TestSetErrorsKeepValuesOut(t *testing.T) {
	_, _, err := parseSources(t, layeredYAML, config.Sources{Set: []string{
		"wow.kafka.sasl.password=s3cret-1",
		"wow.kafka.sasl.pasword=s3cret-2",
		"wow.dispatchers.Cart.handler.headrs.Authorization=s3cret-3",
		"wow.kafka.sasl.password-file={s3cret-4",
	}})
	if err == nil {
		t.Fatal("no error")
	}
	msg := err.Error()
	if strings.Contains(msg, "s3cret") {
		t.Errorf("a --set value is printed:\n%s", msg)
	}
	for _, w := range []string{
		`(set by --set wow.kafka.sasl.password)`,
		`wow.kafka.sasl.pasword: unknown key (did you mean "password"?) (set by --set wow.kafka.sasl.pasword)`,
		`(set by --set wow.dispatchers.Cart.handler.headrs.Authorization)`,
		`--set wow.kafka.sasl.password-file: a list is written {a,b}: missing }`,
	} {
		if !strings.Contains(msg, w) {
			t.Errorf("missing %q in:\n%s", w, msg)
		}
	}
}
