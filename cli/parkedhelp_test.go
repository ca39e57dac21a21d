package cli

import (
	"regexp"
	"strings"
	"testing"
)

// TestParkedHelpSaysAggregateIsRequired: show, redrive, skip and
// discard refuse to run without --aggregate ("--aggregate is required",
// exit 2), yet their help lists it as a plain "aggregate ID", where the
// other flags they require (--dispatcher) and rewind's (--dispatcher,
// --to) say "(required)".
func TestParkedHelpSaysAggregateIsRequired(t *testing.T) {
	cfg := writeConfig(t, `wow:
  service: carts
  kafka:
    bootstrap-servers: [127.0.0.1:1]
  contexts:
    example-service:
      alias: example
      aggregates: [cart]
  dispatchers:
    projection:
      topics: [event]
      handler: {type: discard}
`)
	line := regexp.MustCompile(`(?m)^\s+--aggregate string\s+(.*)$`)
	for _, verb := range []string{"show", "redrive", "skip", "discard"} {
		code, _, errOut := wowd(t, "parked", verb, "--config", cfg, "--dispatcher", "projection")
		if code != ExitConfig || !strings.Contains(errOut, "--aggregate is required") {
			t.Fatalf("parked %s without --aggregate: exit %d, %s", verb, code, errOut)
		}
		_, help, _ := wowd(t, "parked", verb, "--help")
		m := line.FindStringSubmatch(help)
		if m == nil {
			t.Fatalf("parked %s --help lists no --aggregate:\n%s", verb, help)
		}
		if !strings.Contains(m[1], "required") {
			t.Errorf("wowd parked %s --help: --aggregate %q does not say it is required, as --dispatcher does", verb, strings.TrimSpace(m[1]))
		}
	}
}
