package main_test

import (
	"bytes"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/wowd/wowd/internal/proctest"
	"github.com/wowd/wowd/internal/testwait"
)

// TestSecretsStayOutOfLogs runs `wowd run` at debug level with every secret
// wowd takes set to a distinctive value — the Kafka SASL password (inline
// from the environment, or from password-file), the ingest bearer token
// file, the http sink's headers, headers-from-file and headers-from-env,
// and a password in the sink's URL — and has each of them used: the
// receivers join their group over SASL, an ingest request with the token
// (after one with a wrong token) is handled by the sink, which sees every
// header, after a failed first try that is retried. Then neither the run's
// output nor `wowd config print` (also with the password given by --set)
// holds any of the secrets.
func TestSecretsStayOutOfLogs(t *testing.T) {
	const (
		password    = "sEcReT-kafka-password-5f1c"
		ingestToken = "sEcReT-ingest-token-88a0"
		wrongToken  = "sEcReT-wrong-token-77b2"
		staticHdr   = "sEcReT-static-header-2d4e"
		fileHdr     = "sEcReT-file-header-9c3a"
		envHdr      = "sEcReT-env-header-1b6f"
		urlPassword = "sEcReT-url-password-6e0d"
	)
	secrets := []string{password, ingestToken, wrongToken, staticHdr, fileHdr, envHdr, urlPassword}

	for _, from := range []string{"environment", "password-file"} {
		t.Run("password from "+from, func(t *testing.T) {
			c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.EnableSASL(),
				kfake.Superuser("SCRAM-SHA-256", "wowd", password), kfake.SeedTopics(2, "wow.example.cart.event"))
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()

			var (
				mu   sync.Mutex // guards seen and calls
				seen http.Header
				n    int
			)
			sink := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				mu.Lock()
				defer mu.Unlock()
				n++
				seen = r.Header.Clone()
				if n == 1 {
					w.WriteHeader(http.StatusServiceUnavailable) // retried
				}
			}))
			defer sink.Close()

			dir := t.TempDir()
			write := func(name, v string) string {
				p := filepath.Join(dir, name)
				if err := os.WriteFile(p, []byte(v+"\n"), 0o600); err != nil {
					t.Fatal(err)
				}
				return p
			}
			tokenFile := write("ingest-token", ingestToken)
			headerFile := write("sink-auth", "Bearer "+fileHdr)
			saslPassword := ""
			env := []string{"WOWD_TEST_SINK_SECRET=" + envHdr}
			if from == "environment" {
				env = append(env, "WOW_KAFKA_SASL_PASSWORD="+password)
			} else {
				saslPassword = "      password-file: " + write("kafka-password", password) + "\n"
			}
			metricsPort, ingestPort := proctest.FreePort(t), proctest.FreePort(t)
			cfg := proctest.WriteConfig(t, fmt.Sprintf(`
wow:
  service: secrets
  kafka:
    bootstrap-servers: [%s]
    commit-interval: 100ms
    heartbeat-interval: 200ms
    sasl:
      mechanism: scram-sha-256
      username: wowd
%s  contexts:
    example-service:
      alias: example
      aggregates: [cart]
  dispatchers:
    to-sink:
      topics: [event]
      handler:
        type: http
        url: %s/wow
        backoff-initial: 10ms
        headers: {X-Static: %s}
        headers-from-file: {Authorization: %s}
        headers-from-env: {X-Env: WOWD_TEST_SINK_SECRET}
  metrics:
    listen: 127.0.0.1:%d
  ingest:
    enabled: true
    listen: 127.0.0.1:%d
    token-file: %s
  log:
    level: debug
  shutdown:
    timeout: 10s
`, c.ListenAddrs()[0], saslPassword, strings.Replace(sink.URL, "http://", "http://wowd:"+urlPassword+"@", 1), staticHdr, headerFile, metricsPort, ingestPort, tokenFile))

			cmd, exited, out := startRun(t, cfg, env...)
			proctest.WaitReady(t, "wowd", metricsPort, exited)

			ingest := func(token string) int {
				t.Helper()
				body := `{"id":"m-1","contextName":"example-service","aggregateName":"cart","header":{},"aggregateId":"cart-1",` +
					`"tenantId":"(0)","ownerId":"","spaceId":"","commandId":"c-1","requestId":"c-1","version":1,` +
					`"body":[{"id":"e-1","name":"cart_item_added","revision":"0.0.1","bodyType":"x.CartItemAdded","body":{"n":1}}],"createTime":1755868563012}`
				req, err := http.NewRequest(http.MethodPost, fmt.Sprintf("http://127.0.0.1:%d/v1/messages/event", ingestPort), bytes.NewReader([]byte(body)))
				if err != nil {
					t.Fatal(err)
				}
				req.Header.Set("Authorization", "Bearer "+token)
				cl := &http.Client{Timeout: 30 * time.Second}
				resp, err := cl.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				resp.Body.Close()
				return resp.StatusCode
			}
			if code := ingest(wrongToken); code != http.StatusUnauthorized {
				t.Fatalf("a wrong ingest token: %d, want 401", code)
			}
			if code := ingest(ingestToken); code != http.StatusAccepted {
				t.Fatalf("the ingest token: %d, want 202", code)
			}
			// Handled here at once, or, when the receiver has not read the
			// parked state yet (just after start), given up to Kafka and
			// handled from there by the partition's owner, this process.
			testwait.For(t, 15*time.Second, "a failed try and its retry at the sink", func() bool {
				mu.Lock()
				defer mu.Unlock()
				return n >= 2
			})
			mu.Lock()
			got, calls := seen, n
			mu.Unlock()
			if calls < 2 {
				t.Errorf("the sink was called %d times, want a failed try and its retry", calls)
			}
			if got.Get("X-Static") != staticHdr || got.Get("Authorization") != "Bearer "+fileHdr || got.Get("X-Env") != envHdr {
				t.Errorf("the sink did not get the secret headers: %v", got)
			}

			proctest.Terminate(t, "wowd", cmd.Process, exited, 15*time.Second)
			logs := out.String()
			if !strings.Contains(logs, `"level":"debug"`) {
				t.Errorf("no debug lines in the output: the test sees less than it should")
			}
			args := []string{"config", "print", "--config", cfg}
			if from == "environment" {
				args = append(args, "--set", "wow.kafka.sasl.password="+password)
			}
			printCmd := exec.Command(wowd.Path(t), args...)
			printCmd.Env = cmd.Env
			printed, code := proctest.Run(t, printCmd)
			if code != 0 || !strings.Contains(printed, "******") {
				t.Fatalf("config print: exit %d:\n%s", code, printed)
			}
			for _, s := range secrets {
				for what, text := range map[string]string{"the run's output": logs, "config print": printed} {
					if i := strings.Index(text, s); i >= 0 {
						t.Errorf("%s holds the secret %q: …%s…", what, s, text[max(0, i-200):i])
					}
				}
			}
		})
	}
}
