package deploy

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestHelmIngest: the chart's default configuration keeps ingest off; the
// chart README's way of turning it on (a listener of its own, a token file
// from a Secret volume) renders a configuration wowd accepts; and turning
// it on over the default metrics listener, which is on all interfaces, is
// refused by wowd config validate, naming the key to set.
func TestHelmIngest(t *testing.T) {
	objs := renderChart(t)
	data := get(t, objs["ConfigMap/wowd"], "data", "wowd.yaml").(string)
	if strings.Contains(data, "ingest") {
		t.Errorf("the default configuration mentions ingest:\n%s", data)
	}

	objs = renderChart(t, "-f", path("test/deploy/testdata/ingest-values.yaml"))
	data = get(t, objs["ConfigMap/wowd"], "data", "wowd.yaml").(string)
	cfgFile := filepath.Join(t.TempDir(), "wowd.yaml")
	if err := os.WriteFile(cfgFile, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
	validateConfig(t, cfgFile)
	c := get(t, objs["Deployment"], "spec", "template", "spec", "containers", 0)
	mounted := false
	mounts, _ := get(t, c, "volumeMounts").([]any)
	for _, m := range mounts {
		mm, _ := m.(map[string]any)
		mounted = mounted || mm["mountPath"] == "/run/secrets/wowd-ingest"
	}
	if !mounted {
		t.Errorf("the token's Secret volume is not mounted: %v", mounts)
	}

	objs = renderChart(t, "--set", "wow.ingest.enabled=true")
	data = get(t, objs["ConfigMap/wowd"], "data", "wowd.yaml").(string)
	if err := os.WriteFile(cfgFile, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(wowdBinary(t), "config", "validate", "--config", cfgFile).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "wow.ingest.listen: required") {
		t.Errorf("ingest on the all-interfaces metrics listener: wowd config validate: %v\n%s", err, out)
	}
}
