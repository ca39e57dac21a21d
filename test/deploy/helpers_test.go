package deploy

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/wowd/wowd/internal/proctest"
)

func TestMain(m *testing.M) {
	code := m.Run()
	wowd.Remove()
	os.Exit(code)
}

// root is the repository root (the directory of go.mod).
var root = func() string {
	dir, err := proctest.RepoRoot()
	if err != nil {
		panic(err)
	}
	return dir
}()

// path returns the absolute path of a file given relative to the repository.
func path(rel string) string { return filepath.Join(root, filepath.FromSlash(rel)) }

// inCI reports whether the suite runs in CI (CI=true), where a missing tool
// is a failure rather than a skip.
func inCI() bool { return os.Getenv("CI") == "true" }

// needTool returns the path of an executable, or skips the test (fails it in
// CI) saying how to get it.
func needTool(t *testing.T, name, how string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err == nil {
		return p
	}
	if inCI() {
		t.Fatalf("%s is required in CI (CI=true) but not on PATH: %s", name, how)
	}
	t.Skipf("SKIP: %s not on PATH (%s); CI=true makes this a failure", name, how)
	return ""
}

// wowd is cmd/wowd built with the flags of `make build` (the version
// aside), so the Dockerfile test's replay of it finds every package compiled
// already.
var wowd = &proctest.Binary{Pkg: "./cmd/wowd", Flags: []string{"-trimpath"}, Env: []string{"CGO_ENABLED=0"}}

// wowdBinary builds cmd/wowd once per test process and returns its path.
func wowdBinary(t *testing.T) string {
	t.Helper()
	return wowd.Path(t)
}

// validateConfig runs `wowd config validate` on a configuration file.
func validateConfig(t *testing.T, file string) {
	t.Helper()
	// --no-files: the secrets it names are mounted in the container.
	out, err := exec.Command(wowdBinary(t), "config", "validate", "--no-files", "--config", file).CombinedOutput()
	if err != nil {
		t.Errorf("wowd config validate --config %s: %v\n%s", file, err, out)
	}
}

// readYAML decodes a YAML file into v.
func readYAML(t *testing.T, file string, v any) {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(b, v); err != nil {
		t.Fatalf("%s: %v", file, err)
	}
}

// wowConfig is the part of a wowd configuration the deployment tests read.
type wowConfig struct {
	Wow struct {
		Service string `yaml:"service"`
		Metrics struct {
			Listen string `yaml:"listen"`
		} `yaml:"metrics"`
		Shutdown struct {
			Timeout string `yaml:"timeout"`
		} `yaml:"shutdown"`
	} `yaml:"wow"`
}

// shutdownTimeout returns wow.shutdown.timeout, 30s when unset.
func (c wowConfig) shutdownTimeout(t *testing.T) time.Duration {
	t.Helper()
	if c.Wow.Shutdown.Timeout == "" {
		return 30 * time.Second
	}
	d, err := time.ParseDuration(c.Wow.Shutdown.Timeout)
	if err != nil {
		t.Fatalf("wow.shutdown.timeout: %v", err)
	}
	return d
}

// metricsPort returns the port of wow.metrics.listen and fails unless it
// listens on every interface (as it must in a container).
func (c wowConfig) metricsPort(t *testing.T) string {
	t.Helper()
	host, port, err := net.SplitHostPort(c.Wow.Metrics.Listen)
	if err != nil {
		t.Fatalf("wow.metrics.listen %q: %v", c.Wow.Metrics.Listen, err)
	}
	if host != "" && host != "0.0.0.0" && host != "::" {
		t.Errorf("wow.metrics.listen %q: a container must listen on every interface (0.0.0.0)", c.Wow.Metrics.Listen)
	}
	return port
}

// process is a child process whose output goes to a file, ended by the test.
type process struct {
	name string
	cmd  *exec.Cmd
	log  string
	done chan struct{}
	err  error
}

// start runs a command; t.Cleanup ends it (SIGTERM, then SIGKILL) and shows
// its log when the test failed.
func start(t *testing.T, name string, args []string, env []string) *process {
	t.Helper()
	p := &process{name: name, log: filepath.Join(t.TempDir(), name+".log"), done: make(chan struct{})}
	f, err := os.Create(p.log)
	if err != nil {
		t.Fatal(err)
	}
	p.cmd = exec.Command(args[0], args[1:]...)
	p.cmd.Stdout, p.cmd.Stderr = f, f
	p.cmd.Env = append(os.Environ(), env...)
	if err := p.cmd.Start(); err != nil {
		f.Close()
		t.Fatalf("starting %s: %v", name, err)
	}
	go func() {
		p.err = p.cmd.Wait()
		f.Close()
		close(p.done)
	}()
	t.Cleanup(func() {
		p.stop(10 * time.Second)
		if t.Failed() {
			b, _ := os.ReadFile(p.log)
			t.Logf("%s log (last 4 KiB):\n%s", name, tail(b, 4096))
		}
	})
	return p
}

// stop sends SIGTERM and waits up to grace before killing.
func (p *process) stop(grace time.Duration) {
	select {
	case <-p.done:
		return
	default:
	}
	_ = p.cmd.Process.Signal(os.Interrupt)
	select {
	case <-p.done:
	case <-time.After(grace):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

// kill ends the process at once (SIGKILL) and waits for it.
func (p *process) kill() {
	_ = p.cmd.Process.Kill()
	<-p.done
}

// exited reports whether the process has ended.
func (p *process) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

func tail(b []byte, n int) string {
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}

// httpOK returns nil when GET url answers 200.
func httpOK(url string) error {
	c := http.Client{Timeout: 2 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return nil
}

var metricName = regexp.MustCompile(`wowd_[a-z0-9_]+`)

// referencedMetrics returns the wowd_ metric names in exprs, sorted.
func referencedMetrics(exprs []string) []string {
	set := map[string]bool{}
	for _, e := range exprs {
		for _, m := range metricName.FindAllString(e, -1) {
			set[m] = true
		}
	}
	names := make([]string, 0, len(set))
	for n := range set {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// dashboardExprs returns the PromQL of the dashboard: every target's expr
// and every template variable's query.
func dashboardExprs(t *testing.T) []string {
	t.Helper()
	var d any
	b, err := os.ReadFile(path("deploy/grafana/wowd-dashboard.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("deploy/grafana/wowd-dashboard.json: %v", err)
	}
	var out []string
	var walk func(v any, key string)
	walk = func(v any, key string) {
		switch v := v.(type) {
		case map[string]any:
			for k, x := range v {
				walk(x, k)
			}
		case []any:
			for _, x := range v {
				walk(x, key)
			}
		case string:
			if key == "expr" || key == "query" || key == "definition" {
				out = append(out, v)
			}
		}
	}
	walk(d, "")
	return out
}

// ruleFile is a Prometheus rule file.
type ruleFile struct {
	Groups []struct {
		Name  string `yaml:"name"`
		Rules []struct {
			Alert       string            `yaml:"alert"`
			Record      string            `yaml:"record"`
			Expr        string            `yaml:"expr"`
			For         string            `yaml:"for"`
			Labels      map[string]string `yaml:"labels"`
			Annotations map[string]string `yaml:"annotations"`
		} `yaml:"rules"`
	} `yaml:"groups"`
}

func readRules(t *testing.T) ruleFile {
	t.Helper()
	var rf ruleFile
	readYAML(t, path("deploy/prometheus/wowd.rules.yml"), &rf)
	if len(rf.Groups) == 0 {
		t.Fatal("deploy/prometheus/wowd.rules.yml has no rule groups")
	}
	return rf
}

// ruleExprs returns every rule's expression.
func ruleExprs(t *testing.T) []string {
	t.Helper()
	var out []string
	for _, g := range readRules(t).Groups {
		for _, r := range g.Rules {
			out = append(out, r.Expr)
		}
	}
	return out
}
