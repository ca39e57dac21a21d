package deploy

import (
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"testing"

	"go.yaml.in/yaml/v3"
)

// readmeYAMLBlock returns the n-th ```yaml block of a Markdown file.
func readmeYAMLBlock(t *testing.T, file string, n int) string {
	t.Helper()
	b, err := os.ReadFile(path(file))
	if err != nil {
		t.Fatal(err)
	}
	blocks := regexp.MustCompile("(?s)```yaml\n(.*?)```").FindAllStringSubmatch(string(b), -1)
	if len(blocks) <= n {
		t.Fatalf("%s has %d yaml blocks, want block %d", file, len(blocks), n)
	}
	return blocks[n][1]
}

func sortedKeys(m map[string]any) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// TestHelmReadmeExampleGetsOnlyItsOwnDispatchers renders the chart with the
// values of its README's first example (the "my-values.yaml" that "sets at
// least the image and wow, wowd's configuration, which the chart writes
// verbatim to /etc/wowd/wowd.yaml") and checks the ConfigMap holds the
// dispatchers and contexts that example's wow names, and no others.
func TestHelmReadmeExampleGetsOnlyItsOwnDispatchers(t *testing.T) {
	example := readmeYAMLBlock(t, chart+"/README.md", 0)
	var values struct {
		Wow map[string]any `yaml:"wow"`
	}
	if err := yaml.Unmarshal([]byte(example), &values); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "my-values.yaml")
	if err := os.WriteFile(file, []byte(example), 0o644); err != nil {
		t.Fatal(err)
	}
	objs := renderChart(t, "-f", file)
	var rendered struct {
		Wow map[string]any `yaml:"wow"`
	}
	if err := yaml.Unmarshal([]byte(get(t, objs["ConfigMap/wowd"], "data", "wowd.yaml").(string)), &rendered); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"dispatchers", "contexts"} {
		want := sortedKeys(values.Wow[k].(map[string]any))
		got := sortedKeys(rendered.Wow[k].(map[string]any))
		if !sameStrings(got, want) {
			t.Errorf("wow.%s in the ConfigMap: %v; the README's my-values.yaml names %v", k, got, want)
		}
	}
}

// TestHelmOwnContextsReplaceTheExample: a user's wow.contexts (other names
// than the chart's example) is what wowd gets; the chart's example context
// is not consumed on top of it.
func TestHelmOwnContextsReplaceTheExample(t *testing.T) {
	file := filepath.Join(t.TempDir(), "my-values.yaml")
	const v = `
wow:
  service: orders
  contexts:
    order-service:
      alias: order
      aggregates: [order]
  dispatchers:
    order-projection:
      topics: [event]
      handler: {type: log}
`
	if err := os.WriteFile(file, []byte(v), 0o644); err != nil {
		t.Fatal(err)
	}
	objs := renderChart(t, "-f", file)
	var rendered struct {
		Wow struct {
			Contexts    map[string]any `yaml:"contexts"`
			Dispatchers map[string]any `yaml:"dispatchers"`
		} `yaml:"wow"`
	}
	if err := yaml.Unmarshal([]byte(get(t, objs["ConfigMap/wowd"], "data", "wowd.yaml").(string)), &rendered); err != nil {
		t.Fatal(err)
	}
	if got := sortedKeys(rendered.Wow.Contexts); !sameStrings(got, []string{"order-service"}) {
		t.Errorf("wow.contexts in the ConfigMap: %v, want [order-service]: the chart's example context is consumed too", got)
	}
	if got := sortedKeys(rendered.Wow.Dispatchers); !sameStrings(got, []string{"order-projection"}) {
		t.Errorf("wow.dispatchers in the ConfigMap: %v, want [order-projection]: the chart's example dispatcher runs too", got)
	}
}

func sameStrings(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestHelmMetadataWithoutContextsStarts: values.yaml and the chart's README offer
// wow.metadata (a Wow wow-metadata.json) instead of wow.contexts. A
// deployment that does so, with contexts of its own, must get a
// configuration wowd accepts; the chart's example context merged into it
// makes wowd refuse to start ("disagrees with wow.metadata").
func TestHelmMetadataWithoutContextsStarts(t *testing.T) {
	dir := t.TempDir()
	const meta = `{"contexts": {"order-service": {"alias": "order", "aggregates": {"order": {}}}}}`
	const v = `
wow:
  service: orders
  metadata: wow-metadata.json
  dispatchers:
    order-projection:
      topics: [event]
      handler: {type: log}
`
	values := filepath.Join(dir, "my-values.yaml")
	if err := os.WriteFile(values, []byte(v), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "wow-metadata.json"), []byte(meta), 0o644); err != nil {
		t.Fatal(err)
	}
	objs := renderChart(t, "-f", values)
	cfgFile := filepath.Join(dir, "wowd.yaml") // next to the metadata, as /etc/wowd would hold both
	if err := os.WriteFile(cfgFile, []byte(get(t, objs["ConfigMap/wowd"], "data", "wowd.yaml").(string)), 0o644); err != nil {
		t.Fatal(err)
	}
	validateConfig(t, cfgFile)
}
