package main_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/wowd/wowd/internal/proctest"
)

// wowd is the binary under test, built on first use.
var wowd = &proctest.Binary{Pkg: "./cmd/wowd"}

func TestMain(m *testing.M) {
	code := m.Run()
	wowd.Remove()
	os.Exit(code)
}

// sink records what an HTTP handler receives.
type sink struct {
	mu   sync.Mutex       // guards got, n and ce
	got  map[string][]int // aggregate ID -> seq values in arrival order
	n    int
	ce   http.Header // headers of the first request
	srv  *httptest.Server
	want int
	done chan struct{}
}

func newSink(t *testing.T, want int) *sink {
	s := &sink{got: map[string][]int{}, want: want, done: make(chan struct{})}
	s.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		var v struct{ Seq int }
		if err := json.Unmarshal(body, &v); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.ce == nil {
			s.ce = r.Header.Clone()
		}
		key := r.Header.Get("ce-subject")
		s.got[key] = append(s.got[key], v.Seq)
		s.n++
		if s.n == s.want {
			close(s.done)
		}
	}))
	t.Cleanup(s.srv.Close)
	return s
}

// count is the number of requests the sink has taken.
func (s *sink) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.n
}

// TestDevDeliversInOrderAndStopsOnSIGTERM runs `wowd dev` as a process,
// produces to its embedded broker from a separate client and checks that an
// HTTP sink gets every record in per-aggregate order, then that SIGTERM
// stops it with exit code 0 within the shutdown timeout.
func TestDevDeliversInOrderAndStopsOnSIGTERM(t *testing.T) {
	const (
		records = 5_000
		keys    = 100
	)
	s := newSink(t, records)
	d := startDev(t, s)
	brokerPort, metricsPort, cmd, exited := d.brokerPort, d.metricsPort, d.cmd, d.exited

	cl, err := kgo.NewClient(kgo.SeedBrokers(fmt.Sprintf("127.0.0.1:%d", brokerPort)), kgo.ProducerLinger(5*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var recs []*kgo.Record
	seq := make([]int, keys)
	for i := range records {
		k := i % keys
		recs = append(recs, &kgo.Record{Topic: "wow.shop.cart.event", Key: []byte("cart-" + strconv.Itoa(k)),
			Value: fmt.Appendf(nil, `{"seq":%d}`, seq[k])})
		seq[k]++
	}
	if err := cl.ProduceSync(context.Background(), recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-s.done:
	case err := <-exited:
		t.Fatalf("wowd exited early: %v", err)
	case <-time.After(60 * time.Second):
		t.Fatalf("sink got %d of %d records", s.count(), records)
	}
	s.mu.Lock()
	for k, seqs := range s.got {
		for i, v := range seqs {
			if v != i {
				t.Fatalf("aggregate %s: position %d got seq %d", k, i, v)
			}
		}
	}
	if s.ce.Get("ce-specversion") != "1.0" || s.ce.Get("kafka-topic") != "wow.shop.cart.event" {
		t.Errorf("request headers %v", s.ce)
	}
	s.mu.Unlock()

	// The sink sees the last request before wowd reads its response and
	// counts the message as handled, so wait for the counter to catch up.
	metricsURL := fmt.Sprintf("http://127.0.0.1:%d/metrics", metricsPort)
	handled := `wowd_messages_total{context="shop",dispatcher="to-sink",outcome="handled"} 5000`
	metrics := get(t, metricsURL)
	for deadline := time.Now().Add(10 * time.Second); !strings.Contains(metrics, handled) && time.Now().Before(deadline); {
		time.Sleep(20 * time.Millisecond)
		metrics = get(t, metricsURL)
	}
	for _, name := range []string{"wowd_receiver_in_flight", "wowd_receiver_max_in_flight", "wowd_receiver_paused",
		handled, "wowd_handler_duration_seconds",
		"wowd_executor_workers", "wowd_executor_mailboxes", "wowd_commit_lag_records", "wowd_kafka_"} {
		if !strings.Contains(metrics, name) {
			t.Errorf("/metrics lacks %s", name)
		}
	}

	start := time.Now()
	proctest.Terminate(t, "wowd", cmd.Process, exited, 15*time.Second) // its shutdown timeout is 10s
	t.Logf("stopped in %v", time.Since(start))
}

// dev is a `wowd dev` process delivering wow.shop.cart.event (raw) to a sink.
type dev struct {
	brokerPort, metricsPort int
	adminPort               int
	cmd                     *exec.Cmd
	exited                  chan error
	out                     *proctest.Output // its stdout and stderr
}

// startRun starts `wowd run --config cfg` with env added to this process's
// environment; exited receives its end. It is killed when t ends, and its
// output logged if t failed.
func startRun(t *testing.T, cfg string, env ...string) (cmd *exec.Cmd, exited <-chan error, out *proctest.Output) {
	t.Helper()
	out = &proctest.Output{}
	cmd = exec.Command(wowd.Path(t), "run", "--config", cfg)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	ch := make(chan error, 1)
	go func() { ch <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		if t.Failed() {
			t.Logf("wowd output:\n%s", out.String())
		}
	})
	return cmd, ch, out
}

func startDev(t *testing.T, s *sink) *dev {
	t.Helper()
	d := &dev{brokerPort: proctest.FreePort(t), metricsPort: proctest.FreePort(t), adminPort: proctest.FreePort(t),
		exited: make(chan error, 1), out: &proctest.Output{}}
	cfg := proctest.WriteConfig(t, fmt.Sprintf(`
wow:
  service: bintest
  kafka:
    bootstrap-servers: [127.0.0.1:%d]
  contexts:
    shop:
      aggregates: [cart]
  dispatchers:
    to-sink:
      topics: [event]
      format: raw
      handler:
        type: http
        url: %s/wow
  metrics:
    listen: 127.0.0.1:%d
  admin:
    listen: 127.0.0.1:%d
  shutdown:
    timeout: 10s
  dev:
    partitions: 4
`, d.brokerPort, s.srv.URL, d.metricsPort, d.adminPort))
	d.cmd = exec.Command(wowd.Path(t), "dev", "--config", cfg)
	d.cmd.Stdout, d.cmd.Stderr = d.out, d.out
	if err := d.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { d.exited <- d.cmd.Wait() }()
	t.Cleanup(func() {
		_ = d.cmd.Process.Kill()
		if t.Failed() {
			t.Logf("wowd output:\n%s", d.out.String())
		}
	})
	proctest.WaitReady(t, "wowd", d.metricsPort, d.exited)
	return d
}

// TestDevWorksWithKcat: the embedded broker of `wowd dev` serves external
// clients: kcat (librdkafka) lists its topics and produces records that reach
// the sink.
func TestDevWorksWithKcat(t *testing.T) {
	if _, err := exec.LookPath("kcat"); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("kcat is not installed; .ci/run installs it")
		}
		t.Skip("kcat is not installed (Debian package kcat)")
	}
	const records = 20
	s := newSink(t, records)
	d := startDev(t, s)
	broker := fmt.Sprintf("127.0.0.1:%d", d.brokerPort)
	list, err := exec.Command("kcat", "-b", broker, "-L").CombinedOutput()
	if err != nil || !strings.Contains(string(list), `topic "wow.shop.cart.event" with 4 partitions`) {
		t.Fatalf("kcat -L: %v\n%s", err, list)
	}
	var in bytes.Buffer
	for i := range records {
		fmt.Fprintf(&in, "cart-%d|{\"seq\":0}\n", i)
	}
	produce := exec.Command("kcat", "-b", broker, "-P", "-t", "wow.shop.cart.event", "-K", "|")
	produce.Stdin = &in
	if out, err := produce.CombinedOutput(); err != nil {
		t.Fatalf("kcat -P: %v\n%s", err, out)
	}
	select {
	case <-s.done:
	case err := <-d.exited:
		t.Fatalf("wowd exited: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatalf("sink got %d of %d records produced by kcat", s.count(), records)
	}
	proctest.Terminate(t, "wowd", d.cmd.Process, d.exited, 15*time.Second)
}

func get(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestConfigValidateExitCodes runs `wowd config validate` over the good and
// bad configuration corpus: exit 0 and "ok" for good files, exit 2 with the
// expected messages for bad ones.
func TestConfigValidateExitCodes(t *testing.T) {
	root := filepath.Join("..", "..", "internal", "config")
	good, _ := filepath.Glob(filepath.Join(root, "testdata", "good", "*.yaml"))
	if len(good) < 3 {
		t.Fatalf("only %d good configs in the corpus", len(good))
	}
	good = append(good, filepath.Join("..", "..", "configs", "wowd.yaml"), filepath.Join("..", "..", "configs", "dev.yaml"))
	for _, f := range good {
		t.Run(filepath.Base(f), func(t *testing.T) {
			// From internal/config, where the files they name are.
			abs, err := filepath.Abs(f)
			if err != nil {
				t.Fatal(err)
			}
			cmd := exec.Command(wowd.Path(t), "config", "validate", "--config", abs)
			cmd.Dir = root
			out, code := proctest.Run(t, cmd)
			if code != 0 || !strings.Contains(out, "ok") {
				t.Fatalf("exit %d, output:\n%s", code, out)
			}
		})
	}
	bad := map[string][]string{
		"unknown-nested-key.yaml":   {"unknown key"},
		"unknown-handler-type.yaml": {"unknown handler type", "known: discard, http, log"},
		"many-errors.yaml":          {"\n"},
	}
	files, _ := filepath.Glob(filepath.Join(root, "testdata", "bad", "*.yaml"))
	if len(files) < 12 {
		t.Fatalf("only %d bad configs in the corpus", len(files))
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			out, code := runWowd(t, "config", "validate", "--config", f)
			if code != 2 {
				t.Fatalf("exit %d, want 2; output:\n%s", code, out)
			}
			for _, want := range bad[filepath.Base(f)] {
				if !strings.Contains(out, want) {
					t.Errorf("output lacks %q:\n%s", want, out)
				}
			}
			if !strings.Contains(out, filepath.Base(f)) {
				t.Errorf("output does not name the file:\n%s", out)
			}
		})
	}
	t.Run("missing file", func(t *testing.T) {
		if out, code := runWowd(t, "config", "validate", "--config", "/nonexistent.yaml"); code != 2 {
			t.Fatalf("exit %d, want 2; output:\n%s", code, out)
		}
	})
	t.Run("env override", func(t *testing.T) {
		cmd := exec.Command(wowd.Path(t), "config", "print", "--config", good[0])
		cmd.Env = append(os.Environ(), "WOW_DISPATCH_WORKERS=7")
		out, err := cmd.CombinedOutput()
		if err != nil || !strings.Contains(string(out), "workers: 7") {
			t.Fatalf("%v:\n%s", err, out)
		}
		cmd = exec.Command(wowd.Path(t), "config", "print", "--config", good[0], "--set", "wow.dispatch.workers=9")
		cmd.Env = append(os.Environ(), "WOW_DISPATCH_WORKERS=7")
		out, err = cmd.CombinedOutput()
		if err != nil || !strings.Contains(string(out), "workers: 9 # --set") {
			t.Fatalf("--set over the environment:\n%s", out)
		}
		vout, code := runWowd(t, "config", "validate", "--config", good[0], "--set", "wow.dispatch.workerz=9")
		if code != 2 || !strings.Contains(vout, `wow.dispatch.workerz: unknown key (did you mean "workers"?) (set by --set wow.dispatch.workerz)`) {
			t.Fatalf("--set of an unknown key: exit %d:\n%s", code, vout)
		}
		cmd = exec.Command(wowd.Path(t), "config", "validate", "--config", good[0])
		cmd.Env = append(os.Environ(), "WOW_DISPATCH_WORKERS=seven")
		out, _ = cmd.CombinedOutput()
		if cmd.ProcessState.ExitCode() != 2 || !strings.Contains(string(out), "WOW_DISPATCH_WORKERS") {
			t.Fatalf("bad env value: exit %d:\n%s", cmd.ProcessState.ExitCode(), out)
		}
	})
}

func runWowd(t *testing.T, args ...string) (string, int) {
	t.Helper()
	return proctest.Run(t, exec.Command(wowd.Path(t), args...))
}
