package deploy

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/wowd/wowd/internal/proctest"
	"github.com/wowd/wowd/internal/testwait"
)

// TestMetricsAgainstPrometheus runs a real Prometheus server scraping
// running wowd processes, with the alert rules loaded, and checks that
// every metric the dashboard and the rules reference has series.
//
// Process A is `wowd dev --demo`: the embedded broker and demo traffic.
// Process B is `wowd run` against A's broker, handling the traffic with the
// http handler and a sink served by the test. Both are scraped. The Kafka
// client's error counters only exist after an error, so once B has consumed
// the test kills A: B's clients then count read errors, disconnects and
// failed connection attempts, as they would in a broker outage.
func TestMetricsAgainstPrometheus(t *testing.T) {
	prometheus := needTool(t, "prometheus", "apt-get install prometheus")
	bin := wowdBinary(t)
	dir := t.TempDir()
	began := time.Now()

	brokerPort, metricsA, metricsB, promPort := proctest.FreePort(t), proctest.FreePort(t), proctest.FreePort(t), proctest.FreePort(t)

	sink := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		time.Sleep(time.Millisecond)
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(sink.Close)

	const contexts = `
  contexts:
    example-service:
      alias: example
      aggregates: [cart, order]`
	cfgA := filepath.Join(dir, "a.yaml")
	writeFile(t, cfgA, fmt.Sprintf(`wow:
  service: deploy-test-broker
  kafka:
    bootstrap-servers: [127.0.0.1:%d]%s
  dispatchers:
    discard:
      topics: [event]
      handler: {type: discard}
  metrics:
    listen: 127.0.0.1:%d
  log: {level: warn, format: console}
  shutdown: {timeout: 5s}
  dev: {partitions: 4}
`, brokerPort, contexts, metricsA))
	cfgB := filepath.Join(dir, "b.yaml")
	writeFile(t, cfgB, fmt.Sprintf(`wow:
  service: deploy-test
  kafka:
    bootstrap-servers: [127.0.0.1:%d]
    commit-interval: 200ms%s
  dispatchers:
    projection:
      topics: [event]
      handler:
        type: http
        url: %s/wow
        request-timeout: 2s
  metrics:
    listen: 127.0.0.1:%d
  log: {level: warn, format: console}
  shutdown: {timeout: 5s}
`, brokerPort, contexts, sink.URL, metricsB))

	a := start(t, "wowd-dev", []string{bin, "dev", "--demo", "--config", cfgA}, nil)
	testwait.NoError(t, 30*time.Second, 200*time.Millisecond, "wowd dev to be ready", func() error {
		if a.exited() {
			t.Fatal("wowd dev exited")
		}
		return httpOK(fmt.Sprintf("http://127.0.0.1:%d/readyz", metricsA))
	})
	b := start(t, "wowd-run", []string{bin, "run", "--config", cfgB}, nil)
	testwait.NoError(t, 30*time.Second, 200*time.Millisecond, "wowd run to be ready", func() error {
		if b.exited() {
			t.Fatal("wowd run exited")
		}
		return httpOK(fmt.Sprintf("http://127.0.0.1:%d/readyz", metricsB))
	})

	promCfg := filepath.Join(dir, "prometheus.yml")
	writeFile(t, promCfg, fmt.Sprintf(`global:
  scrape_interval: 1s
  evaluation_interval: 1s
rule_files:
  - %s
scrape_configs:
  - job_name: wowd
    static_configs:
      - targets: ["127.0.0.1:%d", "127.0.0.1:%d"]
        labels: {namespace: deploy-test}
`, path("deploy/prometheus/wowd.rules.yml"), metricsA, metricsB))
	start(t, "prometheus", []string{prometheus,
		"--config.file=" + promCfg,
		"--storage.tsdb.path=" + filepath.Join(dir, "tsdb"),
		"--web.listen-address=127.0.0.1:" + strconv.Itoa(promPort),
	}, nil)
	api := fmt.Sprintf("http://127.0.0.1:%d/api/v1/", promPort)
	testwait.NoError(t, 30*time.Second, 200*time.Millisecond, "Prometheus to be ready", func() error {
		return httpOK(fmt.Sprintf("http://127.0.0.1:%d/-/ready", promPort))
	})

	// Both targets up, and B has handled and fetched something.
	testwait.NoError(t, 60*time.Second, 200*time.Millisecond, "both wowd targets up with data", func() error {
		up, err := instantQuery(api, `sum(up{job="wowd"})`)
		if err != nil {
			return err
		}
		if up != 2 {
			return fmt.Errorf("%v of 2 targets up", up)
		}
		for _, q := range []string{
			fmt.Sprintf(`sum(wowd_messages_total{instance="127.0.0.1:%d",outcome="handled"})`, metricsB),
			fmt.Sprintf(`sum(wowd_kafka_fetch_bytes_total{instance="127.0.0.1:%d"})`, metricsB),
		} {
			if v, err := instantQuery(api, q); err != nil || v <= 0 {
				return fmt.Errorf("%s = %v (%v)", q, v, err)
			}
		}
		return nil
	})

	// The Helm chart's KEDA query (autoscaling.scaler=prometheus, release
	// wowd: job="wowd") gives the one number KEDA needs.
	t.Run("keda query", func(t *testing.T) {
		q := prometheusQuery(t, "deploy-test")
		testwait.NoError(t, 30*time.Second, 200*time.Millisecond, "the ScaledObject's query to give one sample", func() error {
			n, v, err := vectorQuery(api, q)
			switch {
			case err != nil:
				return err
			case n != 1:
				return fmt.Errorf("%s: %d samples, KEDA needs one", q, n)
			case v < 0:
				return fmt.Errorf("%s = %v", q, v)
			}
			return nil
		})
	})

	// The rules loaded, and evaluate against real series without errors.
	testwait.NoError(t, 30*time.Second, 200*time.Millisecond, "the alert rules to be evaluated", func() error {
		return rulesHealthy(api, len(ruleExprs(t)))
	})

	// A broker outage, for the client's error counters.
	a.kill()
	testwait.NoError(t, 60*time.Second, 200*time.Millisecond, "the Kafka client's error counters", func() error {
		for _, m := range []string{"wowd_kafka_connect_errors_total", "wowd_kafka_read_errors_total", "wowd_kafka_disconnects_total"} {
			if n, err := seriesCount(api, m, began); err != nil || n == 0 {
				return fmt.Errorf("%s: %d series (%v)", m, n, err)
			}
		}
		return nil
	})

	names := referencedMetrics(append(dashboardExprs(t), ruleExprs(t)...))
	if len(names) < 10 {
		t.Fatalf("only %d metric names found in the dashboard and the rules: %v", len(names), names)
	}
	var missing []string
	for _, n := range names {
		cnt, err := seriesCount(api, n, began)
		if err != nil {
			t.Fatalf("series of %s: %v", n, err)
		}
		if cnt == 0 {
			missing = append(missing, n)
		}
	}
	if len(missing) > 0 {
		t.Errorf("the dashboard or the rules use metrics wowd does not export (no series in Prometheus): %s", strings.Join(missing, ", "))
	}
	if err := rulesHealthy(api, len(ruleExprs(t))); err != nil {
		t.Errorf("after the outage: %v", err)
	}
	if t.Failed() {
		return
	}
	t.Logf("%d metric names of the dashboard and the rules all have series in Prometheus; %d alert rules evaluate", len(names), len(ruleExprs(t)))
}

func writeFile(t *testing.T, name, content string) {
	t.Helper()
	if err := os.WriteFile(name, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// promGet calls the Prometheus HTTP API and decodes data.
func promGet(api, endpoint string, q url.Values, data any) error {
	c := http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get(api + endpoint + "?" + q.Encode())
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	var r struct {
		Status string          `json:"status"`
		Error  string          `json:"error"`
		Data   json.RawMessage `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
		return fmt.Errorf("%s: %s: %v", endpoint, resp.Status, err)
	}
	if r.Status != "success" {
		return fmt.Errorf("%s: %s", endpoint, r.Error)
	}
	return json.Unmarshal(r.Data, data)
}

// instantQuery returns the value of a query with one scalar-like result.
func instantQuery(api, query string) (float64, error) {
	var data struct {
		Result []struct {
			Value [2]any `json:"value"`
		} `json:"result"`
	}
	if err := promGet(api, "query", url.Values{"query": {query}}, &data); err != nil {
		return 0, err
	}
	if len(data.Result) == 0 {
		return 0, fmt.Errorf("%s: no result", query)
	}
	s, _ := data.Result[0].Value[1].(string)
	return strconv.ParseFloat(s, 64)
}

// vectorQuery returns the number of samples of an instant query and the
// first one's value.
func vectorQuery(api, query string) (int, float64, error) {
	var data struct {
		Result []struct {
			Value [2]any `json:"value"`
		} `json:"result"`
	}
	if err := promGet(api, "query", url.Values{"query": {query}}, &data); err != nil {
		return 0, 0, err
	}
	if len(data.Result) == 0 {
		return 0, 0, nil
	}
	s, _ := data.Result[0].Value[1].(string)
	v, err := strconv.ParseFloat(s, 64)
	return len(data.Result), v, err
}

// seriesCount returns how many series of metric name Prometheus has seen
// since start (series of a stopped target count: they existed).
func seriesCount(api, name string, since time.Time) (int, error) {
	var data []map[string]string
	q := url.Values{
		"match[]": {fmt.Sprintf(`{__name__=%q}`, name)},
		"start":   {strconv.FormatInt(since.Add(-time.Minute).Unix(), 10)},
		"end":     {strconv.FormatInt(time.Now().Add(time.Minute).Unix(), 10)},
	}
	if err := promGet(api, "series", q, &data); err != nil {
		return 0, err
	}
	return len(data), nil
}

// rulesHealthy checks that Prometheus loaded want rules and evaluated each
// without an error.
func rulesHealthy(api string, want int) error {
	var data struct {
		Groups []struct {
			Rules []struct {
				Name           string `json:"name"`
				Health         string `json:"health"`
				LastError      string `json:"lastError"`
				LastEvaluation string `json:"lastEvaluation"`
			} `json:"rules"`
		} `json:"groups"`
	}
	if err := promGet(api, "rules", nil, &data); err != nil {
		return err
	}
	n := 0
	for _, g := range data.Groups {
		for _, r := range g.Rules {
			n++
			if r.Health != "ok" {
				return fmt.Errorf("rule %s: health %q %s", r.Name, r.Health, r.LastError)
			}
		}
	}
	if n != want {
		return fmt.Errorf("Prometheus loaded %d rules, the file has %d", n, want)
	}
	return nil
}
