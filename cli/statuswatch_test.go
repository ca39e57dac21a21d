package cli

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/wowd/wowd/handler"
)

// lockedBuffer is a bytes.Buffer safe to read while the command writes.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestStatusWatchSaysWhenAStatusCannotBeRead: `wowd status --watch`
// against a wowd that answers once and then does not (stopped, restarting,
// its port-forward gone) must say so before its next read, not keep the
// last, healthy status on the screen as if it were current. Here the
// second read fails with 503, and the third looks at what was shown.
func TestStatusWatchSaysWhenAStatusCannotBeRead(t *testing.T) {
	body, err := json.Marshal(sampleStatus(0))
	if err != nil {
		t.Fatal(err)
	}
	var out, errOut lockedBuffer
	var n atomic.Int32
	var seenAtThird atomic.Value
	seenAtThird.Store("")
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch n.Add(1) {
		case 1:
			_, _ = w.Write(body)
		case 2:
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = w.Write([]byte(`{"error":"wowd is stopping"}`))
		case 3:
			seenAtThird.Store(out.String() + errOut.String())
			_, _ = w.Write(body)
		default:
			_, _ = w.Write(body)
		}
	}))
	defer srv.Close()
	code := run([]string{"status", "--admin", srv.URL, "--watch", "--interval", "10ms", "--count", "3"}, &out, &errOut, nil, &handler.Registry{})
	if n.Load() != 3 {
		t.Fatalf("%d requests, want 3 (exit %d)\n%s%s", n.Load(), code, out.String(), errOut.String())
	}
	shown := seenAtThird.Load().(string)
	if strings.Count(shown, "carts on pod-1") != 1 {
		t.Fatalf("before the third read: %d statuses shown, want 1\n%s", strings.Count(shown, "carts on pod-1"), shown)
	}
	if !strings.Contains(shown, "503") && !strings.Contains(shown, "reading the status") {
		t.Errorf("--watch: the second status could not be read (503), and nothing said so before the next read; the screen showed only the last status read:\n%s", shown)
		t.Logf("at the end: exit %d, stderr %q", code, errOut.String())
	}
}
