package daemon

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/wowd/wowd/handler"
	"github.com/wowd/wowd/internal/metrics"
	"github.com/wowd/wowd/internal/testwait"
)

// movedHeaderYAML is a raw dispatcher whose http sink posts to url with
// the handler keys in headers.
func movedHeaderYAML(broker, url, headers string) string {
	return fmt.Sprintf(`wow:
  service: header-mover
  kafka:
    bootstrap-servers: [%s]
    commit-interval: 100ms
  contexts:
    example:
      aggregates: [cart]
  dispatchers:
    sink:
      topics: [event]
      format: raw
      handler:
        type: http
        url: %s
%s  metrics:
    listen: ""
`, broker, url, headers)
}

// A reload that moves the sink's Authorization header from
// headers-from-file (reloadable) to headers (restart only) keeps sending
// the file's header until the restart. The removal from headers-from-file
// was applied alone while the static header waited for the restart, so
// every request went out without Authorization: a configuration neither
// running nor written. Found by review.
func TestReloadMovingAHeaderToRestartOnlyKeysKeepsIt(t *testing.T) {
	reloadSettle = 20 * time.Millisecond
	c := newCluster(t, kfake.DefaultNumPartitions(1))
	const topic = "wow.example.cart.event"
	if err := c.CreateTopic(topic, 1, nil); err != nil {
		t.Fatal(err)
	}
	var (
		mu    sync.Mutex
		auths []string
	)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		auths = append(auths, r.Header.Get("Authorization"))
		mu.Unlock()
	}))
	defer srv.Close()
	seen := func() []string {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(auths)
	}
	token := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(token, []byte("Bearer from-file\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	broker := c.ListenAddrs()[0]
	before := movedHeaderYAML(broker, srv.URL, "        headers-from-file: {Authorization: "+token+"}\n")
	after := movedHeaderYAML(broker, srv.URL, "        headers: {Authorization: Bearer static}\n")
	r := startReloading(t, before, documentLoader(handler.Default()))

	cl, err := kgo.NewClient(kgo.SeedBrokers(broker))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	produce := func(key string) {
		t.Helper()
		if err := cl.ProduceSync(context.Background(), &kgo.Record{Topic: topic, Key: []byte(key), Value: []byte("{}")}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	produce("cart-1")
	testwait.For(t, 30*time.Second, "the first request", func() bool { return len(seen()) >= 1 })

	r.write(t, after)
	testwait.For(t, 10*time.Second, "the reload read", func() bool {
		return r.count(t, metrics.ReloadRestartNeeded) > 0 || r.count(t, metrics.ReloadApplied) > 0
	})
	produce("cart-2")
	testwait.For(t, 30*time.Second, "the second request", func() bool { return len(seen()) >= 2 })
	got := seen()
	if got[0] != "Bearer from-file" {
		t.Fatalf("first request's Authorization %q", got[0])
	}
	if last := got[len(got)-1]; last != "Bearer from-file" {
		t.Errorf("after the reload requests carry Authorization %q, want the file's until a restart; logged: %v",
			last, r.logs.FilterMessage("configuration reloaded").All())
	}
	if r.count(t, metrics.ReloadRestartNeeded) == 0 {
		t.Errorf("the move to headers was not counted as needing a restart")
	}
}
