package config_test

import (
	"slices"
	"strings"
	"testing"
)

func TestTracing(t *testing.T) {
	const head = "wow:\n  service: s\n  kafka:\n    bootstrap-servers: [k:9092]\n  contexts:\n    c:\n      aggregates: [a]\n" +
		"  dispatchers:\n    d:\n      topics: [event]\n      handler: {type: log}\n"
	c := mustParse(t, head)
	if c.Tracing.Enabled || c.Tracing.Exporter != "" || c.Tracing.Endpoint != "" || c.Tracing.SamplingRatio != "" {
		t.Errorf("defaults: %+v; want off, the rest left to OTEL_*", c.Tracing)
	}
	c = mustParse(t, head+"  tracing:\n    enabled: true\n    exporter: otlp-grpc\n    endpoint: https://collector:4317\n"+
		"    sampling-ratio: \"0.25\"\n    resource-attributes: [deployment.environment.name=prod, team=carts]\n")
	if !c.Tracing.Enabled || c.Tracing.Exporter != "otlp-grpc" || c.Tracing.Endpoint != "https://collector:4317" ||
		c.Tracing.SamplingRatio != "0.25" || !slices.Equal(c.Tracing.ResourceAttributes, []string{"deployment.environment.name=prod", "team=carts"}) {
		t.Errorf("set: %+v", c.Tracing)
	}
	c = mustParse(t, head, "WOW_TRACING_ENABLED=true", "WOW_TRACING_SAMPLING_RATIO=0.5", "WOW_TRACING_RESOURCE_ATTRIBUTES=a=1,b=2")
	if !c.Tracing.Enabled || c.Tracing.SamplingRatio != "0.5" || !slices.Equal(c.Tracing.ResourceAttributes, []string{"a=1", "b=2"}) {
		t.Errorf("from the environment: %+v", c.Tracing)
	}

	// Every mistake is reported at once, each under its key, enabled or not.
	errs := parseErrors(t, head+"  tracing:\n    exporter: zipkin\n    endpoint: collector:4318\n"+
		"    sampling-ratio: \"1.5\"\n    resource-attributes: [ok=1, nokey, =v]\n")
	for _, w := range []string{
		`wow.tracing.exporter: "zipkin" is not one of otlp-http, otlp-grpc`,
		`wow.tracing.endpoint: "collector:4318": want the collector's base URL`,
		`wow.tracing.sampling-ratio: "1.5" is not a number from 0 to 1`,
		`wow.tracing.resource-attributes[1]: "nokey" is not key=value`,
		`wow.tracing.resource-attributes[2]: "=v" is not key=value`,
	} {
		if !strings.Contains(errs.Error(), w) {
			t.Errorf("errors:\n%s\nwant %q", errs, w)
		}
	}
	if len(errs.List) != 5 {
		t.Errorf("%d errors, want 5:\n%s", len(errs.List), errs)
	}
	errs = parseErrors(t, head+"  tracing:\n    endpoint: http://\n    sampling-ratio: half\n")
	if !strings.Contains(errs.Error(), `wow.tracing.endpoint: "http://" has no host`) ||
		!strings.Contains(errs.Error(), `wow.tracing.sampling-ratio: "half" is not a number from 0 to 1`) {
		t.Errorf("errors:\n%s", errs)
	}
}
