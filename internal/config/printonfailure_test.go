package config_test

import (
	"bytes"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/wowd/wowd/internal/config"
)

// Found by review. DESIGN.md: "`wowd config print` — the effective configuration with
// defaults, secrets masked", and on-failure (park | dead-letter) is one of
// the keys it fixes. The effective failure policy of a dispatcher that does
// not set on-failure is park (format wow) or dead-letter (format raw), and
// it decides whether a failing aggregate stops (parks) or moves on: an
// operator checking with config print must see it. WriteYAML is what
// `wowd config print --plain` prints (WriteOrigins the same with comments).
func TestConfigPrintShowsTheEffectiveOnFailure(t *testing.T) {
	const doc = `
wow:
  service: cart-projector
  kafka:
    bootstrap-servers: [127.0.0.1:9092]
  contexts:
    example:
      aggregates: [cart]
  dispatchers:
    projection:
      topics: [event]
      handler:
        type: discard
    raw-copy:
      topics: [event]
      format: raw
      handler:
        type: discard
`
	reg := testRegistry()
	c, err := config.Parse([]byte(doc), "test.yaml", reg, nil)
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := c.WriteYAML(&out, reg); err != nil {
		t.Fatal(err)
	}
	var printed struct {
		Wow struct {
			Dispatchers map[string]map[string]any `yaml:"dispatchers"`
		} `yaml:"wow"`
	}
	if err := yaml.Unmarshal(out.Bytes(), &printed); err != nil {
		t.Fatalf("config print output does not parse: %v\n%s", err, out.String())
	}
	for name, want := range map[string]string{"projection": "park", "raw-copy": "dead-letter"} {
		if got := c.Dispatchers[name].FailurePolicy(); got != want {
			t.Fatalf("test premise: effective on-failure of %s is %q, want %q", name, got, want)
		}
		got, ok := printed.Wow.Dispatchers[name]["on-failure"]
		if !ok {
			t.Errorf("config print leaves out wow.dispatchers.%s.on-failure, whose effective value is %s", name, want)
			continue
		}
		if got != want {
			t.Errorf("config print shows wow.dispatchers.%s.on-failure: %v, effective value %s", name, got, want)
		}
	}
	if t.Failed() {
		t.Logf("printed:\n%s", out.String())
	}
}
