// Package kafkatest gives tests a real Apache Kafka broker.
//
// A test calls [Brokers] for a bootstrap address. If WOWD_KAFKA_BROKERS is set, that
// address is used as is. Otherwise the first call in the test process starts a local
// single-node KRaft broker with scripts/kafka-local (Java 17+ and, the first time on a
// machine, Maven; see that script), and all tests in the process share it. A package
// that uses Brokers should stop that broker at the end with [Main]:
//
//	func TestMain(m *testing.M) { os.Exit(kafkatest.Main(m)) }
//
// Even without Main (or if the test binary is killed) the broker does not outlive the
// test process by more than a few seconds: scripts/kafka-local runs a watchdog that
// stops it once the process is gone.
//
// If no broker can be had, Brokers skips the test with the reason, or fails it when
// WOWD_REQUIRE_KAFKA=1 (for CI, where a skip would hide a broken setup).
//
// Tests share one broker, so each should use its own topic and group names.
package kafkatest

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/wowd/wowd/internal/proctest"
)

const (
	// EnvBrokers names an existing broker (comma-separated host:port list) to use
	// instead of starting one.
	EnvBrokers = "WOWD_KAFKA_BROKERS"
	// EnvRequire, set to 1, makes Brokers fail the test instead of skipping it when
	// no broker can be had.
	EnvRequire = "WOWD_REQUIRE_KAFKA"

	// startTimeout bounds scripts/kafka-local start, including the one-time Maven
	// download of the jars and the script's own 120 s wait for the broker.
	startTimeout = 10 * time.Minute
	stopTimeout  = 2 * time.Minute
)

var (
	mu       sync.Mutex
	tried    bool   // start was attempted in this process
	addr     string // bootstrap address of the broker started here
	startErr error  // why it could not be started
	state    string // state file of the broker started here (see scripts/kafka-local)
	script   string // absolute path of scripts/kafka-local
	startLog string // stderr of scripts/kafka-local start
	logged   bool
)

// Brokers returns the bootstrap address of a real Kafka broker for the test:
// WOWD_KAFKA_BROKERS if set, else a broker started via scripts/kafka-local (once per
// test process, shared, stopped by [Main] or [Stop]). If none can be started the test
// is skipped with the reason, or fails if WOWD_REQUIRE_KAFKA=1.
func Brokers(t testing.TB) string {
	t.Helper()
	if b := strings.TrimSpace(os.Getenv(EnvBrokers)); b != "" {
		return b
	}
	a, err := start()
	if err != nil {
		if os.Getenv(EnvRequire) == "1" {
			t.Fatalf("kafkatest: no Kafka broker (%s=1): %v", EnvRequire, err)
		}
		t.Skipf("kafkatest: no Kafka broker, skipping (set %s=host:port to use one, %s=1 to fail instead): %v",
			EnvBrokers, EnvRequire, err)
	}
	mu.Lock()
	if !logged && startLog != "" {
		logged = true
		t.Logf("kafkatest: started a local broker at %s:\n%s", a, startLog)
	}
	mu.Unlock()
	return a
}

// SeedBrokers is [Brokers] split into a list, e.g. for kgo.SeedBrokers.
func SeedBrokers(t testing.TB) []string {
	t.Helper()
	var out []string
	for _, b := range strings.Split(Brokers(t), ",") {
		if b = strings.TrimSpace(b); b != "" {
			out = append(out, b)
		}
	}
	return out
}

// Main runs the tests and then stops the broker that [Brokers] started, if any. It
// returns the exit code for os.Exit; a failure to stop the broker turns a 0 into 1.
func Main(m *testing.M) int {
	code := m.Run()
	if err := Stop(); err != nil {
		fmt.Fprintf(os.Stderr, "kafkatest: %v\n", err)
		if code == 0 {
			code = 1
		}
	}
	return code
}

// Stop stops the broker that [Brokers] started in this process, if any, and deletes
// its data. A later Brokers call starts a new one.
func Stop() error {
	mu.Lock()
	defer mu.Unlock()
	tried, addr, startErr, startLog, logged = false, "", nil, "", false
	if state == "" {
		return nil
	}
	st := state
	state = ""
	out, err := runScript(stopTimeout, st, "stop")
	if err != nil {
		return fmt.Errorf("scripts/kafka-local stop: %v\n%s", err, out.stderr)
	}
	return nil
}

type output struct{ stdout, stderr string }

func runScript(timeout time.Duration, stateFile string, args ...string) (output, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", append([]string{script}, args...)...)
	cmd.Env = append(os.Environ(),
		"KAFKA_LOCAL_STATE="+stateFile,
		"KAFKA_LOCAL_WATCH_PID="+strconv.Itoa(os.Getpid()),
	)
	cmd.Stdin = nil
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	cmd.WaitDelay = 10 * time.Second
	err := cmd.Run()
	if ctx.Err() != nil {
		err = fmt.Errorf("timed out after %v (%v)", timeout, err)
	}
	return output{stdout.String(), stderr.String()}, err
}

func start() (string, error) {
	mu.Lock()
	defer mu.Unlock()
	if tried {
		return addr, startErr
	}
	tried = true
	addr, startErr = doStart()
	return addr, startErr
}

func doStart() (string, error) {
	root, err := proctest.RepoRoot()
	if err != nil {
		return "", err
	}
	script = filepath.Join(root, "scripts", "kafka-local")
	if _, err := os.Stat(script); err != nil {
		return "", fmt.Errorf("cannot start a broker: %v", err)
	}
	if _, err := exec.LookPath("bash"); err != nil {
		return "", fmt.Errorf("cannot run scripts/kafka-local: %v", err)
	}
	// One state file per test process (the script deletes it on stop), so that test
	// binaries of several packages running at once each have their own broker.
	state = filepath.Join(os.TempDir(), fmt.Sprintf("wowd-kafkatest-%d.state", os.Getpid()))
	out, err := runScript(startTimeout, state, "start")
	startLog = strings.TrimSpace(out.stderr)
	if err == nil {
		var a string
		if a, err = lastLine(out.stdout); err == nil {
			return a, nil
		}
	}
	// Clean up whatever part of a broker there is.
	_, _ = runScript(stopTimeout, state, "stop")
	state = ""
	return "", fmt.Errorf("scripts/kafka-local start: %v\n%s", err, tail(startLog, 40))
}

// lastLine returns the last non-empty line of the script's stdout, which must be a
// host:port address.
func lastLine(s string) (string, error) {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	a := strings.TrimSpace(lines[len(lines)-1])
	if _, _, err := net.SplitHostPort(a); err != nil || a == "" {
		return "", fmt.Errorf("no bootstrap address in its output %q", s)
	}
	return a, nil
}

func tail(s string, n int) string {
	lines := strings.Split(s, "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
