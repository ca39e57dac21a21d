package deploy

import (
	"encoding/json"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"

	"github.com/wowd/wowd/internal/metrics"
)

// kpromMetrics are the franz-go client metrics (kprom, namespace
// wowd_kafka) the dashboard and the rules may use. The Prometheus test
// proves the ones they use are really exported.
var kpromMetrics = map[string]bool{
	"wowd_kafka_connects_total":               true,
	"wowd_kafka_connect_errors_total":         true,
	"wowd_kafka_disconnects_total":            true,
	"wowd_kafka_write_errors_total":           true,
	"wowd_kafka_write_bytes_total":            true,
	"wowd_kafka_read_errors_total":            true,
	"wowd_kafka_read_bytes_total":             true,
	"wowd_kafka_fetch_bytes_total":            true,
	"wowd_kafka_buffered_fetch_bytes":         true,
	"wowd_kafka_buffered_fetch_records_total": true,
}

// catalogName maps a referenced series name to its metric in
// metrics.Catalog: histogram series lose their _bucket, _sum or _count.
func catalogName(name string, catalog map[string]metrics.Doc) (string, bool) {
	if _, ok := catalog[name]; ok {
		return name, true
	}
	for _, suffix := range []string{"_bucket", "_sum", "_count"} {
		if base, ok := strings.CutSuffix(name, suffix); ok {
			if d, ok := catalog[base]; ok && d.Type == "histogram" {
				return base, true
			}
		}
	}
	return "", false
}

// checkKnown fails for every referenced name that is neither a wowd metric
// nor a known Kafka client metric, and returns the wowd metrics referenced.
func checkKnown(t *testing.T, what string, names []string) map[string]bool {
	t.Helper()
	catalog := map[string]metrics.Doc{}
	for _, d := range metrics.Catalog() {
		catalog[d.Name] = d
	}
	used := map[string]bool{}
	for _, n := range names {
		if strings.HasPrefix(n, "wowd_kafka_") {
			if !kpromMetrics[n] {
				t.Errorf("%s uses %s, not a Kafka client metric wowd exports", what, n)
			}
			continue
		}
		base, ok := catalogName(n, catalog)
		if !ok {
			t.Errorf("%s uses %s, which is not in metrics.Catalog()", what, n)
			continue
		}
		if d := catalog[base]; d.Type == "histogram" && n == base {
			t.Errorf("%s uses the histogram %s without _bucket, _sum or _count", what, n)
		}
		used[base] = true
	}
	return used
}

// TestDashboard checks the Grafana dashboard's structure and that it shows
// what operators need, from metrics wowd defines.
func TestDashboard(t *testing.T) {
	b, err := os.ReadFile(path("deploy/grafana/wowd-dashboard.json"))
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		UID        string `json:"uid"`
		Title      string `json:"title"`
		Templating struct {
			List []struct {
				Name, Type string
			} `json:"list"`
		} `json:"templating"`
		Panels []struct {
			ID         int    `json:"id"`
			Type       string `json:"type"`
			Title      string `json:"title"`
			Datasource *struct {
				UID string `json:"uid"`
			} `json:"datasource"`
			GridPos struct{ X, Y, W, H int } `json:"gridPos"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("deploy/grafana/wowd-dashboard.json: %v", err)
	}
	if d.UID == "" || d.Title == "" {
		t.Error("the dashboard has no uid or title")
	}
	vars := map[string]string{}
	for _, v := range d.Templating.List {
		vars[v.Name] = v.Type
	}
	if vars["datasource"] != "datasource" {
		t.Error("no datasource variable: the dashboard would be tied to one data source")
	}
	ids := map[int]bool{}
	for _, p := range d.Panels {
		if ids[p.ID] {
			t.Errorf("panel id %d twice", p.ID)
		}
		ids[p.ID] = true
		if p.GridPos.W <= 0 || p.GridPos.X+p.GridPos.W > 24 {
			t.Errorf("panel %q: gridPos %+v outside the 24 columns", p.Title, p.GridPos)
		}
		if p.Type == "row" {
			continue
		}
		if p.Datasource == nil || p.Datasource.UID != "${datasource}" {
			t.Errorf("panel %q does not use the datasource variable", p.Title)
		}
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, q := range p.Targets {
			if q.Expr == "" {
				t.Errorf("panel %q has an empty query", p.Title)
			}
		}
	}
	used := checkKnown(t, "the dashboard", referencedMetrics(dashboardExprs(t)))
	// What the issue asks the dashboard to show.
	for _, m := range []string{
		"wowd_messages_total",               // throughput per dispatcher and outcome, dead letters
		"wowd_handler_duration_seconds",     // latency percentiles
		"wowd_receiver_in_flight",           // in flight vs window
		"wowd_receiver_max_in_flight",       //
		"wowd_receiver_paused",              // paused receivers
		"wowd_commit_lag_records",           // commit lag
		"wowd_executor_workers",             // executor workers and mailboxes
		"wowd_executor_mailboxes",           //
		"wowd_receiver_max_key_backlog",     // the hot-aggregate caveat
		"wowd_receiver_assigned_partitions", //
	} {
		if !used[m] {
			t.Errorf("the dashboard does not show %s", m)
		}
	}
	exprs := strings.Join(dashboardExprs(t), "\n")
	for _, s := range []string{`outcome=~"dead_lettered`, "histogram_quantile(0.99", "wowd_kafka_connect_errors_total", "wowd_kafka_read_errors_total"} {
		if !strings.Contains(exprs, s) {
			t.Errorf("the dashboard has no query with %s", s)
		}
	}
}

// TestAlertRules checks the rule file's content: the alerts the issue asks
// for, labels and annotations, and metrics wowd defines.
func TestAlertRules(t *testing.T) {
	rf := readRules(t)
	alerts := map[string]bool{}
	for _, g := range rf.Groups {
		for _, r := range g.Rules {
			if r.Alert == "" {
				continue
			}
			alerts[r.Alert] = true
			if sev := r.Labels["severity"]; sev != "warning" && sev != "critical" {
				t.Errorf("%s: severity %q, want warning or critical", r.Alert, sev)
			}
			if r.Annotations["summary"] == "" {
				t.Errorf("%s has no summary", r.Alert)
			}
		}
	}
	for _, a := range []string{
		"WowdReceiverStalled", "WowdReceiverSaturated", // paused or saturated for long
		"WowdCommitLagGrowing",     // commit lag growing
		"WowdDeadLetters",          // dead letters appearing
		"WowdHandlerErrorRatio",    // handler error ratio
		"WowdNoPartitionsAssigned", // no partitions assigned
	} {
		if !alerts[a] {
			t.Errorf("no alert %s", a)
		}
	}
	checkKnown(t, "the alert rules", referencedMetrics(ruleExprs(t)))

	// Every alert has a unit test.
	tests, err := os.ReadFile(path("deploy/prometheus/wowd.rules.test.yml"))
	if err != nil {
		t.Fatal(err)
	}
	for a := range alerts {
		if !strings.Contains(string(tests), "alertname: "+a+"\n") {
			t.Errorf("deploy/prometheus/wowd.rules.test.yml does not test %s", a)
		}
	}
}

// TestPromtool runs promtool check rules and promtool test rules.
func TestPromtool(t *testing.T) {
	promtool := needTool(t, "promtool", "apt-get install prometheus")
	for _, args := range [][]string{
		{"check", "rules", path("deploy/prometheus/wowd.rules.yml")},
		{"test", "rules", path("deploy/prometheus/wowd.rules.test.yml")},
	} {
		out, err := exec.Command(promtool, args...).CombinedOutput()
		if err != nil {
			t.Errorf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
		} else {
			t.Logf("promtool %s %s", args[0], strings.TrimSpace(string(out)))
		}
	}
}

// TestOperationsDocReferences checks that the alerts and metrics
// docs/operations.md names exist.
func TestOperationsDocReferences(t *testing.T) {
	b, err := os.ReadFile(path("docs/operations.md"))
	if err != nil {
		t.Fatal(err)
	}
	alerts := map[string]bool{}
	for _, g := range readRules(t).Groups {
		for _, r := range g.Rules {
			alerts[r.Alert] = true
		}
	}
	for _, a := range regexp.MustCompile(`\bWowd[A-Z][A-Za-z]+`).FindAllString(string(b), -1) {
		if !alerts[a] {
			t.Errorf("docs/operations.md names the alert %s, which deploy/prometheus/wowd.rules.yml lacks", a)
		}
	}
	var names []string
	for _, n := range referencedMetrics([]string{string(b)}) {
		if n != "wowd_kafka_" {
			names = append(names, n)
		}
	}
	checkKnown(t, "docs/operations.md", names)
}
