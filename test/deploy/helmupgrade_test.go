package deploy

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// oldStyleValues removes the chart's example the only way the chart of
// before 0365d7b allowed (Helm merges a user's maps into the chart's
// defaults, so a null was the way to drop a default entry): the pattern
// the repository's own autoscaling-values.yaml used until today.
const oldStyleValues = `
wow:
  service: orders
  contexts:
    example-service: null     # the chart's example, removed
    order-service:
      alias: order
      aggregates: [order]
  dispatchers:
    log-everything: null      # the chart's example, removed
    projector:
      topics: [event]
      handler: {type: log}
`

// TestHelmValuesThatNulledTheOldExampleStillGiveAValidConfig: an existing
// release whose values null out the chart's example (example-service,
// log-everything) rendered a configuration with only its own context and
// dispatcher. Since the example moved to values "example", the chart's
// defaults have no such keys, Helm leaves the nulls in, and the ConfigMap
// holds "example-service: null" and "log-everything: null": wowd refuses
// the configuration (a context without aggregates, a dispatcher without
// topics or handler) and the upgraded pods do not start.
func TestHelmValuesThatNulledTheOldExampleStillGiveAValidConfig(t *testing.T) {
	dir := t.TempDir()
	values := filepath.Join(dir, "my-values.yaml")
	if err := os.WriteFile(values, []byte(oldStyleValues), 0o644); err != nil {
		t.Fatal(err)
	}
	objs := renderChart(t, "-f", values)
	cfg := get(t, objs["ConfigMap/wowd"], "data", "wowd.yaml").(string)
	for _, name := range []string{"example-service", "log-everything"} {
		if strings.Contains(cfg, name) {
			t.Errorf("the ConfigMap names %s, which the values removed:\n%s", name, cfg)
		}
	}
	cfgFile := filepath.Join(dir, "wowd.yaml")
	if err := os.WriteFile(cfgFile, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	validateConfig(t, cfgFile)
}

// TestHelmValuesThatNulledTheOldExampleRenderWithAutoscaling: the same values
// with autoscaling on made the chart fail to render at all (helm template
// and helm upgrade): wowd.receivers ranges over the contexts and
// dispatchers and evaluates .contexts of the null dispatcher.
func TestHelmValuesThatNulledTheOldExampleRenderWithAutoscaling(t *testing.T) {
	values := filepath.Join(t.TempDir(), "my-values.yaml")
	if err := os.WriteFile(values, []byte(oldStyleValues), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := helmTemplate(t, "-f", values, "--set", "autoscaling.enabled=true", "--set", "autoscaling.partitions=6"); err != nil {
		t.Fatalf("values that rendered before the example moved no longer render:\n%v", err)
	}
}
