package config_test

import (
	"strings"
	"testing"

	"github.com/wowd/wowd/handler"
	"github.com/wowd/wowd/internal/config"
)

// TestEnvLeavesOtherProgramsWowVariablesAlone (found by review): docs/configuration.md
// says "Other WOW_* variables are not wowd's to refuse and are left alone:
// Kubernetes' service links of a Service named wow-…, a Wow service's
// Spring properties". The near-miss check (closest, with an edit distance
// of up to a third of the name) refuses many of them: a Wow service's own
// Spring properties in their environment form (WOW_MONGO_ENABLED,
// WOW_REDIS_ENABLED, WOW_KAFKA_ENABLED — wow.mongo.enabled etc. of the Wow
// framework) and the service links of a Service named wow-ingest or
// wow-metrics (WOW_INGEST_PORT, WOW_METRICS_PORT). A pod whose environment
// holds one of them (a ConfigMap shared with the Wow service through
// envFrom, a Service in the namespace) does not start.
func TestEnvLeavesOtherProgramsWowVariablesAlone(t *testing.T) {
	for _, v := range []string{
		"WOW_MONGO_ENABLED=false",                // Wow: wow.mongo.enabled
		"WOW_REDIS_ENABLED=false",                // Wow: wow.redis.enabled
		"WOW_KAFKA_ENABLED=true",                 // Wow: wow.kafka.enabled
		"WOW_INGEST_PORT=tcp://10.0.0.7:9465",    // service link of a Service named wow-ingest
		"WOW_METRICS_PORT=tcp://10.0.0.8:9464",   // service link of a Service named wow-metrics
		"WOW_SERVICE_PORT=8080",                  // service link of a Service named wow-service
		"WOW_KAFKA_BOOTSTRAPSERVERS=k:9092",      // Wow's own, Spring's form of wow.kafka.bootstrap-servers
		"WOW_INGEST_PORT_9465_TCP_ADDR=10.0.0.7", // service link
	} {
		if _, err := config.Parse([]byte(minimalYAML), "test.yaml", testRegistry(), []string{v}); err != nil {
			t.Errorf("%s, not one of wowd's variables, is refused:\n%v", v, err)
		}
	}
}

// TestHandlerTextKeysKeepTheirText (found by review): --set values are
// typed by the key they set, and a handler's text keys (a string, a map of
// strings such as headers) take the text written, from --set and from the
// file alike: YAML alone reads 42 and true as a number and a boolean, which
// the handler's strict decoding refused (--set has no quotes to make them
// strings), and 0012345 as the number 12345. The refusal also quoted the
// value, though a header or a token may be a secret.
func TestHandlerTextKeysKeepTheirText(t *testing.T) {
	c, _, err := config.ParseSources([]byte(minimalYAML+"        token: 0012345\n"), "wowd.yaml", testRegistry(), config.Sources{Set: []string{
		"wow.dispatchers.all.handler.headers.X-Tenant=42",
		"wow.dispatchers.all.handler.headers.X-Flag=true",
		"wow.dispatchers.all.handler.headers.X-Version=1.10",
	}})
	if err != nil {
		if strings.Contains(err.Error(), "0012345") || strings.Contains(err.Error(), "12345") {
			t.Errorf("the error quotes a secret value:\n%v", err)
		}
		t.Fatalf("text values refused:\n%v", err)
	}
	h := c.Dispatchers["all"].Handler.Decoded.(*httpConfig)
	want := map[string]string{"X-Tenant": "42", "X-Flag": "true", "X-Version": "1.10"}
	for k, v := range want {
		if h.Headers[k] != v {
			t.Errorf("headers.%s = %q, want %q", k, h.Headers[k], v)
		}
	}
	if h.Token != "0012345" {
		t.Errorf("token = %q, want the text written, 0012345", h.Token)
	}
	// A key that is not text is still typed by YAML: a number for a
	// duration is refused as before.
	if _, _, err := config.ParseSources([]byte(minimalYAML+"        request-timeout: 10\n"), "wowd.yaml", testRegistry(), config.Sources{}); err == nil {
		t.Error("request-timeout: 10 (no unit) accepted")
	}
}

type pinConfig struct {
	Pin int `config:"pin" secret:"true" desc:"A secret number."`
}

// A handler key marked secret is never quoted in an error, whatever its
// type: a secret number written as text is refused without its value.
func TestSecretHandlerValueIsNotQuotedInErrors(t *testing.T) {
	reg := testRegistry()
	reg.Register(handler.Spec{Name: "pin", New: newNothing, Config: func() any { return &pinConfig{} }})
	yaml := strings.Replace(minimalYAML, "type: http\n        url: http://127.0.0.1:8080/wow", "type: pin\n        pin: s3cr3t-code", 1)
	_, _, err := config.ParseSources([]byte(yaml), "wowd.yaml", reg, config.Sources{})
	if err == nil || !strings.Contains(err.Error(), "wow.dispatchers.all.handler.pin") {
		t.Fatalf("want an error naming the pin key, got %v", err)
	}
	if strings.Contains(err.Error(), "s3cr3t-code") {
		t.Errorf("the error quotes the secret:\n%v", err)
	}
}

// The topics a dispatcher writes for a topic it consumes must fit Kafka's
// 249 characters as its source topics do: a context alias that makes the
// command topic 249 long makes its event topic's dead-letter topic (.dlq)
// and parked topic (.parked) longer, and their writes would fail at run
// time, holding the partition. Raised by review.
func TestDerivedTopicsMustFitKafkasLimit(t *testing.T) {
	alias := strings.Repeat("a", 249-len("wow.")-len(".cart.command"))
	doc := func(extra string) string {
		return `
wow:
  service: audit
  kafka:
    bootstrap-servers: [localhost:9092]
  contexts:
    shop:
      alias: ` + alias + `
      aggregates: [cart]
  dispatchers:
    all:
      topics: [event]
` + extra + `      handler:
        type: discard
`
	}
	for _, tc := range []struct{ extra, want string }{
		{"", "wow.dispatchers.all.dead-letter.topic: the dead letters of wow." + alias + ".cart.event would go to"},
		{"      dead-letter:\n        topic: dl\n", "wow.dispatchers.all.on-failure: the parked messages of wow." + alias + ".cart.event would go to"},
	} {
		_, err := config.Parse([]byte(doc(tc.extra)), "test.yaml", testRegistry(), nil)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("a command topic of 249 characters: got %v, want an error containing %q", err, tc.want)
		}
	}
}

// With dead letters off nothing is written to the dead-letter topic, so its
// name's length is not checked (a configuration that loaded before the
// check still loads). Raised by review.
func TestALongDeadLetterTopicIsFineWithDeadLettersOff(t *testing.T) {
	alias := strings.Repeat("a", 249-len("wow.")-len(".cart.command"))
	doc := `
wow:
  service: audit
  kafka:
    bootstrap-servers: [localhost:9092]
  contexts:
    shop:
      alias: ` + alias + `
      aggregates: [cart]
  dispatchers:
    all:
      topics: [event]
      dead-letter:
        enabled: false
      handler:
        type: discard
`
	if _, err := config.Parse([]byte(doc), "test.yaml", testRegistry(), nil); err != nil {
		t.Errorf("dead letters off: %v", err)
	}
}
