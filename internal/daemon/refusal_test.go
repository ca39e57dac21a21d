package daemon

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.uber.org/zap/zaptest"

	"github.com/wowd/wowd/handler"
	"github.com/wowd/wowd/internal/config"
	"github.com/wowd/wowd/internal/park"
	"github.com/wowd/wowd/internal/tlsconf/tlstest"
)

// TestUnauthenticatedWritesReachNoTopic, for each listener ingest can be
// served on and each way it authenticates (a token on its own listener, a
// token on the loopback metrics listener, mutual TLS on its own listener):
// unauthenticated writes of every message kind are refused, the handler
// never runs, and Kafka holds nothing — every topic of the cluster is read
// back from the start. One authenticated write then is the only record
// read back, which shows the reading would have seen the others.
func TestUnauthenticatedWritesReachNoTopic(t *testing.T) {
	const token = "t0ken-for-refusals"
	for _, tt := range []struct {
		name   string
		listen string // "" serves ingest on the metrics listener
		mtls   bool
	}{
		{"token, own listener", "127.0.0.1:0", false},
		{"token, metrics listener", "", false},
		{"mutual TLS, own listener", "127.0.0.1:0", true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.AllowAutoTopicCreation(), kfake.SeedTopics(2,
				"wow.example.cart.command", "wow.example.cart.event", "wow.example.cart.state"))
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			dir := t.TempDir()
			tokenFile := filepath.Join(dir, "token")
			if err := os.WriteFile(tokenFile, []byte(token), 0o600); err != nil {
				t.Fatal(err)
			}
			auth := fmt.Sprintf("    token-file: %q\n", tokenFile)
			listen := ""
			if tt.listen != "" {
				listen = "    listen: " + tt.listen + "\n"
			}
			clientCA := tlstest.NewCA(t, "producers")
			server := tlstest.WriteServer(t, dir, "ingest", clientCA)
			if tt.mtls {
				auth = fmt.Sprintf("    tls: {cert-file: %q, key-file: %q, client-ca-file: %q}\n", server.CertFile, server.KeyFile, server.ClientCAFile)
			}
			cnt := &counter{n: map[string]int{}}
			var reg handler.Registry
			reg.Register(cnt.spec())
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
      topics: [command, event, state]
      handler: {type: count}
  metrics:
    listen: 127.0.0.1:0
  ingest:
    enabled: true
%s%s`, c.ListenAddrs()[0], listen, auth), "test.yaml", &reg, nil)
			if err != nil {
				t.Fatal(err)
			}
			rt, err := New(cfg, &reg, zaptest.NewLogger(t), "test")
			if err != nil {
				t.Fatal(err)
			}
			rt.Start(context.Background())
			defer stopRT(t, rt)
			addr := rt.IngestAddr()
			if tt.listen == "" {
				addr = rt.MetricsAddr()
			}

			plain := &http.Client{Timeout: 10 * time.Second}
			stranger := tlstest.NewCA(t, "strangers").Client(t, "stranger")
			type attempt struct {
				name, scheme, auth string
				client             *http.Client
			}
			attempts := []attempt{
				{"no token", "http", "", plain},
				{"wrong token", "http", "Bearer not-" + token, plain},
				{"basic scheme", "http", "Basic " + token, plain},
			}
			if tt.mtls {
				attempts = []attempt{
					{"plain HTTP", "http", "", plain},
					{"plain HTTP with a token", "http", "Bearer " + token, plain},
					{"no client certificate", "https", "", httpsClient(server, nil)},
					{"another CA's certificate", "https", "", httpsClient(server, &stranger)},
				}
			}
			write := func(a attempt, kind, id string) (int, error) {
				body := event(id, "cart-"+id, "") // an event: its shape does not matter to a refusal, which comes first
				req, err := http.NewRequest(http.MethodPost, a.scheme+"://"+addr+"/v1/messages/"+kind, bytes.NewReader(body))
				if err != nil {
					t.Fatal(err)
				}
				if a.auth != "" {
					req.Header.Set("Authorization", a.auth)
				}
				resp, err := a.client.Do(req)
				if err != nil {
					return 0, err
				}
				defer resp.Body.Close()
				_, _ = io.Copy(io.Discard, resp.Body)
				return resp.StatusCode, nil
			}
			for _, a := range attempts {
				for _, kind := range []string{"command", "event", "state"} {
					id := strings.ReplaceAll(a.name, " ", "-") + "-" + kind
					code, err := write(a, kind, id)
					switch {
					case tt.mtls && a.scheme == "https" && err != nil: // refused in the handshake
					case tt.mtls && a.scheme == "http" && err == nil && code == http.StatusBadRequest: // not TLS
					case !tt.mtls && err == nil && code == http.StatusUnauthorized:
					default:
						t.Errorf("%s, %s: answered %d, %v; want it refused", a.name, kind, code, err)
					}
					if cnt.get(id) != 0 {
						t.Errorf("%s, %s: refused, yet handled", a.name, kind)
					}
				}
			}
			if n := recordsInCluster(t, c, ""); n != 0 {
				t.Fatalf("after refused writes only, the cluster holds %d records", n)
			}

			ok := attempt{"authenticated", "http", "Bearer " + token, plain}
			if tt.mtls {
				good := clientCA.Client(t, "producer")
				ok = attempt{"authenticated", "https", "", httpsClient(server, &good)}
			}
			if code, err := write(ok, "event", "accepted-one"); err != nil || code != http.StatusAccepted {
				t.Fatalf("the authenticated write: %d, %v", code, err)
			}
			if n := recordsInCluster(t, c, "accepted-one"); n != 1 {
				t.Fatalf("after one accepted write, the cluster holds %d records", n)
			}
		})
	}
}

// recordsInCluster reads every topic of the cluster from the start and
// returns how many records it holds, besides parking's owner records, failing t if one of them is not the
// message with the ID want (none when want is "").
func recordsInCluster(t *testing.T, c *kfake.Cluster, want string) int {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	topics, err := kadm.NewClient(cl).ListTopics(ctx)
	if err != nil {
		t.Fatal(err)
	}
	ends, err := kadm.NewClient(cl).ListEndOffsets(ctx, topics.Names()...)
	if err != nil {
		t.Fatal(err)
	}
	var total int64
	ends.Each(func(o kadm.ListedOffset) { total += o.Offset })
	if total == 0 {
		return 0
	}
	cl.AddConsumeTopics(topics.Names()...)
	n, read := 0, 0
	for int64(read) < total {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("read %d of %d records", read, total)
		}
		fs.EachRecord(func(r *kgo.Record) {
			read++
			if park.IsOwnerKey(string(r.Key)) && strings.HasPrefix(r.Topic, "wowd-parked.") {
				return // parking's own bookkeeping: the owner epoch of an assigned partition
			}
			n++
			if want == "" || !bytes.Contains(r.Value, []byte(`"id":"`+want+`"`)) {
				t.Errorf("%s/%d@%d holds %.200s", r.Topic, r.Partition, r.Offset, r.Value)
			}
		})
	}
	return n
}
