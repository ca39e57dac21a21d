package cli

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/wowd/wowd/handler"
	"github.com/wowd/wowd/internal/admin"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// statusServer answers GET /admin/v1/status with st, requiring token when
// it is not empty, and counts the requests.
func statusServer(t *testing.T, st admin.Status, token string) (*httptest.Server, *atomic.Int32) {
	var n atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n.Add(1)
		if r.URL.Path != "/admin/v1/status" || r.URL.Query().Get("top") == "" {
			http.NotFound(w, r)
			return
		}
		if token != "" && r.Header.Get("Authorization") != "Bearer "+token {
			w.WriteHeader(http.StatusUnauthorized)
			_, _ = w.Write([]byte(`{"error":"a bearer token is required"}`))
			return
		}
		_ = json.NewEncoder(w).Encode(st)
	}))
	t.Cleanup(srv.Close)
	return srv, &n
}

func sampleStatus(stalled float64) admin.Status {
	return admin.Status{
		Instance: "pod-1", Service: "carts", Version: "v1", UptimeSeconds: 3600,
		Executor: admin.Executor{Workers: 4, Busy: 1, Mailboxes: 3},
		Receivers: []admin.ReceiverStatus{{
			Dispatcher: "projection", Context: "shop", GroupID: "carts.projection.shop", Joined: true, Generation: 2,
			InFlight: 30, MaxInFlight: 256, Paused: admin.PauseNone,
			Partitions: []admin.PartitionStatus{
				{Topic: "wow.shop.cart.event", Partition: 0, Committed: -1, Finished: -1, HighWatermark: 42, Lag: 42, InFlight: 30, Span: 42, Paused: admin.PauseNone, StalledSeconds: stalled},
				{Topic: "wow.shop.cart.event", Partition: 1, Committed: 13, Finished: 13, HighWatermark: 13, Lag: 0, Paused: admin.PauseNone},
			},
		}},
		Hot:    []admin.HotAggregate{{Dispatcher: "projection", Context: "shop", Aggregate: "cart", ID: "hot-cart", Unfinished: 30}},
		Oldest: []admin.OldAggregate{{Dispatcher: "projection", Context: "shop", Aggregate: "cart", ID: "hot-cart", Topic: "wow.shop.cart.event", AgeSeconds: stalled}},
	}
}

func runStatus(t *testing.T, env []string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code = run(append([]string{"status"}, args...), &out, &errOut, env, &handler.Registry{})
	return code, out.String(), errOut.String()
}

func TestStatusCommand(t *testing.T) {
	healthy, _ := statusServer(t, sampleStatus(20), "")
	code, out, errOut := runStatus(t, nil, "--admin", healthy.URL)
	if code != 0 {
		t.Fatalf("healthy: exit %d\n%s%s", code, out, errOut)
	}
	for _, want := range []string{"carts on pod-1", "projection/shop", "carts.projection.shop", "wow.shop.cart.event/0", "hot-cart", "HOT", "OLDEST"} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}

	stuck, _ := statusServer(t, sampleStatus(400), "")
	code, out, errOut = runStatus(t, nil, "--admin", stuck.URL)
	if code != 1 || !strings.Contains(out, "UNHEALTHY") || !strings.Contains(out, "wow.shop.cart.event/0: no progress for 6m40s") {
		t.Errorf("stuck 400s past the default 5m: exit %d\n%s%s", code, out, errOut)
	}
	if code, _, _ := runStatus(t, nil, "--admin", stuck.URL, "--stuck-after", "10m"); code != 0 {
		t.Errorf("stuck 400s, threshold 10m: exit %d, want 0", code)
	}

	code, out, _ = runStatus(t, nil, "--admin", stuck.URL, "--json")
	var st admin.Status
	if err := json.Unmarshal([]byte(out), &st); err != nil || code != 1 || st.Hot[0].ID != "hot-cart" {
		t.Errorf("--json: exit %d, %v\n%s", code, err, out)
	}
}

func TestStatusCommandErrors(t *testing.T) {
	for _, args := range [][]string{
		{"--admin", "127.0.0.1:9465"}, // no scheme
		{"--top", "101"},
		{"--stuck-after", "0s"},
		{"--no-such-flag"},
		{"--token-file", "/no/such/file"},
		{"extra-argument"},
	} {
		if code, _, errOut := runStatus(t, nil, args...); code != 2 {
			t.Errorf("%v: exit %d, want 2 (usage)\n%s", args, code, errOut)
		}
	}
	// Nothing listening: a runtime failure.
	srv := httptest.NewServer(http.NotFoundHandler())
	addr := srv.URL
	srv.Close()
	if code, _, errOut := runStatus(t, nil, "--admin", addr, "--timeout", "2s"); code != 1 || !strings.Contains(errOut, "reading the status") {
		t.Errorf("unreachable: exit %d\n%s", code, errOut)
	}
}

func TestStatusCommandTokenAndWatch(t *testing.T) {
	srv, requests := statusServer(t, sampleStatus(0), "s3cret")
	if code, _, errOut := runStatus(t, nil, "--admin", srv.URL); code != 1 || !strings.Contains(errOut, "401") {
		t.Errorf("without the token: exit %d\n%s", code, errOut)
	}
	file := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(file, []byte("s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	requests.Store(0)
	start := time.Now()
	code, out, errOut := runStatus(t, []string{"WOWD_ADMIN=" + srv.URL, "WOWD_ADMIN_TOKEN_FILE=" + file}, "--watch", "--interval", "10ms", "--count", "3")
	if code != 0 || requests.Load() != 3 || strings.Count(out, "carts on pod-1") != 3 {
		t.Errorf("--watch --count 3 from the environment: exit %d, %d requests\n%s%s", code, requests.Load(), out, errOut)
	}
	if time.Since(start) > 10*time.Second {
		t.Errorf("--watch did not stop after --count")
	}
}

// TestStatusRefusesUnboundedRequests: --timeout 0 or below turned the time
// limit of a status request off (http.Client takes them as none), so a
// probe against a listener that accepts and never answers hung for good,
// and --count below 0 watched for good; both were taken silently, exit 0.
func TestStatusRefusesUnboundedRequests(t *testing.T) {
	srv, requests := statusServer(t, sampleStatus(0), "")
	for _, args := range [][]string{
		{"--timeout", "0s"},
		{"--timeout", "-1s"},
		{"--count", "-1"}, // with --watch, it watched for good
	} {
		code, _, errOut := runStatus(t, nil, append([]string{"--admin", srv.URL}, args...)...)
		if code != ExitConfig || !strings.Contains(errOut, args[len(args)-2]) {
			t.Errorf("%v: exit %d, want %d naming %s\n%s", args, code, ExitConfig, args[len(args)-2], errOut)
		}
	}
	if n := requests.Load(); n != 0 {
		t.Errorf("%d status requests made with flags refused", n)
	}
}

// TestStatusErrorNamesTheURL: an --admin URL that is not the admin
// listener's (another listener) answered "reading the status: 404 Not
// Found: ", naming neither what was asked nor what came back. The query
// wowd adds is shown as it is (it was masked as if it were a secret, found
// by review), and the page's own URL (…/admin/) names the listener too
// (it asked for /admin/admin/v1/status).
func TestStatusErrorNamesTheURL(t *testing.T) {
	srv := httptest.NewServer(http.NotFoundHandler())
	t.Cleanup(srv.Close)
	code, _, errOut := runStatus(t, nil, "--admin", srv.URL+"/admin/")
	if code != ExitFailure {
		t.Errorf("exit %d, want %d", code, ExitFailure)
	}
	for _, want := range []string{srv.URL + "/admin/v1/status?top=10: 404 Not Found", "404 page not found"} {
		if !strings.Contains(errOut, want) {
			t.Errorf("the error lacks %q:\n%s", want, errOut)
		}
	}
}

// TestStatusWatchInterruptedMidRequest: Ctrl-C while --watch was reading
// the next status made it exit 1 with "context canceled", as if the status
// could not be read; it exits with the code of the last status shown, as
// an interrupt between two reads does. The server sends the process
// SIGINT when the second request arrives, and holds it.
func TestStatusWatchInterruptedMidRequest(t *testing.T) {
	var n atomic.Int32
	body, err := json.Marshal(sampleStatus(0))
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if n.Add(1) == 1 {
			_, _ = w.Write(body)
			return
		}
		if err := syscall.Kill(os.Getpid(), syscall.SIGINT); err != nil {
			t.Error(err)
		}
		select {
		case <-r.Context().Done():
		case <-time.After(10 * time.Second):
		}
	}))
	defer srv.Close()
	code, out, errOut := runStatus(t, nil, "--admin", srv.URL, "--watch", "--interval", "10ms")
	if code != 0 || n.Load() != 2 || strings.Count(out, "carts on pod-1") != 1 || errOut != "" {
		t.Errorf("--watch interrupted while reading its second status: exit %d after %d requests, want 0 (the first was healthy)\n%s%s", code, n.Load(), out, errOut)
	}
}
