package realkafka

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"text/template"
	"time"

	"github.com/wowd/wowd/internal/proctest"
)

// wowdConfig is the configuration of the wowd processes of a test.
type wowdConfig struct {
	Service       string
	Brokers       string
	Prefix        string
	GroupProtocol string // classic or consumer
	Alias         string
	Aggregates    []string
	MaxInFlight   int
	SinkURL       string
	MaxAttempts   int
	BackoffInit   string
	BackoffMax    string
	Concurrency   int
	Timeout       string
	DeadLetter    bool
	OnFailure     string // park or dead-letter
	Format        string // wow or raw
	Metrics       string // set per process
	// Dispatchers is how many dispatchers read the topic, each its own
	// group and sink calls: sink, then sink-2, sink-3, ... (1 when 0).
	Dispatchers int
	// Ingest turns the local-first ingest endpoint on (on the metrics
	// listener).
	Ingest bool
}

// DispatcherNames returns the names of the config's dispatchers.
func (c wowdConfig) DispatcherNames() []string {
	names := []string{"sink"}
	for i := 2; i <= c.Dispatchers; i++ {
		names = append(names, fmt.Sprintf("sink-%d", i))
	}
	return names
}

func (e *env) config(alias string, aggregates []string, sinkURL string) wowdConfig {
	return wowdConfig{
		Service:       e.id,
		Brokers:       e.brokers,
		Prefix:        e.prefix(),
		GroupProtocol: "classic",
		Alias:         alias,
		Aggregates:    aggregates,
		MaxInFlight:   256,
		SinkURL:       sinkURL,
		MaxAttempts:   0,
		BackoffInit:   "200ms",
		BackoffMax:    "5s",
		Concurrency:   64,
		Timeout:       "10s",
		DeadLetter:    true,
		OnFailure:     "dead-letter", // the suite's sinks test dead letters; parking has tests of its own
		Format:        "wow",
	}
}

// The context key is the alias, so the receiver's group is
// <service>.sink.<alias> (see env.group).
var configTemplate = template.Must(template.New("wowd.yaml").Parse(`wow:
  service: {{.Service}}
  kafka:
    bootstrap-servers: [{{.Brokers}}]
    topic-prefix: "{{.Prefix}}"
    group-protocol: {{.GroupProtocol}}
    heartbeat-interval: 1s
    session-timeout: 6s
    rebalance-timeout: 30s
    revoke-timeout: 10s
    commit-interval: 500ms
  contexts:
    {{.Alias}}:
      alias: {{.Alias}}
      aggregates: [{{range $i, $a := .Aggregates}}{{if $i}}, {{end}}{{$a}}{{end}}]
  dispatch:
    max-in-flight: {{.MaxInFlight}}
  memory:
    limit: 256MiB # the default when no container limit is found, set here so the bounds hold on any machine
  dispatchers:
{{- range .DispatcherNames}}
    {{.}}:
      topics: [event]
      format: {{$.Format}}
      on-failure: {{$.OnFailure}}
      dead-letter:
        enabled: {{$.DeadLetter}}
      handler:
        type: http
        url: {{$.SinkURL}}
        request-timeout: {{$.Timeout}}
        max-attempts: {{$.MaxAttempts}}
        backoff-initial: {{$.BackoffInit}}
        backoff-max: {{$.BackoffMax}}
        max-concurrency: {{$.Concurrency}}
{{- end}}
  metrics:
    listen: {{.Metrics}}
{{- if .Ingest}}
  ingest:
    enabled: true
{{- end}}
  log:
    level: info
    format: json
  shutdown:
    timeout: 30s
`))

// shutdownTimeout is wow.shutdown.timeout of configTemplate.
const shutdownTimeout = 30 * time.Second

// proc is one wowd process.
type proc struct {
	name    string
	cmd     *exec.Cmd
	logPath string
	metrics string // host:port of /metrics, /readyz
	logFile *os.File

	done  chan struct{} // closed when the process exited and was reaped
	state *os.ProcessState
	werr  error
	// expectExit is set before the test signals the process, so that
	// checkAlive does not report the exit.
	expectExit atomic.Bool
}

func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// cluster runs the wowd processes of one test and cleans them up.
type cluster struct {
	t   *testing.T
	e   *env
	cfg wowdConfig
	dir string

	mu    sync.Mutex
	procs []*proc // every process started, in order
	seq   int
	env   []string // extra environment of the processes
}

func newCluster(e *env, cfg wowdConfig) *cluster {
	dir := e.t.TempDir()
	if keep := os.Getenv("WOWD_REALKAFKA_LOGS"); keep != "" {
		// Keep configurations and logs after the test, for debugging.
		dir = filepath.Join(keep, e.t.Name()+"-"+e.id)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			e.t.Fatal(err)
		}
	}
	c := &cluster{t: e.t, e: e, cfg: cfg, dir: dir}
	e.t.Cleanup(c.cleanup)
	return c
}

// writeConfig writes the cluster's configuration with the metrics address.
func (c *cluster) writeConfig(name, metrics string) string {
	c.t.Helper()
	cfg := c.cfg
	cfg.Metrics = metrics
	var b bytes.Buffer
	if err := configTemplate.Execute(&b, cfg); err != nil {
		c.t.Fatal(err)
	}
	path := filepath.Join(c.dir, name+".yaml")
	if err := os.WriteFile(path, b.Bytes(), 0o644); err != nil {
		c.t.Fatal(err)
	}
	return path
}

// processEnv is the environment of wowd processes: the test's, without
// variables that would override the configuration.
func processEnv(extra []string) []string {
	var out []string
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "WOW_") || strings.HasPrefix(kv, "WOWD_") {
			continue
		}
		out = append(out, kv)
	}
	return append(out, extra...)
}

// start starts one more wowd process and returns it at once (see waitReady).
func (c *cluster) start() *proc {
	c.t.Helper()
	c.mu.Lock()
	c.seq++
	name := fmt.Sprintf("wowd-%d", c.seq)
	c.mu.Unlock()
	addr := fmt.Sprintf("127.0.0.1:%d", proctest.FreePort(c.t))
	cfgPath := c.writeConfig(name, addr)
	return c.startWith(name, addr, []string{"run", "--config", cfgPath}, processEnv(c.env))
}

func (c *cluster) startWith(name, metrics string, args, environ []string) *proc {
	c.t.Helper()
	logPath := filepath.Join(c.dir, name+".log")
	f, err := os.Create(logPath)
	if err != nil {
		c.t.Fatal(err)
	}
	cmd := exec.Command(wowdBinary(c.t), args...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.Env = environ
	cmd.Dir = c.dir
	p := &proc{name: name, cmd: cmd, logPath: logPath, metrics: metrics, logFile: f, done: make(chan struct{})}
	if err := cmd.Start(); err != nil {
		f.Close()
		c.t.Fatalf("start %s: %v", name, err)
	}
	go func() {
		p.werr = cmd.Wait()
		p.state = cmd.ProcessState
		f.Close()
		close(p.done)
	}()
	c.mu.Lock()
	c.procs = append(c.procs, p)
	c.mu.Unlock()
	c.t.Logf("%s: started, pid %d, metrics %s, log %s", name, cmd.Process.Pid, metrics, logPath)
	return p
}

// startN starts n processes and waits until each is ready.
func (c *cluster) startN(n int) []*proc {
	c.t.Helper()
	ps := make([]*proc, n)
	for i := range ps {
		ps[i] = c.start()
	}
	for _, p := range ps {
		c.waitReady(p, 2*time.Minute)
	}
	return ps
}

// waitReady waits until the process answers 200 on /readyz: every receiver
// joined its group.
func (c *cluster) waitReady(p *proc, timeout time.Duration) {
	c.t.Helper()
	start := time.Now()
	deadline := start.Add(timeout)
	client := &http.Client{Timeout: 2 * time.Second}
	for {
		if p.exited() {
			c.fatalf("%s exited before it was ready: %v", p.name, p.werr)
		}
		resp, err := client.Get("http://" + p.metrics + "/readyz")
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				c.t.Logf("%s: ready after %v", p.name, time.Since(start).Round(time.Millisecond))
				return
			}
		}
		if time.Now().After(deadline) {
			c.fatalf("%s not ready after %v (last: %v)", p.name, timeout, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// kill sends SIGKILL and waits for the process to be gone.
func (c *cluster) kill(p *proc) {
	c.t.Helper()
	p.expectExit.Store(true)
	if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil && !p.exited() {
		c.t.Fatalf("kill -9 %s: %v", p.name, err)
	}
	select {
	case <-p.done:
	case <-time.After(30 * time.Second):
		c.t.Fatalf("%s still running 30s after SIGKILL", p.name)
	}
	if ws, ok := p.state.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		c.t.Fatalf("%s: exit %v, want death by SIGKILL (did it exit before?)", p.name, p.state)
	}
	c.t.Logf("%s: killed with SIGKILL", p.name)
}

// stop sends SIGTERM and asserts a clean exit (code 0) within the shutdown
// timeout and a margin.
func (c *cluster) stop(p *proc) {
	c.t.Helper()
	if err := c.stopErr(p); err != nil {
		c.errorf("%v", err)
	}
}

func (c *cluster) stopErr(p *proc) error {
	p.expectExit.Store(true)
	start := time.Now()
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil && !p.exited() {
		return fmt.Errorf("SIGTERM %s: %v", p.name, err)
	}
	select {
	case <-p.done:
	case <-time.After(shutdownTimeout + 20*time.Second):
		_ = p.cmd.Process.Signal(syscall.SIGKILL)
		<-p.done
		return fmt.Errorf("%s still running %v after SIGTERM; killed", p.name, shutdownTimeout+20*time.Second)
	}
	c.t.Logf("%s: stopped by SIGTERM in %v, %v", p.name, time.Since(start).Round(time.Millisecond), p.state)
	if code := p.state.ExitCode(); code != 0 {
		return fmt.Errorf("%s: exit code %d after SIGTERM, want 0 (%v)", p.name, code, p.state)
	}
	return nil
}

// stopAll stops every running process with SIGTERM, all at once, and asserts
// each exits 0.
func (c *cluster) stopAll() {
	c.t.Helper()
	var wg sync.WaitGroup
	errs := make(chan error, len(c.running()))
	for _, p := range c.running() {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := c.stopErr(p); err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		c.errorf("%v", err)
	}
}

// running returns the processes that have not exited.
func (c *cluster) running() []*proc {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []*proc
	for _, p := range c.procs {
		if !p.exited() {
			out = append(out, p)
		}
	}
	return out
}

// checkAlive fails the test if a process exited that the test did not stop.
func (c *cluster) checkAlive() {
	c.t.Helper()
	c.mu.Lock()
	procs := append([]*proc(nil), c.procs...)
	c.mu.Unlock()
	for _, p := range procs {
		if !p.expectExit.Load() && p.exited() {
			c.fatalf("%s exited unexpectedly: %v", p.name, p.werr)
		}
	}
}

// checkLogs fails the test on a panic or fatal error in any process log.
func (c *cluster) checkLogs() {
	c.t.Helper()
	for _, p := range c.all() {
		for _, bad := range []string{"panic:", "fatal error:", "DATA RACE"} {
			if n := c.grep(p, bad); n > 0 {
				c.errorf("%s: %q in its log (%d lines)", p.name, bad, n)
			}
		}
	}
}

func (c *cluster) all() []*proc {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]*proc(nil), c.procs...)
}

// grep counts the lines of the process's log that contain s.
func (c *cluster) grep(p *proc, s string) int {
	f, err := os.Open(p.logPath)
	if err != nil {
		return 0
	}
	defer f.Close()
	n := 0
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		if strings.Contains(sc.Text(), s) {
			n++
		}
	}
	return n
}

// grepAll counts the lines with s over every process log.
func (c *cluster) grepAll(s string) int {
	n := 0
	for _, p := range c.all() {
		n += c.grep(p, s)
	}
	return n
}

// fatalf fails the test; cleanup prints the tails of the process logs.
func (c *cluster) fatalf(format string, args ...any) {
	c.t.Helper()
	c.t.Fatalf(format, args...)
}

func (c *cluster) errorf(format string, args ...any) {
	c.t.Helper()
	c.t.Errorf(format, args...)
}

// dumpLogs prints the tail of every process log.
func (c *cluster) dumpLogs() {
	for _, p := range c.all() {
		b, err := os.ReadFile(p.logPath)
		if err != nil {
			continue
		}
		lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
		if len(lines) > 40 {
			lines = lines[len(lines)-40:]
		}
		for i, l := range lines {
			if len(l) > 600 {
				lines[i] = l[:600] + "…"
			}
		}
		c.t.Logf("---- tail of %s (%s):\n%s", p.name, p.logPath, strings.Join(lines, "\n"))
	}
}

// cleanup kills what still runs and prints logs if the test failed.
func (c *cluster) cleanup() {
	for _, p := range c.all() {
		if !p.exited() {
			p.expectExit.Store(true)
			_ = p.cmd.Process.Signal(syscall.SIGKILL)
			select {
			case <-p.done:
			case <-time.After(30 * time.Second):
				c.t.Errorf("%s: still running 30s after SIGKILL", p.name)
			}
		}
	}
	if c.t.Failed() {
		c.dumpLogs()
	}
}

// scrape reads /metrics at addr and returns every sample: by metric name,
// then by label text (e.g. `context="shop",dispatcher="sink"`).
func scrape(addr string) (map[string]map[string]float64, error) {
	client := &http.Client{Timeout: 2 * time.Second}
	resp, err := client.Get("http://" + addr + "/metrics")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("/metrics: %s", resp.Status)
	}
	out := make(map[string]map[string]float64)
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		sp := strings.LastIndexByte(line, ' ')
		if sp < 0 {
			continue
		}
		name, labels := line[:sp], ""
		if i := strings.IndexByte(name, '{'); i >= 0 {
			name, labels = line[:i], strings.TrimSuffix(line[i+1:sp], "}")
		}
		v, err := strconv.ParseFloat(line[sp+1:], 64)
		if err != nil {
			continue
		}
		if out[name] == nil {
			out[name] = make(map[string]float64)
		}
		out[name][labels] = v
	}
	return out, sc.Err()
}

// rebalanceEvents returns the partitions the process has reported revoked
// and lost so far (wowd_rebalance_events_total). Take it before SIGTERM:
// leaving the group revokes everything.
func rebalanceEvents(t *testing.T, p *proc) (revoked, lost float64) {
	t.Helper()
	m, err := scrape(p.metrics)
	if err != nil {
		t.Fatalf("%s: scrape: %v", p.name, err)
	}
	for labels, v := range m["wowd_rebalance_events_total"] {
		switch {
		case strings.Contains(labels, `event="revoked"`):
			revoked += v
		case strings.Contains(labels, `event="lost"`):
			lost += v
		}
	}
	return revoked, lost
}

// checkNoDuplicates asserts that a single wowd process that never lost or
// gave up a partition delivered nothing twice. On a loaded machine a missed
// session timeout can take the partitions away and give them back; the
// duplicates that follow are at-least-once, and only logged.
func checkNoDuplicates(t *testing.T, s *sink, revoked, lost float64) {
	t.Helper()
	d := s.dups.Load()
	switch {
	case d == 0:
	case revoked+lost > 0:
		t.Logf("%d duplicates after wowd reported %v partitions revoked and %v lost", d, revoked, lost)
	default:
		t.Errorf("%d duplicates from one process that kept its partitions throughout", d)
	}
}

// procStatus reads a field of /proc/<pid>/status in kB (VmRSS, VmHWM).
func procStatus(pid int, field string) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			v = strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB"))
			return strconv.ParseInt(v, 10, 64)
		}
	}
	return 0, fmt.Errorf("no %s in /proc/%d/status", field, pid)
}

// cpuTime returns the CPU time (user and system) the process has used so
// far, from /proc/<pid>/stat (clock ticks of 10 ms on Linux).
func cpuTime(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, fmt.Errorf("/proc/%d/stat: %q", pid, s)
	}
	f := strings.Fields(s[i+1:]) // f[0] is field 3, the state
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: %q", pid, s)
	}
	utime, err1 := strconv.ParseInt(f[11], 10, 64) // field 14
	stime, err2 := strconv.ParseInt(f[12], 10, 64) // field 15
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("/proc/%d/stat: %q", pid, s)
	}
	const clockTick = 10 * time.Millisecond // USER_HZ is 100 on Linux
	return time.Duration(utime+stime) * clockTick, nil
}

// runWowd runs a short wowd command (config validate) and returns its exit
// code and output.
func runWowd(t *testing.T, environ []string, args ...string) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, wowdBinary(t), args...)
	cmd.Env = environ
	out, code := proctest.Run(t, cmd)
	return code, out
}
