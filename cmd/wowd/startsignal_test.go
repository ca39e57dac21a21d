package main_test

import (
	"fmt"
	"net"
	"syscall"
	"testing"
	"time"

	"github.com/wowd/wowd/internal/proctest"
)

// TestSIGTERMWhileReadingMetadataExits0: the README and
// docs/operations.md promise that SIGTERM or SIGINT stops `wowd run` with
// exit code 0 (1 for an unclean stop, 2 for a configuration error), and
// every exit goes through those codes. `wowd run` installed its SIGTERM
// handler only after the configuration was loaded and the daemon built, so
// a SIGTERM while it reads wow.metadata from a service's /wow/metadata URL
// (up to wow.metadata-timeout, 10s by default: a Wow service still starting
// next to it, say) killed the process with Go's default action: no log line,
// no exit code at all (death by signal, 143 in a shell), where SIGHUP in
// the same window is already caught.
func TestSIGTERMWhileReadingMetadataExits0(t *testing.T) {
	// A metadata endpoint that accepts and never answers: wowd is inside
	// the load for as long as the test wants.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	accepted := make(chan net.Conn, 4)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			accepted <- c
		}
	}()
	cfg := proctest.WriteConfig(t, fmt.Sprintf(`
wow:
  service: review
  metadata: http://%s/wow/metadata
  metadata-timeout: 30s
  kafka:
    bootstrap-servers: [127.0.0.1:1]
  dispatchers:
    d:
      topics: [event]
      handler: {type: log}
  metrics:
    listen: 127.0.0.1:0
  shutdown:
    timeout: 2s
`, l.Addr()))
	cmd, exited, out := startRun(t, cfg)
	select {
	case c := <-accepted: // wowd is reading wow.metadata now
		defer c.Close()
	case err := <-exited:
		t.Fatalf("wowd exited before reading wow.metadata: %v\n%s", err, out.String())
	case <-time.After(20 * time.Second):
		t.Fatal("wowd did not ask for wow.metadata")
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-exited:
	case <-time.After(15 * time.Second):
		t.Fatal("wowd did not stop within 15s of SIGTERM while reading wow.metadata")
	}
	st := cmd.ProcessState
	if !st.Exited() || st.ExitCode() != 0 {
		t.Fatalf("SIGTERM while reading wow.metadata: %v (exited normally: %v, code %d), want exit code 0; output:\n%s",
			st, st.Exited(), st.ExitCode(), out.String())
	}
}
