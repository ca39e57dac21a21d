package config_test

import (
	"strings"
	"testing"

	"github.com/wowd/wowd/handler"
	"github.com/wowd/wowd/internal/config"
)

// shapesConfig is the configuration of a handler type with a key of each
// shape the decoding treats apart: text, an integer, a float, a map of
// strings and nested mappings.
type shapesConfig struct {
	URL     string            `config:"url"`
	Count   int               `config:"count"`
	Ratio   float64           `config:"ratio"`
	Headers map[string]string `config:"headers"`
	TLS     struct {
		CAFile             string `config:"ca-file"`
		InsecureSkipVerify bool   `config:"insecure-skip-verify"`
	} `config:"tls"`
	Batch struct {
		MaxMessages int `config:"max-messages"`
	} `config:"batch"`
}

func shapesRegistry() *handler.Registry {
	r := testRegistry()
	r.Register(handler.Spec{Name: "shapes", New: newNothing, Config: func() any { return &shapesConfig{} }})
	return r
}

// shapesYAML configures dispatcher d with a shapes handler; the keys of
// the handler follow (at 8 spaces), from line 15 on.
const shapesYAML = `wow:
  service: s
  kafka:
    bootstrap-servers: [localhost:9092]
  dispatch:
    workers: 1
  contexts:
    c:
      aggregates: [a]
  dispatchers:
    d:
      topics: [event]
      handler:
        type: shapes
`

func parseShapes(t *testing.T, handlerKeys string, set ...string) (*config.Config, error) {
	t.Helper()
	c, _, err := config.ParseSources([]byte(shapesYAML+handlerKeys), "wowd.yaml", shapesRegistry(), config.Sources{Set: set})
	return c, err
}

// wantErrors checks that err holds each of want, and no other problem.
func wantErrors(t *testing.T, err error, want ...string) {
	t.Helper()
	if err == nil {
		t.Fatalf("accepted; want:\n%s", strings.Join(want, "\n"))
	}
	msg := err.Error()
	for _, w := range want {
		if !strings.Contains(msg, w) {
			t.Errorf("missing %q in:\n%s", w, msg)
		}
	}
	if n := strings.Count(msg, "\n") + 1; n != len(want) {
		t.Errorf("%d errors, want %d:\n%s", n, len(want), msg)
	}
}

// TestHandlerKeysAreCaseSensitive: a handler's keys are written as they are
// declared, as the fixed keys are. Count is not count, nor TLS tls, nor
// CA-File ca-file: each is an unknown key with the key it resembles.
// Taken without regard to case, CA-File set the CA file while the check of
// the files a configuration names, which goes by the key (…-file), passed
// over it: `wowd config validate` said ok and `wowd run` could not start.
func TestHandlerKeysAreCaseSensitive(t *testing.T) {
	_, err := parseShapes(t, `        url: http://x
        Count: 9
        TLS: {insecure-skip-verify: true}
        tls: {CA-File: /nonexistent/ca.pem}
`)
	wantErrors(t, err,
		`wowd.yaml:16:9: wow.dispatchers.d.handler.Count: unknown key (did you mean "count"?)`,
		`wowd.yaml:17:9: wow.dispatchers.d.handler.TLS: unknown key (did you mean "tls"?)`,
		`wowd.yaml:18:15: wow.dispatchers.d.handler.tls.CA-File: unknown key (did you mean "ca-file"?)`,
	)
}

// TestDottedKeysAreRefused: a key is one element of its mapping; one
// written with dots (kafka.tls.insecure-skip-verify: true under wow) is
// not the nested key, and is refused with how to write it. Matched as a
// path, it was taken, and overrode what the file said of the same key
// nested, silently, whichever came first.
func TestDottedKeysAreRefused(t *testing.T) {
	_, err := config.Parse([]byte(`wow:
  service: s
  kafka:
    bootstrap-servers: [localhost:9092]
    tls: {enabled: true, insecure-skip-verify: false}
  kafka.tls.insecure-skip-verify: true
  dispatch.workers: 3
  contexts:
    c:
      aggregates: [a]
  dispatchers:
    d:
      topics: [event]
      handler: {type: log}
      handler.type: discard
      dead-letter.enabled: false
`), "wowd.yaml", testRegistry(), nil)
	wantErrors(t, err,
		`wowd.yaml:6:3: wow.kafka.tls.insecure-skip-verify: unknown key (write it nested: kafka: {tls: {insecure-skip-verify: ...}})`,
		`wowd.yaml:7:3: wow.dispatch.workers: unknown key (write it nested: dispatch: {workers: ...})`,
		`wowd.yaml:15:7: wow.dispatchers.d.handler.type: unknown key (write it nested: handler: {type: ...})`,
		`wowd.yaml:16:7: wow.dispatchers.d.dead-letter.enabled: unknown key (write it nested: dead-letter: {enabled: ...})`,
	)

	// A handler's keys: the suggestion was the dotted key itself ("did you
	// mean "batch.max-messages"?" of batch.max-messages).
	_, err = parseShapes(t, `        batch.max-messages: 10
        tls:
          ca.file: x
`)
	wantErrors(t, err,
		`wowd.yaml:15:9: wow.dispatchers.d.handler.batch.max-messages: unknown key (write it nested: batch: {max-messages: ...})`,
		`wowd.yaml:17:11: wow.dispatchers.d.handler.tls.ca.file: unknown key (did you mean "ca-file"?)`,
	)

	// A header name may hold dots: a map's entries are not keys of the
	// configuration.
	c, err := parseShapes(t, "        headers: {X.Tenant: acme}\n")
	if err != nil {
		t.Fatal(err)
	}
	if h := c.Dispatchers["d"].Handler.Decoded.(*shapesConfig).Headers; h["X.Tenant"] != "acme" {
		t.Errorf("headers %v", h)
	}
}

// TestDuplicateKeysInHandlerMappings: a key written twice in a mapping
// nested in a handler's (batch, tls, headers) is a duplicate, as it is at
// the handler's top level and everywhere else in the file. The last one
// won, silently: tls: {insecure-skip-verify: false, insecure-skip-verify:
// true} turned verification off.
func TestDuplicateKeysInHandlerMappings(t *testing.T) {
	_, err := parseShapes(t, `        batch:
          max-messages: 10
          max-messages: 20
        tls:
          insecure-skip-verify: false
          insecure-skip-verify: true
        headers:
          X-A: a
          X-A: b
`)
	wantErrors(t, err,
		`wowd.yaml:17:11: wow.dispatchers.d.handler.batch.max-messages: duplicate key (first at line 16)`,
		`wowd.yaml:20:11: wow.dispatchers.d.handler.tls.insecure-skip-verify: duplicate key (first at line 19)`,
		`wowd.yaml:23:11: wow.dispatchers.d.handler.headers.X-A: duplicate key (first at line 22)`,
	)
}

// TestHandlerNumbersAreDecimal: a handler's numbers are read as the fixed
// keys' are, in base 10: 010 is ten in wow.dispatch.workers, and YAML read
// it as octal eight in a handler's integer (0x10 as sixteen, which the
// fixed keys refuse).
func TestHandlerNumbersAreDecimal(t *testing.T) {
	c, err := config.Parse([]byte(strings.Replace(shapesYAML, "workers: 1", "workers: 010", 1)+`        count: 010
        ratio: 010
        batch: {max-messages: 010}
`), "wowd.yaml", shapesRegistry(), nil)
	if err != nil {
		t.Fatal(err)
	}
	h := c.Dispatchers["d"].Handler.Decoded.(*shapesConfig)
	if c.Dispatch.Workers != 10 || h.Count != 10 || h.Ratio != 10 || h.Batch.MaxMessages != 10 {
		t.Errorf("010 read as workers %d, count %d, ratio %v, batch.max-messages %d; want 10 each",
			c.Dispatch.Workers, h.Count, h.Ratio, h.Batch.MaxMessages)
	}
	c, err = parseShapes(t, "", "wow.dispatchers.d.handler.count=010")
	if err != nil {
		t.Fatal(err)
	}
	if n := c.Dispatchers["d"].Handler.Decoded.(*shapesConfig).Count; n != 10 {
		t.Errorf("--set count=010: %d, want 10", n)
	}

	_, err = config.Parse([]byte(strings.Replace(shapesYAML, "workers: 1", "workers: 0x10", 1)+`        count: 0x10
        ratio: 0x10
        batch: {max-messages: 0o10}
`), "wowd.yaml", shapesRegistry(), nil)
	wantErrors(t, err,
		`wowd.yaml:6:5: wow.dispatch.workers: "0x10" is not an integer`,
		`wowd.yaml:15:9: wow.dispatchers.d.handler.count: "0x10" is not an integer`,
		`wowd.yaml:16:9: wow.dispatchers.d.handler.ratio: "0x10" is not a number`,
		`wowd.yaml:17:17: wow.dispatchers.d.handler.batch.max-messages: "0o10" is not an integer`,
	)
}

// Handler integers read in base 10 still take what they took before: a
// whole decimal (5.0, 1e3) and digits grouped with underscores (1_000),
// which configurations that ran before may hold; a fraction stays refused.
func TestHandlerIntegersTakeWholeDecimals(t *testing.T) {
	for v, want := range map[string]int{"5.0": 5, "1e3": 1000, "1_000": 1000, "-2.0": -2} {
		c, err := config.Parse([]byte(shapesYAML+"        count: "+v+"\n"), "wowd.yaml", shapesRegistry(), nil)
		if err != nil {
			t.Errorf("count: %s: %v", v, err)
			continue
		}
		if n := c.Dispatchers["d"].Handler.Decoded.(*shapesConfig).Count; n != want {
			t.Errorf("count: %s read as %d, want %d", v, n, want)
		}
	}
	for _, v := range []string{"1.5", "1e30", "1__0", "0x10", "1.0000000000000001", "1e-400"} {
		if _, err := config.Parse([]byte(shapesYAML+"        count: "+v+"\n"), "wowd.yaml", shapesRegistry(), nil); err == nil {
			t.Errorf("count: %s accepted", v)
		}
	}
}

// TestDottedKeySuggestions: a dotted key is shown nested only when its
// first element holds a mapping; a map by name (contexts, a handler's
// headers) is one.
func TestDottedKeySuggestions(t *testing.T) {
	_, err := config.Parse([]byte(`wow.service: s
wow:
  service: s
  kafka:
    bootstrap-servers: [localhost:9092]
  contexts.c.aggregates: [b]
  contexts:
    c:
      aggregates: [a]
      alias.x: y
  dispatchers:
    d:
      topics: [event]
      handler: {type: log}
`), "wowd.yaml", testRegistry(), nil)
	wantErrors(t, err,
		`wowd.yaml:1:1: wow.service: unknown key (write it nested: wow: {service: ...})`,
		`wowd.yaml:6:3: wow.contexts.c.aggregates: unknown key (write it nested: contexts: {c: {aggregates: ...}})`,
		`wowd.yaml:10:7: wow.contexts.c.alias.x: unknown key`,
	)
	_, err = parseShapes(t, "        headers.X-A: a\n        url.x: y\n")
	wantErrors(t, err,
		`wowd.yaml:15:9: wow.dispatchers.d.handler.headers.X-A: unknown key (write it nested: headers: {X-A: ...})`,
		`wowd.yaml:16:9: wow.dispatchers.d.handler.url.x: unknown key`,
	)
}
