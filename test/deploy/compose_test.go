package deploy

import (
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/wowd/wowd/handler"
	"github.com/wowd/wowd/internal/config"
	"github.com/wowd/wowd/internal/daemon"
	_ "github.com/wowd/wowd/internal/handlers" // the built-in handler types, for config.Load
	"github.com/wowd/wowd/internal/proctest"
	"github.com/wowd/wowd/internal/testwait"
)

// composeFile is the part of a Compose file the test reads.
type composeFile struct {
	Name     string `yaml:"name"`
	Services map[string]struct {
		Image string `yaml:"image"`
		Build *struct {
			Context    string            `yaml:"context"`
			Dockerfile string            `yaml:"dockerfile"`
			Args       map[string]string `yaml:"args"`
		} `yaml:"build"`
		Command         any               `yaml:"command"`
		Entrypoint      any               `yaml:"entrypoint"`
		Environment     map[string]string `yaml:"environment"`
		Volumes         []string          `yaml:"volumes"`
		Ports           []string          `yaml:"ports"`
		DependsOn       any               `yaml:"depends_on"`
		StopGracePeriod string            `yaml:"stop_grace_period"`
	} `yaml:"services"`
	Volumes map[string]any `yaml:"volumes"`
}

// words flattens a Compose command or entrypoint (a string or a list).
func words(v any) []string {
	switch v := v.(type) {
	case string:
		return strings.Fields(v)
	case []any:
		var out []string
		for _, x := range v {
			out = append(out, strings.Fields(fmt.Sprint(x))...)
		}
		return out
	}
	return nil
}

// TestCompose checks deploy/compose without a Docker engine: the file
// parses, everything it builds or mounts exists, the services fit together
// (wowd's config, topics, ports, rules, dashboard), and the demo sink works.
func TestCompose(t *testing.T) {
	dir := path("deploy/compose")
	var c composeFile
	readYAML(t, filepath.Join(dir, "docker-compose.yml"), &c)
	for _, s := range []string{"kafka", "kafka-init", "wowd", "sink", "producer", "prometheus", "grafana"} {
		if _, ok := c.Services[s]; !ok {
			t.Errorf("docker-compose.yml has no service %s", s)
		}
	}
	if t.Failed() {
		t.FailNow()
	}

	// Builds and bind mounts refer to files that exist; ports stay on the
	// host's loopback.
	mounts := map[string]string{} // container path → host path
	for name, s := range c.Services {
		if s.Build != nil {
			ctx := filepath.Join(dir, s.Build.Context)
			if st, err := os.Stat(ctx); err != nil || !st.IsDir() {
				t.Errorf("service %s: build context %s does not exist", name, s.Build.Context)
			}
			if _, err := os.Stat(filepath.Join(ctx, s.Build.Dockerfile)); err != nil {
				t.Errorf("service %s: Dockerfile %s not in the build context", name, s.Build.Dockerfile)
			}
		} else if s.Image == "" {
			t.Errorf("service %s has neither image nor build", name)
		}
		for _, v := range s.Volumes {
			parts := strings.Split(v, ":")
			if len(parts) < 2 {
				t.Errorf("service %s: volume %q has no target", name, v)
				continue
			}
			src, dst := parts[0], parts[1]
			if !strings.HasPrefix(src, ".") && !strings.HasPrefix(src, "/") {
				if _, ok := c.Volumes[src]; !ok {
					t.Errorf("service %s: named volume %s is not declared", name, src)
				}
				continue
			}
			host := filepath.Join(dir, src)
			if _, err := os.Stat(host); err != nil {
				t.Errorf("service %s: mounts %s, which does not exist", name, src)
			}
			mounts[name+":"+dst] = host
		}
		for _, p := range s.Ports {
			if !strings.HasPrefix(p, "127.0.0.1:") {
				t.Errorf("service %s publishes %s beyond the host's loopback", name, p)
			}
		}
	}

	// wowd: built from the repository's Dockerfile, with ./wowd.yaml at the
	// image's configuration path, stopping within its grace period.
	w := c.Services["wowd"]
	if w.Build == nil || filepath.Clean(filepath.Join(dir, w.Build.Context)) != root || w.Build.Dockerfile != "Dockerfile" {
		t.Errorf("wowd is not built from the repository's Dockerfile: %+v", w.Build)
	}
	cfgFile := mounts["wowd:/etc/wowd/wowd.yaml"]
	if cfgFile == "" {
		t.Fatal("wowd has no configuration mounted at /etc/wowd/wowd.yaml")
	}
	validateConfig(t, cfgFile)
	var wc wowConfig
	readYAML(t, cfgFile, &wc)
	port := wc.metricsPort(t)
	if grace, err := time.ParseDuration(w.StopGracePeriod); err != nil || grace < wc.shutdownTimeout(t)+15*time.Second {
		t.Errorf("wowd's stop_grace_period %q must be at least wow.shutdown.timeout %s + 15s (the final commit's 10 s past it, the leave)", w.StopGracePeriod, wc.shutdownTimeout(t))
	}
	cfg, err := config.Load(cfgFile, handler.Default(), nil)
	if err != nil {
		t.Fatal(err)
	}

	// kafka-init creates every topic wowd consumes and their dead-letter
	// topics (wowd creates none); the producer writes to consumed topics.
	script := strings.Join(words(c.Services["kafka-init"].Command), " ")
	for _, topic := range daemon.Topics(cfg) {
		if !strings.Contains(script, topic+" ") && !strings.HasSuffix(script, topic) {
			t.Errorf("kafka-init does not create %s", topic)
		}
		for name, d := range cfg.Dispatchers {
			if d.DeadLetter.Enabled {
				dlq := strings.ReplaceAll(d.DeadLetter.Topic, "{topic}", topic)
				if !strings.Contains(script, dlq) {
					t.Errorf("kafka-init does not create %s, the dead-letter topic of dispatcher %s", dlq, name)
				}
			}
		}
	}
	produce := words(c.Services["producer"].Command)
	if i := slices.Index(produce, "-topics"); i < 0 || i+1 >= len(produce) {
		t.Errorf("producer command %v names no -topics", produce)
	} else {
		for _, topic := range strings.Split(produce[i+1], ",") {
			if !slices.Contains(daemon.Topics(cfg), topic) {
				t.Errorf("producer writes to %s, which wowd does not consume", topic)
			}
		}
	}
	for _, d := range cfg.Dispatchers {
		if d.Handler.Type == "http" && !strings.Contains(fmt.Sprint(d.Handler.Decoded), "//sink:8080/") {
			t.Errorf("wowd's http handler does not post to the sink service: %+v", d.Handler.Decoded)
		}
	}

	// Prometheus: scrapes wowd's metrics port and loads the rule file.
	promFile := mounts["prometheus:/etc/prometheus/prometheus.yml"]
	if promFile == "" {
		t.Fatal("prometheus has no /etc/prometheus/prometheus.yml mounted")
	}
	var prom struct {
		RuleFiles     []string `yaml:"rule_files"`
		ScrapeConfigs []struct {
			JobName       string `yaml:"job_name"`
			StaticConfigs []struct {
				Targets []string `yaml:"targets"`
			} `yaml:"static_configs"`
			DNSSDConfigs []struct {
				Names []string `yaml:"names"`
				Port  int      `yaml:"port"`
			} `yaml:"dns_sd_configs"`
		} `yaml:"scrape_configs"`
	}
	readYAML(t, promFile, &prom)
	scraped := false
	for _, sc := range prom.ScrapeConfigs {
		for _, st := range sc.StaticConfigs {
			scraped = scraped || slices.Contains(st.Targets, "wowd:"+port)
		}
		for _, sd := range sc.DNSSDConfigs {
			scraped = scraped || slices.Contains(sd.Names, "wowd") && strconv.Itoa(sd.Port) == port
		}
	}
	if !scraped {
		t.Errorf("prometheus.yml does not scrape wowd on port %s", port)
	}
	for _, rf := range prom.RuleFiles {
		host := mounts["prometheus:"+rf]
		if host == "" {
			t.Errorf("prometheus.yml loads %s, which is not mounted", rf)
		} else if filepath.Clean(host) != path("deploy/prometheus/wowd.rules.yml") {
			t.Errorf("%s is mounted from %s, not deploy/prometheus/wowd.rules.yml", rf, host)
		}
	}
	if len(prom.RuleFiles) == 0 {
		t.Error("prometheus.yml loads no rule files")
	}
	if pt, err := exec.LookPath("promtool"); err == nil {
		if out, err := exec.Command(pt, "check", "config", "--syntax-only", promFile).CombinedOutput(); err != nil {
			t.Errorf("promtool check config: %v\n%s", err, out)
		}
	}

	// Grafana: the dashboard and its provider are provisioned.
	if mounts["grafana:/var/lib/grafana/dashboards/wowd/wowd-dashboard.json"] != path("deploy/grafana/wowd-dashboard.json") {
		t.Error("grafana does not mount deploy/grafana/wowd-dashboard.json where the dashboard provider reads")
	}
	var provider struct {
		Providers []struct {
			Options struct {
				Path string `yaml:"path"`
			} `yaml:"options"`
		} `yaml:"providers"`
	}
	readYAML(t, path("deploy/grafana/provisioning/dashboards/wowd.yml"), &provider)
	if len(provider.Providers) != 1 || provider.Providers[0].Options.Path != "/var/lib/grafana/dashboards/wowd" {
		t.Errorf("dashboard provider: %+v", provider)
	}
	hasProvider, hasDatasource := false, false
	for k := range mounts {
		hasProvider = hasProvider || strings.HasPrefix(k, "grafana:/etc/grafana/provisioning/dashboards/")
		hasDatasource = hasDatasource || strings.HasPrefix(k, "grafana:/etc/grafana/provisioning/datasources/")
	}
	if !hasProvider || !hasDatasource {
		t.Error("grafana lacks the dashboard provider or the data source provisioning")
	}

	// The README tells the whole story.
	readme, err := os.ReadFile(filepath.Join(dir, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"docker compose up", "localhost:3000", "localhost:9090", "docker compose down"} {
		if !strings.Contains(string(readme), s) {
			t.Errorf("deploy/compose/README.md does not mention %q", s)
		}
	}
}

// TestComposeDemoSink builds the demo program and checks that its sink
// answers a request as wowd's http handler sends it.
func TestComposeDemoSink(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "demo")
	cmd := exec.Command("go", "build", "-trimpath", "-o", bin, "./deploy/compose/demo")
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0") // as wowdBinary builds: the same compiled packages
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build ./deploy/compose/demo: %v\n%s", err, out)
	}
	port := proctest.FreePort(t)
	start(t, "demo-sink", []string{bin, "sink", "-listen", fmt.Sprintf("127.0.0.1:%d", port), "-latency", "0", "-fail", "0", "-reject", "0"}, nil)
	base := fmt.Sprintf("http://127.0.0.1:%d", port)
	testwait.NoError(t, 10*time.Second, 200*time.Millisecond, "the demo sink", func() error { return httpOK(base + "/healthz") })
	req, _ := http.NewRequest(http.MethodPost, base+"/wow", strings.NewReader(`{"n":1}`))
	req.Header.Set("ce-specversion", "1.0")
	req.Header.Set("ce-type", "demo.cartChanged")
	req.Header.Set("ce-subject", "cart-1")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent {
		t.Errorf("POST /wow: %s, want 204", resp.Status)
	}
}
