package daemon

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	zapobserver "go.uber.org/zap/zaptest/observer"

	"github.com/wowd/wowd/handler"
	"github.com/wowd/wowd/internal/config"
)

// authConfig is a configuration with ingest behind a token file, on its
// own listener or (listen "") on the metrics listener.
func authConfig(t *testing.T, c *kfake.Cluster, reg *handler.Registry, listen, tokenFile string) *config.Config {
	t.Helper()
	ingestListen := ""
	if listen != "" {
		ingestListen = "\n    listen: " + listen
	}
	cfg, err := config.Parse(fmt.Appendf(nil, `
wow:
  service: carts
  kafka:
    bootstrap-servers: [%s]
    commit-interval: 100ms
    heartbeat-interval: 200ms
  contexts:
    example-service:
      alias: example
      aggregates: [cart]
  dispatchers:
    projection:
      topics: [event]
      handler: {type: count}
  metrics:
    listen: 127.0.0.1:0
  ingest:
    enabled: true
    token-file: %s%s
`, c.ListenAddrs()[0], tokenFile, ingestListen), "test.yaml", reg, nil)
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

func postAuth(t *testing.T, addr, auth string, body []byte) *http.Response {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, "http://"+addr+"/v1/messages/event", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp
}

// endOffsets sums the end offsets of a topic's partitions.
func endOffsets(t *testing.T, adm *kadm.Client, topic string) int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	offs, err := adm.ListEndOffsets(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	var n int64
	offs.Each(func(o kadm.ListedOffset) {
		if o.Err != nil {
			t.Fatalf("end offset of %s/%d: %v", o.Topic, o.Partition, o.Err)
		}
		n += o.Offset
	})
	return n
}

func ingestOutcome(t *testing.T, rt *Daemon, outcome string) float64 {
	t.Helper()
	mfs, err := rt.Metrics().Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "wowd_ingest_requests_total" {
			continue
		}
		for _, m := range mf.Metric {
			for _, l := range m.Label {
				if l.GetName() == "outcome" && l.GetValue() == outcome {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}

// writeToken replaces the token file as a Secret volume update does: a new
// file renamed over the old one.
func writeToken(t *testing.T, path, token string) {
	t.Helper()
	tmp := path + ".new"
	if err := os.WriteFile(tmp, []byte(token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// TestIngestRequiresTheToken, on each listener ingest can be served on (its
// own, and the loopback metrics listener): a write without a token or with
// a wrong one is answered 401 with WWW-Authenticate, counted, and neither
// handled nor published; the right token is accepted; a rotated token
// takes effect without a restart (the old one refused, the new accepted);
// and no log line of the run holds either token.
func TestIngestRequiresTheToken(t *testing.T) {
	for _, tt := range []struct{ name, listen string }{
		{"own listener", "127.0.0.1:0"},
		{"metrics listener", ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			const topic = "wow.example.cart.event"
			const oldToken, newToken = "s3cret-old-token-0451", "s3cret-new-token-99187"
			c := newCluster(t, kfake.SeedTopics(2, topic), kfake.AllowAutoTopicCreation())
			cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...))
			if err != nil {
				t.Fatal(err)
			}
			defer cl.Close()
			adm := kadm.NewClient(cl)

			tokenFile := filepath.Join(t.TempDir(), "token")
			writeToken(t, tokenFile, oldToken)
			cnt := &counter{n: map[string]int{}}
			var reg handler.Registry
			reg.Register(cnt.spec())
			core, logs := zapobserver.New(zapcore.DebugLevel)
			rt, err := New(authConfig(t, c, &reg, tt.listen, tokenFile), &reg, zap.New(core), "test")
			if err != nil {
				t.Fatal(err)
			}
			rt.Start(context.Background())
			stopped := false
			defer func() {
				if !stopped {
					stopRT(t, rt)
				}
			}()
			waitIngestReady(t, rt)
			addr := rt.IngestAddr()
			if tt.listen == "" {
				if addr != "" {
					t.Fatalf("ingest has a listener of its own at %s", addr)
				}
				addr = rt.MetricsAddr()
			}

			refused := func(id, auth string) {
				t.Helper()
				before := endOffsets(t, adm, topic)
				resp := postAuth(t, addr, auth, event(id, "cart-"+id, ""))
				if resp.StatusCode != http.StatusUnauthorized {
					t.Fatalf("%s: answered %d, want 401", id, resp.StatusCode)
				}
				if h := resp.Header.Get("WWW-Authenticate"); !strings.HasPrefix(h, "Bearer") {
					t.Errorf("%s: WWW-Authenticate %q", id, h)
				}
				if after := endOffsets(t, adm, topic); after != before {
					t.Fatalf("%s: refused, yet the topic's end offsets moved from %d to %d", id, before, after)
				}
				if cnt.get(id) != 0 {
					t.Fatalf("%s: refused, yet handled", id)
				}
			}
			accepted := func(id, auth string) {
				t.Helper()
				before := endOffsets(t, adm, topic)
				resp := postAuth(t, addr, auth, event(id, "cart-"+id, ""))
				if resp.StatusCode != http.StatusAccepted {
					t.Fatalf("%s: answered %d, want 202", id, resp.StatusCode)
				}
				if after := endOffsets(t, adm, topic); after != before+1 {
					t.Fatalf("%s: accepted, end offsets went from %d to %d", id, before, after)
				}
				if cnt.get(id) != 1 {
					t.Fatalf("%s: accepted, handled %d times", id, cnt.get(id))
				}
			}

			refused("none", "")
			refused("wrong", "Bearer "+newToken)
			refused("prefix", "Bearer "+oldToken[:len(oldToken)-1])
			refused("basic", "Basic "+oldToken)
			refused("bare", oldToken)
			accepted("right", "Bearer "+oldToken)
			accepted("scheme-case", "bearer "+oldToken)

			// Rotation: the old token is refused within a few seconds, the
			// new one accepted, with no restart.
			writeToken(t, tokenFile, newToken)
			deadline := time.Now().Add(10 * time.Second)
			for {
				resp := postAuth(t, addr, "Bearer "+oldToken, []byte("{}")) // never publishable
				if resp.StatusCode == http.StatusUnauthorized {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("the old token still answered %d after the rotation", resp.StatusCode)
				}
				time.Sleep(100 * time.Millisecond)
			}
			refused("old", "Bearer "+oldToken)
			accepted("new", "Bearer "+newToken)

			// A rotation to an empty file keeps the token in use.
			writeToken(t, tokenFile, "")
			time.Sleep(1100 * time.Millisecond)
			accepted("kept", "Bearer "+newToken)

			if n := ingestOutcome(t, rt, "unauthorized"); n < 6 {
				t.Errorf("wowd_ingest_requests_total{outcome=unauthorized} = %v, want at least 6", n)
			}
			if n := ingestOutcome(t, rt, "accepted"); n != 4 {
				t.Errorf("wowd_ingest_requests_total{outcome=accepted} = %v, want 4", n)
			}

			stopRT(t, rt)
			stopped = true
			if logs.Len() == 0 {
				t.Fatal("no logs observed")
			}
			for _, e := range logs.All() {
				line := e.Message + " " + fmt.Sprint(e.ContextMap())
				for _, tok := range []string{oldToken, newToken, "s3cret"} {
					if strings.Contains(line, tok) {
						t.Errorf("a log line holds a token: %s", line)
					}
				}
			}
		})
	}
}

// TestIngestTokenFileUnusable: an empty or missing token file is a
// configuration error naming the key, and does not show the file's content.
func TestIngestTokenFileUnusable(t *testing.T) {
	c := newCluster(t, kfake.SeedTopics(1, "wow.example.cart.event"))
	cnt := &counter{n: map[string]int{}}
	var reg handler.Registry
	reg.Register(cnt.spec())
	dir := t.TempDir()
	empty := filepath.Join(dir, "empty")
	if err := os.WriteFile(empty, []byte(" \n"), 0o600); err != nil {
		t.Fatal(err)
	}
	two := filepath.Join(dir, "two")
	if err := os.WriteFile(two, []byte("s3cret one\ns3cret two\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, file := range []string{empty, two, filepath.Join(dir, "missing")} {
		rt, err := New(authConfig(t, c, &reg, "127.0.0.1:0", file), &reg, zap.NewNop(), "test")
		var ce *ConfigError
		if !errors.As(err, &ce) || ce.Path != "wow.ingest.token-file" {
			if rt != nil {
				stopRT(t, rt)
			}
			t.Fatalf("%s: New returned %v, want a ConfigError on wow.ingest.token-file", filepath.Base(file), err)
		}
		if strings.Contains(err.Error(), "s3cret") {
			t.Errorf("the error shows the file's content: %v", err)
		}
	}
}
