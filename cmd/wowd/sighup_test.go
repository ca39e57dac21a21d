package main_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/wowd/wowd/internal/proctest"
)

// TestSIGHUPReloads: SIGHUP makes `wowd run` read its configuration file
// again, unchanged, and keep running; `wowd dev`, which watches no file,
// logs that there is nothing to reload and keeps running. SIGTERM then
// stops each with exit code 0, as before. (Go's default for SIGHUP is to
// end the process at once, without a drain.)
func TestSIGHUPReloads(t *testing.T) {
	t.Run("run", func(t *testing.T) {
		c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "wow.example.cart.event"))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		metricsPort := proctest.FreePort(t)
		cfg := proctest.WriteConfig(t, fmt.Sprintf(`
wow:
  service: hangup
  kafka:
    bootstrap-servers: [%s]
    heartbeat-interval: 200ms
  contexts:
    example:
      aggregates: [cart]
  dispatchers:
    discarded:
      topics: [event]
      format: raw
      handler: {type: discard}
  metrics:
    listen: 127.0.0.1:%d
  shutdown:
    timeout: 10s
`, c.ListenAddrs()[0], metricsPort))
		cmd, exited, out := startRun(t, cfg)
		proctest.WaitReady(t, "wowd", metricsPort, exited)
		hangUp(t, cmd, exited, out, "configuration file read again; no key changed")
		proctest.Terminate(t, "wowd", cmd.Process, exited, 15*time.Second)
	})
	t.Run("dev", func(t *testing.T) {
		d := startDev(t, newSink(t, 0))
		hangUp(t, d.cmd, d.exited, d.out, "nothing to reload")
		proctest.Terminate(t, "wowd", d.cmd.Process, d.exited, 15*time.Second)
	})
}

// hangUp sends SIGHUP to cmd, waits for want in its output and fails t if
// it exits meanwhile or within a second after.
func hangUp(t *testing.T, cmd *exec.Cmd, exited <-chan error, out *proctest.Output, want string) {
	t.Helper()
	if err := cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	deadline := time.After(10 * time.Second)
	for !strings.Contains(out.String(), want) {
		select {
		case err := <-exited:
			t.Fatalf("wowd exited after SIGHUP: %v", err)
		case <-deadline:
			t.Fatalf("no %q in the output 10s after SIGHUP", want)
		case <-time.After(20 * time.Millisecond):
		}
	}
	select {
	case err := <-exited:
		t.Fatalf("wowd exited after SIGHUP: %v", err)
	case <-time.After(time.Second):
	}
}

// TestSIGHUPWhileReadingTheConfiguration: a SIGHUP that comes while `wowd
// run` still reads its configuration (wow.metadata from a service that
// answers slowly) does not end it: it starts, reads the file again once it
// runs, and SIGTERM stops it with exit code 0.
func TestSIGHUPWhileReadingTheConfiguration(t *testing.T) {
	metadata, err := os.ReadFile("../../internal/config/testdata/wow-metadata.json")
	if err != nil {
		t.Fatal(err)
	}
	asked := make(chan struct{}, 16)
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		asked <- struct{}{}
		select {
		case <-time.After(time.Second):
		case <-r.Context().Done():
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(metadata)
	}))
	defer slow.Close()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "wow.example.cart.event"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	metricsPort := proctest.FreePort(t)
	cfg := proctest.WriteConfig(t, fmt.Sprintf(`
wow:
  service: hangup
  metadata: %s/wow/metadata
  kafka:
    bootstrap-servers: [%s]
    heartbeat-interval: 200ms
  dispatchers:
    carts:
      topics: [event]
      contexts: [example-service]
      aggregates: [cart]
      format: raw
      handler: {type: discard}
  metrics:
    listen: 127.0.0.1:%d
  shutdown:
    timeout: 10s
`, slow.URL, c.ListenAddrs()[0], metricsPort))
	cmd, exited, out := startRun(t, cfg)
	select {
	case <-asked: // wowd is reading wow.metadata
	case err := <-exited:
		t.Fatalf("wowd exited before reading wow.metadata: %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("wowd did not read wow.metadata within 10s")
	}
	hangUp(t, cmd, exited, out, "configuration file read again")
	proctest.WaitReady(t, "wowd", metricsPort, exited)
	proctest.Terminate(t, "wowd", cmd.Process, exited, 15*time.Second)
}
