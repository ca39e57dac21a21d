package deploy

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"
)

// helmVersion is the Helm the tests build from the Go module proxy.
const helmVersion = "v3.22.0"

var (
	helmOnce sync.Once
	helmPath string
	helmErr  error
)

// helm returns a helm binary: $WOWD_HELM, else .cache/bin/helm when it is
// helmVersion, else one built there with `go install` (a few minutes, once
// per machine). Without one the test skips (fails with CI=true).
func helm(t *testing.T) string {
	t.Helper()
	helmOnce.Do(func() {
		if p := os.Getenv("WOWD_HELM"); p != "" {
			helmPath = p
			return
		}
		bin := path(".cache/bin")
		p := filepath.Join(bin, "helm")
		// go version -m names the module version the binary was built from
		// (helm version does not: go install sets no ldflags).
		if out, err := exec.Command("go", "version", "-m", p).Output(); err == nil &&
			regexp.MustCompile(`(?m)^\s+mod\s+helm\.sh/helm/v3\s+`+regexp.QuoteMeta(helmVersion)+`\s`).Match(out) {
			helmPath = p
			return
		}
		began := time.Now()
		cmd := exec.Command("go", "install", "helm.sh/helm/v3/cmd/helm@"+helmVersion)
		cmd.Env = append(os.Environ(), "GOBIN="+bin, "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			helmErr = errors.New("go install helm.sh/helm/v3/cmd/helm@" + helmVersion + ": " + err.Error() + "\n" + tail(out, 2000))
			return
		}
		t.Logf("built helm %s into .cache/bin in %s", helmVersion, time.Since(began).Round(time.Second))
		helmPath = p
	})
	if helmErr != nil {
		if inCI() {
			t.Fatal(helmErr)
		}
		t.Skipf("SKIP: no helm: %v", helmErr)
	}
	return helmPath
}

const chart = "deploy/helm/wowd"

// renderChart runs helm template with extra arguments and returns the
// rendered objects by kind (and name for ConfigMaps).
func renderChart(t *testing.T, args ...string) map[string]map[string]any {
	t.Helper()
	out, err := helmTemplate(t, args...)
	if err != nil {
		t.Fatalf("helm template %v: %v", args, err)
	}
	objs := map[string]map[string]any{}
	dec := yaml.NewDecoder(bytes.NewReader(out))
	for {
		var o map[string]any
		if err := dec.Decode(&o); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatalf("rendered chart: %v", err)
		}
		if o == nil {
			continue
		}
		key := o["kind"].(string)
		if key == "ConfigMap" {
			key += "/" + o["metadata"].(map[string]any)["name"].(string)
		}
		if _, dup := objs[key]; dup {
			t.Fatalf("two objects %s", key)
		}
		objs[key] = o
	}
	return objs
}

func helmTemplate(t *testing.T, args ...string) ([]byte, error) {
	t.Helper()
	cmd := exec.Command(helm(t), append([]string{"template", "wowd", path(chart)}, args...)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, errors.New(err.Error() + ": " + stderr.String())
	}
	return out, nil
}

// get walks a decoded YAML object: get(o, "spec", "template", 0, ...).
func get(t *testing.T, v any, keys ...any) any {
	t.Helper()
	for _, k := range keys {
		switch k := k.(type) {
		case string:
			m, ok := v.(map[string]any)
			if !ok {
				t.Fatalf("%v: not a mapping at %q", keys, k)
			}
			v = m[k]
		case int:
			l, ok := v.([]any)
			if !ok || k >= len(l) {
				t.Fatalf("%v: no item %d", keys, k)
			}
			v = l[k]
		}
	}
	return v
}

// normalize turns YAML-decoded values into JSON's types, so that trees
// decoded by different parsers compare equal.
func normalize(t *testing.T, v any) any {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	var out any
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	return out
}

func TestHelmLint(t *testing.T) {
	h := helm(t)
	for _, args := range [][]string{
		{"lint", "--strict", path(chart)},
		{"lint", "--strict", path(chart), "--set", "serviceMonitor.enabled=true,prometheusRule.enabled=true,grafanaDashboard.enabled=true,replicaCount=3"},
	} {
		if out, err := exec.Command(h, args...).CombinedOutput(); err != nil {
			t.Errorf("helm %v: %v\n%s", args, err, out)
		}
	}
}

// TestHelmDefaults renders the chart with its default values.
func TestHelmDefaults(t *testing.T) {
	objs := renderChart(t)
	for _, k := range []string{"Deployment", "Service", "ServiceAccount", "PodDisruptionBudget", "ConfigMap/wowd"} {
		if objs[k] == nil {
			t.Errorf("no %s rendered", k)
		}
	}
	for _, k := range []string{"ServiceMonitor", "PrometheusRule", "ConfigMap/wowd-dashboard"} {
		if objs[k] != nil {
			t.Errorf("%s rendered though disabled by default", k)
		}
	}
	if t.Failed() {
		t.FailNow()
	}

	// The ConfigMap holds the values' wow tree verbatim, with the example's
	// contexts and dispatchers (the values set none), and it is a valid
	// configuration.
	var values map[string]any
	readYAML(t, path(chart+"/values.yaml"), &values)
	wow := values["wow"].(map[string]any)
	example := values["example"].(map[string]any)
	if wow["contexts"] != nil || wow["dispatchers"] != nil {
		t.Fatal("values.yaml sets wow.contexts or wow.dispatchers: they would be merged into every user's configuration")
	}
	wow["contexts"], wow["dispatchers"] = example["contexts"], example["dispatchers"]
	data := get(t, objs["ConfigMap/wowd"], "data", "wowd.yaml").(string)
	var rendered map[string]any
	if err := yaml.Unmarshal([]byte(data), &rendered); err != nil {
		t.Fatalf("ConfigMap wowd.yaml: %v", err)
	}
	if len(rendered) != 1 || !reflect.DeepEqual(normalize(t, rendered["wow"]), normalize(t, values["wow"])) {
		t.Errorf("ConfigMap wowd.yaml is not the values' wow tree with the example:\n%s", data)
	}
	cfgFile := filepath.Join(t.TempDir(), "wowd.yaml")
	if err := os.WriteFile(cfgFile, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
	validateConfig(t, cfgFile)
	var wc wowConfig
	if err := yaml.Unmarshal([]byte(data), &wc); err != nil {
		t.Fatal(err)
	}
	port, _ := strconv.Atoi(wc.metricsPort(t))

	dep := objs["Deployment"]
	pod := get(t, dep, "spec", "template", "spec")
	c := get(t, pod, "containers", 0)

	// The configuration is mounted where wowd reads it.
	args, _ := get(t, c, "args").([]any)
	if len(args) < 3 || args[0] != "run" || args[1] != "--config" || args[2] != "/etc/wowd/wowd.yaml" {
		t.Errorf("container args %v: want run --config /etc/wowd/wowd.yaml", args)
	}
	if get(t, c, "volumeMounts", 0, "mountPath") != "/etc/wowd" || get(t, pod, "volumes", 0, "configMap", "name") != "wowd" {
		t.Error("the ConfigMap is not mounted at /etc/wowd")
	}

	// Probes on the metrics port.
	if get(t, c, "ports", 0, "name") != "metrics" || get(t, c, "ports", 0, "containerPort") != port {
		t.Errorf("container port %v: want metrics %d (wow.metrics.listen)", get(t, c, "ports"), port)
	}
	if get(t, objs["Service"], "spec", "ports", 0, "port") != port {
		t.Errorf("service port: want %d", port)
	}
	for probe, p := range map[string]string{"livenessProbe": "/healthz", "readinessProbe": "/readyz"} {
		if get(t, c, probe, "httpGet", "path") != p || get(t, c, probe, "httpGet", "port") != "metrics" {
			t.Errorf("%s: %v, want GET %s on port metrics", probe, get(t, c, probe), p)
		}
	}

	// A restrictive security context.
	sc := get(t, c, "securityContext")
	for k, want := range map[string]any{"runAsNonRoot": true, "readOnlyRootFilesystem": true, "allowPrivilegeEscalation": false, "privileged": false} {
		if got := get(t, sc, k); got != want {
			t.Errorf("container securityContext.%s = %v, want %v", k, got, want)
		}
	}
	if drop, _ := get(t, sc, "capabilities", "drop").([]any); len(drop) != 1 || drop[0] != "ALL" {
		t.Errorf("container capabilities.drop %v, want [ALL]", drop)
	}
	if get(t, pod, "securityContext", "runAsNonRoot") != true {
		t.Error("pod securityContext.runAsNonRoot is not true")
	}
	if uid, _ := get(t, pod, "securityContext", "runAsUser").(int); uid == 0 {
		t.Error("pod securityContext.runAsUser is root or unset")
	}

	// The grace period outlasts the shutdown timeout, the final commit's
	// 10 s past it and the leave.
	grace, _ := get(t, pod, "terminationGracePeriodSeconds").(int)
	if time.Duration(grace)*time.Second < wc.shutdownTimeout(t)+15*time.Second {
		t.Errorf("terminationGracePeriodSeconds %d is less than wow.shutdown.timeout %s + 15s", grace, wc.shutdownTimeout(t))
	}

	// Resources, and a new rollout when the configuration changes.
	if get(t, c, "resources", "requests") == nil || get(t, c, "resources", "limits", "memory") == nil {
		t.Error("no resource requests or memory limit")
	}
	sum, _ := get(t, dep, "spec", "template", "metadata", "annotations", "checksum/config").(string)
	if len(sum) != 64 {
		t.Error("no checksum/config annotation: a configuration change would not roll the pods")
	}
	other := renderChart(t, "--set", "wow.dispatch.max-in-flight=512")
	if get(t, other["Deployment"], "spec", "template", "metadata", "annotations", "checksum/config") == sum {
		t.Error("checksum/config does not change with the configuration")
	}
	if get(t, objs["PodDisruptionBudget"], "spec", "maxUnavailable") == nil {
		t.Error("the PodDisruptionBudget sets no maxUnavailable")
	}
}

// TestHelmOptionalObjects renders the ServiceMonitor, the PrometheusRule and
// the dashboard ConfigMap, and checks the chart's copies of the rules and
// the dashboard are the ones in deploy/.
func TestHelmOptionalObjects(t *testing.T) {
	for copy, orig := range map[string]string{
		chart + "/files/wowd.rules.yml":      "deploy/prometheus/wowd.rules.yml",
		chart + "/files/wowd-dashboard.json": "deploy/grafana/wowd-dashboard.json",
	} {
		a, err1 := os.ReadFile(path(copy))
		b, err2 := os.ReadFile(path(orig))
		if err1 != nil || err2 != nil || !bytes.Equal(a, b) {
			t.Errorf("%s differs from %s: copy it (cp %s %s)", copy, orig, orig, copy)
		}
	}
	objs := renderChart(t, "--set", "serviceMonitor.enabled=true,prometheusRule.enabled=true,grafanaDashboard.enabled=true",
		"--set", "wow.shutdown.timeout=1m30s")
	if get(t, objs["ServiceMonitor"], "spec", "endpoints", 0, "port") != "metrics" {
		t.Error("the ServiceMonitor does not scrape port metrics")
	}
	var rules map[string]any
	readYAML(t, path("deploy/prometheus/wowd.rules.yml"), &rules)
	if !reflect.DeepEqual(normalize(t, get(t, objs["PrometheusRule"], "spec")), normalize(t, rules)) {
		t.Error("the PrometheusRule's spec is not deploy/prometheus/wowd.rules.yml")
	}
	var dash, want any
	if err := json.Unmarshal([]byte(get(t, objs["ConfigMap/wowd-dashboard"], "data", "wowd-dashboard.json").(string)), &dash); err != nil {
		t.Fatalf("dashboard ConfigMap: %v", err)
	}
	b, _ := os.ReadFile(path("deploy/grafana/wowd-dashboard.json"))
	_ = json.Unmarshal(b, &want)
	if !reflect.DeepEqual(dash, want) {
		t.Error("the dashboard ConfigMap does not hold deploy/grafana/wowd-dashboard.json")
	}
	if get(t, objs["Deployment"], "spec", "template", "spec", "terminationGracePeriodSeconds") != 105 {
		t.Errorf("terminationGracePeriodSeconds for a 1m30s shutdown timeout: %v, want 105",
			get(t, objs["Deployment"], "spec", "template", "spec", "terminationGracePeriodSeconds"))
	}
}

// TestHelmRejects checks the values the chart refuses to render.
func TestHelmRejects(t *testing.T) {
	for _, c := range []struct {
		set, want string
	}{
		{"terminationGracePeriodSeconds=30", "must be at least wow.shutdown.timeout + 15 s"},
		// Above the timeout but short of the final commit's 10 s past
		// it and the leave: accepted before (found by review).
		{"terminationGracePeriodSeconds=39", "must be at least wow.shutdown.timeout + 15 s"},
		{"terminationGracePeriodSeconds=44", "must be at least wow.shutdown.timeout + 15 s"},
		{"wow.metrics.listen=127.0.0.1:9464", "loopback"},
		{"wow.metrics.listen=", "wow.metrics.listen must be set"},
	} {
		_, err := helmTemplate(t, "--set", c.set)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("helm template --set %s: %v, want an error saying %q", c.set, err, c.want)
		}
	}
}
