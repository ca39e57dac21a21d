package config_test

import (
	"bytes"
	"strings"
	"testing"

	"github.com/wowd/wowd/internal/config"
)

// `wowd config print` shows the consumer groups each dispatcher's
// receivers join: group-id leaves them out as a value (a default derived
// from the service, or an override that gets a suffix per context), and
// an operator resetting or inspecting offsets needs their names.
func TestConfigPrintNamesTheConsumerGroups(t *testing.T) {
	const doc = `
wow:
  service: carts
  kafka:
    bootstrap-servers: [127.0.0.1:9092]
  contexts:
    example-service:
      alias: example
      aggregates: [cart]
    billing:
      aggregates: [invoice]
  dispatchers:
    projection:
      contexts: [example-service]
      topics: [event]
      handler:
        type: discard
    audit:
      contexts: [example-service, billing]
      group-id: legacy-audit
      topics: [event]
      handler:
        type: discard
`
	reg := testRegistry()
	c, origins, err := config.ParseSources([]byte(doc), "test.yaml", reg, config.Sources{})
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := c.WriteOrigins(&out, reg, origins); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"projection: # consumer groups: carts.projection.example\n",
		"audit: # consumer groups: legacy-audit.example, legacy-audit.billing\n",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("config print lacks %q:\n%s", strings.TrimSpace(want), out.String())
		}
	}
}
