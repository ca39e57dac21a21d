// Package proctest helps tests that build a command of this repository and
// run it as a process: finding the repository, building once per test
// process, free ports, configuration files, short runs and readiness.
package proctest

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"
)

// RepoRoot walks up from the working directory to the directory holding
// go.mod: the root of the repository, where scripts/ and cmd/ are.
func RepoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("cannot find the repository root (no go.mod above the working directory)")
		}
		dir = parent
	}
}

// Binary is a main package built once per test process, on first use. Its
// fields are set before the first Path; Remove (from TestMain) deletes the
// build.
type Binary struct {
	Pkg   string   // the package, as `go build` takes it, e.g. "./cmd/wowd"
	Dir   string   // where to run `go build`; "" means the repository root
	Flags []string // more `go build` flags
	Env   []string // more environment for `go build`

	once sync.Once
	dir  string // temporary directory holding the build
	path string
	err  error
}

// Path builds the binary if that was not done yet and returns its path; a
// failed build fails t.
func (b *Binary) Path(t testing.TB) string {
	t.Helper()
	b.once.Do(b.build)
	if b.err != nil {
		t.Fatal(b.err)
	}
	return b.path
}

func (b *Binary) build() {
	dir := b.Dir
	if dir == "" {
		if dir, b.err = RepoRoot(); b.err != nil {
			return
		}
	}
	if b.dir, b.err = os.MkdirTemp("", "proctest-"); b.err != nil {
		return
	}
	b.path = filepath.Join(b.dir, filepath.Base(b.Pkg))
	args := append(append([]string{"build"}, b.Flags...), "-o", b.path, b.Pkg)
	cmd := exec.Command("go", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), b.Env...)
	if out, err := cmd.CombinedOutput(); err != nil {
		b.err = fmt.Errorf("go build %s in %s: %w\n%s", b.Pkg, dir, err, out)
	}
}

// Remove deletes the build, if there is one.
func (b *Binary) Remove() {
	if b.dir != "" {
		_ = os.RemoveAll(b.dir)
	}
}

// handedOut holds the ports FreePort returned in this process, so that two
// calls never return the same one (the system may offer a port again as
// soon as FreePort's own listener closes).
var handedOut struct {
	sync.Mutex // guards ports
	ports      map[int]bool
}

// FreePort returns a TCP port on 127.0.0.1 that nothing listens on now and
// that no earlier call in this process returned.
func FreePort(t testing.TB) int {
	t.Helper()
	handedOut.Lock()
	defer handedOut.Unlock()
	if handedOut.ports == nil {
		handedOut.ports = map[int]bool{}
	}
	for range 100 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		port := l.Addr().(*net.TCPAddr).Port
		_ = l.Close()
		if !handedOut.ports[port] {
			handedOut.ports[port] = true
			return port
		}
	}
	t.Fatal("no port not handed out before in 100 tries")
	return 0
}

// Output collects a process's stdout and stderr; safe to read while the
// process still writes (after a kill, say).
type Output struct {
	mu sync.Mutex // guards b
	b  bytes.Buffer
}

func (o *Output) Write(p []byte) (int, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.b.Write(p)
}

func (o *Output) String() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.b.String()
}

// WriteConfig writes body to wowd.yaml in a directory of the test and returns
// its path.
func WriteConfig(t testing.TB, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "wowd.yaml")
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// Run runs cmd to its end and returns its combined output and exit code; a
// command that cannot be run at all fails t.
func Run(t testing.TB, cmd *exec.Cmd) (string, int) {
	t.Helper()
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		t.Fatalf("%s: %v", cmd, err)
	}
	return string(out), cmd.ProcessState.ExitCode()
}

// WaitReady waits up to 30 seconds for name's /readyz on 127.0.0.1:port to
// answer 200, failing t if it does not or if the process exits first (a
// value on exited).
func WaitReady(t testing.TB, name string, port int, exited <-chan error) {
	t.Helper()
	url := fmt.Sprintf("http://127.0.0.1:%d/readyz", port)
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		select {
		case err := <-exited:
			t.Fatalf("%s exited: %v", name, err)
		default:
		}
		if resp, err := http.Get(url); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
	}
	t.Fatalf("%s did not become ready", name)
}

// Terminate sends SIGTERM to p and requires it to exit with status 0 (a nil
// value on exited) within d.
func Terminate(t testing.TB, name string, p *os.Process, exited <-chan error, d time.Duration) {
	t.Helper()
	if err := p.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		if err != nil {
			t.Fatalf("%s after SIGTERM: %v, want exit 0", name, err)
		}
	case <-time.After(d):
		t.Fatalf("%s did not stop within %v of SIGTERM", name, d)
	}
}
