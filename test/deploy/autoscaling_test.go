package deploy

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/wowd/wowd/handler"
	"github.com/wowd/wowd/internal/config"
	"github.com/wowd/wowd/internal/daemon"
	"github.com/wowd/wowd/internal/wow"
)

// scaledObjectCRD is KEDA's ScaledObject CRD, checked in: the chart's
// ScaledObject is validated against its schema.
const scaledObjectCRD = "test/deploy/testdata/schemas/keda.sh_scaledobjects.yaml"

// autoscalingValues configures several dispatchers and contexts, so that
// each rule of the consumer group and topic names is exercised.
const autoscalingValues = "test/deploy/testdata/autoscaling-values.yaml"

// kedaMetadata are the trigger metadata keys KEDA v2.20.2's scalers read
// from a trigger (pkg/scalers/kafka_scaler.go, apache_kafka_scaler.go,
// prometheus_scaler.go: the fields tagged order=triggerMetadata), and the
// ones each requires. A key outside these is ignored by KEDA: a typo.
var kedaMetadata = map[string]struct{ known, required []string }{
	"kafka": {
		known: []string{"bootstrapServers", "consumerGroup", "topic", "partitionLimitation", "lagThreshold",
			"activationLagThreshold", "offsetResetPolicy", "allowIdleConsumers", "excludePersistentLag",
			"scaleToZeroOnInvalidOffset", "limitToPartitionsWithLag", "ensureEvenDistributionOfPartitions",
			"version", "tls", "unsafeSsl", "sasl", "saslTokenProvider", "awsRegion"},
		required: []string{"bootstrapServers", "consumerGroup"},
	},
	"apache-kafka": {
		known: []string{"bootstrapServers", "consumerGroup", "topic", "partitionLimitation", "lagThreshold",
			"activationLagThreshold", "offsetResetPolicy", "allowIdleConsumers", "excludePersistentLag",
			"scaleToZeroOnInvalidOffset", "limitToPartitionsWithLag", "ensureEvenDistributionOfPartitions",
			"sasl", "awsRegion", "tls"},
		required: []string{"bootstrapServers", "consumerGroup"},
	},
	"prometheus": {
		known: []string{"serverAddress", "query", "queryParameters", "threshold", "activationThreshold",
			"namespace", "customHeaders", "ignoreNullValues", "unsafeSsl", "awsRegion", "timeout", "identityOwner"},
		required: []string{"serverAddress", "query", "threshold"},
	},
}

// checkScaledObject checks what every rendered ScaledObject must satisfy
// and returns its triggers: valid against KEDA's CRD, aimed at the
// chart's Deployment, which sets no replicas, with maxReplicaCount at most
// partitions and trigger metadata KEDA knows, as strings.
func checkScaledObject(t *testing.T, objs map[string]map[string]any, partitions int) []map[string]any {
	t.Helper()
	so := objs["ScaledObject"]
	if so == nil {
		t.Fatal("no ScaledObject rendered with autoscaling.enabled")
	}
	if so["apiVersion"] != "keda.sh/v1alpha1" || so["kind"] != "ScaledObject" {
		t.Errorf("ScaledObject is %v %v, want keda.sh/v1alpha1 ScaledObject", so["apiVersion"], so["kind"])
	}
	for _, e := range validateCustomResource(t, path(scaledObjectCRD), so) {
		t.Errorf("ScaledObject against KEDA's CRD schema: %s", e)
	}
	dep := objs["Deployment"]
	ref := get(t, so, "spec", "scaleTargetRef").(map[string]any)
	if ref["name"] != get(t, dep, "metadata", "name") || ref["kind"] != "Deployment" || ref["apiVersion"] != "apps/v1" {
		t.Errorf("scaleTargetRef %v does not name the Deployment %v", ref, get(t, dep, "metadata", "name"))
	}
	if _, ok := get(t, dep, "spec").(map[string]any)["replicas"]; ok {
		t.Error("the Deployment sets replicas though KEDA owns them")
	}
	lo, _ := get(t, so, "spec", "minReplicaCount").(int)
	hi, _ := get(t, so, "spec", "maxReplicaCount").(int)
	if hi < 1 || hi > partitions || lo > hi {
		t.Errorf("minReplicaCount %d, maxReplicaCount %d: want 1 ≤ max ≤ partitions %d and min ≤ max", lo, hi, partitions)
	}

	// Scale-down is paced by the drain: the stabilization window and the
	// policy period both outlast wow.shutdown.timeout.
	var wc wowConfig
	if err := yaml.Unmarshal([]byte(get(t, objs["ConfigMap/wowd"], "data", "wowd.yaml").(string)), &wc); err != nil {
		t.Fatal(err)
	}
	down := get(t, so, "spec", "advanced", "horizontalPodAutoscalerConfig", "behavior", "scaleDown")
	drain := wc.shutdownTimeout(t)
	if w, _ := get(t, down, "stabilizationWindowSeconds").(int); time.Duration(w)*time.Second <= drain {
		t.Errorf("scaleDown.stabilizationWindowSeconds %d is not above wow.shutdown.timeout %s", w, drain)
	}
	if p, _ := get(t, down, "policies", 0, "periodSeconds").(int); time.Duration(p)*time.Second <= drain {
		t.Errorf("scaleDown policy periodSeconds %d is not above wow.shutdown.timeout %s", p, drain)
	}

	var triggers []map[string]any
	for i, x := range get(t, so, "spec", "triggers").([]any) {
		tr := x.(map[string]any)
		typ, _ := tr["type"].(string)
		keys, ok := kedaMetadata[typ]
		if !ok {
			t.Errorf("trigger %d: type %q", i, typ)
			continue
		}
		md, _ := tr["metadata"].(map[string]any)
		for k, v := range md {
			if !slices.Contains(keys.known, k) {
				t.Errorf("trigger %d (%s): metadata %q is not read by KEDA's %s scaler", i, typ, k, typ)
			}
			if _, ok := v.(string); !ok {
				t.Errorf("trigger %d: metadata %s = %v (%T), want a string", i, k, v, v)
			}
		}
		for _, k := range keys.required {
			if s, _ := md[k].(string); s == "" {
				t.Errorf("trigger %d (%s): metadata %s missing", i, typ, k)
			}
		}
		triggers = append(triggers, tr)
	}
	if pdb := objs["PodDisruptionBudget"]; pdb != nil {
		checkPDB(t, objs)
	}
	return triggers
}

// checkPDB checks the PodDisruptionBudget: policy/v1, exactly one of
// maxUnavailable and minAvailable, selecting the Deployment's pods.
func checkPDB(t *testing.T, objs map[string]map[string]any) {
	t.Helper()
	pdb := objs["PodDisruptionBudget"]
	if pdb["apiVersion"] != "policy/v1" {
		t.Errorf("PodDisruptionBudget apiVersion %v, want policy/v1", pdb["apiVersion"])
	}
	for _, e := range validateObjectMeta(pdb["metadata"]) {
		t.Errorf("PodDisruptionBudget: %s", e)
	}
	spec := get(t, pdb, "spec").(map[string]any)
	_, hasMax := spec["maxUnavailable"]
	_, hasMin := spec["minAvailable"]
	if hasMax == hasMin {
		t.Errorf("PodDisruptionBudget spec %v: want exactly one of maxUnavailable and minAvailable", spec)
	}
	for k, v := range spec {
		switch k {
		case "maxUnavailable", "minAvailable":
			switch v := v.(type) {
			case int:
				if v < 0 {
					t.Errorf("PodDisruptionBudget %s %d", k, v)
				}
			case string:
				if !strings.HasSuffix(v, "%") {
					t.Errorf("PodDisruptionBudget %s %q: want a number or a percentage", k, v)
				}
			default:
				t.Errorf("PodDisruptionBudget %s %v (%T)", k, v, v)
			}
		case "unhealthyPodEvictionPolicy":
			if v != "IfHealthyBudget" && v != "AlwaysAllow" {
				t.Errorf("PodDisruptionBudget unhealthyPodEvictionPolicy %v", v)
			}
		case "selector":
		default:
			t.Errorf("PodDisruptionBudget spec.%s: unknown field", k)
		}
	}
	sel, _ := get(t, pdb, "spec", "selector", "matchLabels").(map[string]any)
	pod, _ := get(t, objs["Deployment"], "spec", "template", "metadata", "labels").(map[string]any)
	if len(sel) == 0 {
		t.Error("the PodDisruptionBudget selects every pod of the namespace")
	}
	for k, v := range sel {
		if pod[k] != v {
			t.Errorf("the PodDisruptionBudget selects %s=%v, which the Deployment's pods do not have", k, v)
		}
	}
}

// receiver is one dispatcher × context of a configuration: its consumer
// group and topics, as wowd derives them.
type receiver struct {
	group  string
	topics []string
}

// receivers returns the receivers of a rendered chart's configuration, by
// consumer group, from wowd's own code.
func receivers(t *testing.T, objs map[string]map[string]any) (*config.Config, map[string]receiver) {
	t.Helper()
	data := get(t, objs["ConfigMap/wowd"], "data", "wowd.yaml").(string)
	cfg, err := config.Parse([]byte(data), "wowd.yaml", handler.Default(), nil)
	if err != nil {
		t.Fatalf("the rendered configuration: %v", err)
	}
	out := map[string]receiver{}
	for name, d := range cfg.Dispatchers {
		for _, c := range d.Contexts {
			bc := cfg.Contexts[c]
			aggs := d.AggregatesOf(bc)
			if len(aggs) == 0 {
				continue // wowd makes no receiver (daemon.New)
			}
			r := receiver{group: daemon.GroupID(cfg, name, bc.Alias)}
			for _, agg := range aggs {
				for _, k := range d.Topics {
					kind, err := handler.ParseKind(k)
					if err != nil {
						t.Fatal(err)
					}
					r.topics = append(r.topics, wow.Topic(cfg.Kafka.TopicPrefix, bc.Alias, agg, kind))
				}
			}
			sort.Strings(r.topics)
			if _, dup := out[r.group]; dup {
				t.Fatalf("two receivers share group %s", r.group)
			}
			out[r.group] = r
		}
	}
	var all []string
	for _, r := range out {
		all = append(all, r.topics...)
	}
	sort.Strings(all)
	if !slices.Equal(slices.Compact(all), daemon.Topics(cfg)) {
		t.Fatalf("the receivers' topics %v are not daemon.Topics %v", all, daemon.Topics(cfg))
	}
	return cfg, out
}

func splitSorted(s string) []string {
	l := strings.Split(s, ",")
	sort.Strings(l)
	return l
}

// TestHelmAutoscalingKafka renders the ScaledObject with KEDA's Kafka
// scalers: one trigger per consumer group wowd joins, named and subscribed
// as wowd's own code derives them.
func TestHelmAutoscalingKafka(t *testing.T) {
	for _, typ := range []string{"kafka", "apache-kafka"} {
		t.Run(typ, func(t *testing.T) {
			objs := renderChart(t, "-f", path(autoscalingValues),
				"--set", "autoscaling.enabled=true,autoscaling.partitions=6,autoscaling.kafka.type="+typ,
				"--set", "autoscaling.kafka.metadata.sasl=scram_sha512,autoscaling.kafka.metadata.tls=enable",
				"--set", "autoscaling.kafka.authenticationRef.name=kafka-credentials")
			triggers := checkScaledObject(t, objs, 6)
			if get(t, objs["ScaledObject"], "spec", "maxReplicaCount") != 6 {
				t.Errorf("maxReplicaCount %v, want autoscaling.partitions (6) when maxReplicas is empty",
					get(t, objs["ScaledObject"], "spec", "maxReplicaCount"))
			}
			cfg, want := receivers(t, objs)
			if len(want) != 6 {
				t.Fatalf("the test configuration has %d receivers, want 6: %v", len(want), want)
			}
			seen := map[string]bool{}
			for i, tr := range triggers {
				md := tr["metadata"].(map[string]any)
				group, _ := md["consumerGroup"].(string)
				r, ok := want[group]
				if !ok {
					t.Errorf("trigger %d: consumer group %q is not one wowd joins (%v)", i, group, want)
					continue
				}
				seen[group] = true
				if tr["type"] != typ {
					t.Errorf("trigger %s: type %v, want %s", group, tr["type"], typ)
				}
				if md["bootstrapServers"] != strings.Join(cfg.Kafka.BootstrapServers, ",") {
					t.Errorf("trigger %s: bootstrapServers %v, want wow.kafka.bootstrap-servers", group, md["bootstrapServers"])
				}
				topic, hasTopic := md["topic"].(string)
				switch {
				case typ == "apache-kafka" && !slices.Equal(splitSorted(topic), r.topics):
					t.Errorf("trigger %s: topic %q, want the receiver's topics %v", group, topic, r.topics)
				case typ == "kafka" && len(r.topics) == 1 && topic != r.topics[0]:
					t.Errorf("trigger %s: topic %q, want %s", group, topic, r.topics[0])
				case typ == "kafka" && len(r.topics) > 1 && hasTopic:
					t.Errorf("trigger %s: topic %q: the kafka scaler takes one topic; a group of %d topics must name none", group, topic, len(r.topics))
				}
				for k, v := range map[string]string{
					"lagThreshold": "1000", "activationLagThreshold": "0",
					"offsetResetPolicy": cfg.Kafka.StartOffset, // latest in the test values
					"sasl":              "scram_sha512", "tls": "enable",
				} {
					if md[k] != v {
						t.Errorf("trigger %s: %s = %v, want %q", group, k, md[k], v)
					}
				}
				if get(t, tr, "authenticationRef", "name") != "kafka-credentials" {
					t.Errorf("trigger %s: authenticationRef %v", group, tr["authenticationRef"])
				}
			}
			for g := range want {
				if !seen[g] {
					t.Errorf("no trigger for consumer group %s", g)
				}
			}
			if len(triggers) != len(want) {
				t.Errorf("%d triggers for %d consumer groups", len(triggers), len(want))
			}
			lint(t, "-f", path(autoscalingValues), "--set", "autoscaling.enabled=true,autoscaling.partitions=6,autoscaling.kafka.type="+typ)
		})
	}

	// Groups given by hand (wow.metadata, or names overridden from the
	// environment) replace the derivation; the brokers likewise.
	objs := renderChart(t, "--set", "autoscaling.enabled=true,autoscaling.partitions=4,autoscaling.maxReplicas=3,autoscaling.minReplicas=2",
		"--set-json", `autoscaling.kafka.consumerGroups=[{"consumerGroup":"g1","topics":["t1"]},{"consumerGroup":"g2","topics":["t2","t3"]}]`,
		"--set-json", `autoscaling.kafka.bootstrapServers=["b1:9092","b2:9093"]`,
		"--set", "autoscaling.kafka.offsetResetPolicy=latest,autoscaling.kafka.lagThreshold=50")
	triggers := checkScaledObject(t, objs, 4)
	if len(triggers) != 2 {
		t.Fatalf("%d triggers, want one per autoscaling.kafka.consumerGroups entry", len(triggers))
	}
	for i, want := range []map[string]any{
		{"consumerGroup": "g1", "topic": "t1", "bootstrapServers": "b1:9092,b2:9093", "lagThreshold": "50", "activationLagThreshold": "0", "offsetResetPolicy": "latest"},
		{"consumerGroup": "g2", "bootstrapServers": "b1:9092,b2:9093", "lagThreshold": "50", "activationLagThreshold": "0", "offsetResetPolicy": "latest"},
	} {
		if got := normalize(t, triggers[i]["metadata"]); !equalJSON(t, got, want) {
			t.Errorf("trigger %d metadata %v, want %v", i, got, want)
		}
	}
	spec := get(t, objs["ScaledObject"], "spec")
	if get(t, spec, "minReplicaCount") != 2 || get(t, spec, "maxReplicaCount") != 3 {
		t.Errorf("min/max replicas %v/%v, want 2/3", get(t, spec, "minReplicaCount"), get(t, spec, "maxReplicaCount"))
	}
}

func equalJSON(t *testing.T, a, b any) bool {
	t.Helper()
	x, _ := yaml.Marshal(normalize(t, a))
	y, _ := yaml.Marshal(normalize(t, b))
	return string(x) == string(y)
}

// lint runs helm lint --strict with values.
func lint(t *testing.T, args ...string) {
	t.Helper()
	if out, err := exec.Command(helm(t), append([]string{"lint", "--strict", path(chart)}, args...)...).CombinedOutput(); err != nil {
		t.Errorf("helm lint %v: %v\n%s", args, err, out)
	}
}

// prometheusQuery renders the ScaledObject with the Prometheus scaler in a
// namespace, for release wowd (so job="wowd"), and returns its query.
func prometheusQuery(t *testing.T, namespace string) string {
	t.Helper()
	objs := renderChart(t, "--namespace", namespace,
		"--set", "autoscaling.enabled=true,autoscaling.partitions=4,autoscaling.scaler=prometheus",
		"--set", "autoscaling.prometheus.serverAddress=http://prometheus-operated.monitoring.svc:9090")
	triggers := checkScaledObject(t, objs, 4)
	if len(triggers) != 1 || triggers[0]["type"] != "prometheus" {
		t.Fatalf("triggers %v: want one prometheus trigger", triggers)
	}
	q, _ := get(t, triggers[0], "metadata", "query").(string)
	return q
}

// TestHelmAutoscalingPrometheus renders the ScaledObject with KEDA's
// Prometheus scaler on wowd_receiver_lag_records. TestMetricsAgainstPrometheus
// runs the same query against a real Prometheus scraping wowd.
func TestHelmAutoscalingPrometheus(t *testing.T) {
	objs := renderChart(t, "--namespace", "shop",
		"--set", "autoscaling.enabled=true,autoscaling.partitions=8,autoscaling.maxReplicas=5,autoscaling.scaler=prometheus",
		"--set", "autoscaling.prometheus.serverAddress=http://prometheus-operated.monitoring.svc:9090",
		"--set", "autoscaling.prometheus.threshold=250.5,autoscaling.prometheus.activationThreshold=10",
		"--set-string", "autoscaling.prometheus.metadata.ignoreNullValues=false",
		"--set", "autoscaling.pollingInterval=15,autoscaling.cooldownPeriod=600")
	triggers := checkScaledObject(t, objs, 8)
	if len(triggers) != 1 {
		t.Fatalf("%d triggers, want one prometheus trigger", len(triggers))
	}
	md := triggers[0]["metadata"].(map[string]any)
	for k, v := range map[string]string{
		"serverAddress": "http://prometheus-operated.monitoring.svc:9090",
		"threshold":     "250.5", "activationThreshold": "10", "ignoreNullValues": "false",
	} {
		if md[k] != v {
			t.Errorf("%s = %v, want %q", k, md[k], v)
		}
	}
	spec := get(t, objs["ScaledObject"], "spec")
	for k, v := range map[string]int{"maxReplicaCount": 5, "minReplicaCount": 1, "pollingInterval": 15, "cooldownPeriod": 600} {
		if get(t, spec, k) != v {
			t.Errorf("spec.%s = %v, want %d", k, get(t, spec, k), v)
		}
	}

	// The default query: the busiest receiver's lag summed over the
	// replicas of this release, a metric wowd documents.
	q := md["query"].(string)
	for _, want := range []string{"wowd_receiver_lag_records", `namespace="shop"`, `job="wowd"`, "sum by (dispatcher, context)"} {
		if !strings.Contains(q, want) {
			t.Errorf("query %q does not contain %s", q, want)
		}
	}
	doc, err := os.ReadFile(path("docs/metrics.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range referencedMetrics([]string{q}) {
		if !strings.Contains(string(doc), "`"+m+"`") {
			t.Errorf("the query uses %s, which docs/metrics.md does not document", m)
		}
	}
	if got := prometheusQuery(t, "other"); !strings.Contains(got, `namespace="other"`) {
		t.Errorf("query %q does not follow the release namespace", got)
	}

	// promtool parses the query (as a recording rule).
	t.Run("promtool", func(t *testing.T) {
		promtool := needTool(t, "promtool", "apt-get install prometheus")
		rules := filepath.Join(t.TempDir(), "keda.rules.yml")
		b, _ := yaml.Marshal(map[string]any{"groups": []any{map[string]any{"name": "keda", "rules": []any{
			map[string]any{"record": "wowd:keda_lag", "expr": q},
		}}}})
		writeFile(t, rules, string(b))
		if out, err := exec.Command(promtool, "check", "rules", rules).CombinedOutput(); err != nil {
			t.Errorf("promtool check rules on the ScaledObject's query: %v\n%s", err, out)
		}
	})
	lint(t, "--set", "autoscaling.enabled=true,autoscaling.partitions=4,autoscaling.scaler=prometheus,autoscaling.prometheus.serverAddress=http://p:9090")
}

// TestHelmAutoscalingOff checks the defaults: no ScaledObject, the
// Deployment's replicas are replicaCount, and the PodDisruptionBudget takes
// one replica at a time.
func TestHelmAutoscalingOff(t *testing.T) {
	for _, n := range []int{1, 3} {
		objs := renderChart(t, "--set", "replicaCount="+strconv.Itoa(n))
		if objs["ScaledObject"] != nil {
			t.Error("a ScaledObject rendered though autoscaling is off by default")
		}
		if got := get(t, objs["Deployment"], "spec", "replicas"); got != n {
			t.Errorf("replicaCount=%d: Deployment replicas %v", n, got)
		}
		checkPDB(t, objs)
		if got := get(t, objs["PodDisruptionBudget"], "spec", "maxUnavailable"); got != 1 {
			t.Errorf("PodDisruptionBudget maxUnavailable %v, want 1 by default", got)
		}
	}

	// The other forms of the budget, and none.
	objs := renderChart(t, "--set", "podDisruptionBudget.maxUnavailable=null,podDisruptionBudget.minAvailable=50%,podDisruptionBudget.unhealthyPodEvictionPolicy=AlwaysAllow")
	checkPDB(t, objs)
	if spec := get(t, objs["PodDisruptionBudget"], "spec").(map[string]any); spec["minAvailable"] != "50%" || spec["unhealthyPodEvictionPolicy"] != "AlwaysAllow" {
		t.Errorf("PodDisruptionBudget spec %v: want minAvailable 50%% and unhealthyPodEvictionPolicy AlwaysAllow", spec)
	}
	if objs := renderChart(t, "--set", "podDisruptionBudget.enabled=false"); objs["PodDisruptionBudget"] != nil {
		t.Error("a PodDisruptionBudget rendered though disabled")
	}
}

// TestHelmAutoscalingRejects checks the scaling values the chart refuses,
// by its templates (with a message naming the values to change) or by
// values.schema.json.
func TestHelmAutoscalingRejects(t *testing.T) {
	const on = "autoscaling.enabled=true,autoscaling.partitions=4"
	for _, c := range []struct {
		args []string
		want []string
	}{
		{[]string{"--set", on + ",autoscaling.maxReplicas=5"},
			[]string{"autoscaling.maxReplicas 5 is above autoscaling.partitions 4", "Lower autoscaling.maxReplicas to at most 4"}},
		{[]string{"--set", "autoscaling.enabled=true"},
			[]string{"autoscaling.partitions must be set"}},
		{[]string{"--set", on + ",autoscaling.minReplicas=5"},
			[]string{"autoscaling.minReplicas 5 is above the maximum of 4"}},
		{[]string{"--set", on + ",autoscaling.scaler=prometheus"},
			[]string{"autoscaling.prometheus.serverAddress must be set"}},
		{[]string{"--set", on + ",autoscaling.scaler=prometheus,autoscaling.minReplicas=0,autoscaling.prometheus.serverAddress=http://p:9090"},
			[]string{"autoscaling.minReplicas must be at least 1 with autoscaling.scaler=prometheus"}},
		{[]string{"--set", on + ",wow.shutdown.timeout=5m"},
			[]string{"autoscaling.scaleDown.stabilizationWindowSeconds 300 must be above wow.shutdown.timeout (300s)"}},
		{[]string{"--set", on + ",autoscaling.scaleDown.periodSeconds=30"},
			[]string{"autoscaling.scaleDown.periodSeconds 30 must be above wow.shutdown.timeout (30s)"}},
		{[]string{"--set", on + ",autoscaling.kafka.metadata.consumerGroup=x"},
			[]string{"autoscaling.kafka.metadata.consumerGroup: the chart sets consumerGroup itself"}},
		{[]string{"--set", on + ",wow.contexts=null,wow.metadata=/etc/wowd/wow-metadata.json"},
			[]string{"autoscaling.kafka.consumerGroups must list the consumer groups"}},
		{[]string{"--set", on + ",wow.kafka.bootstrap-servers=null"},
			[]string{"autoscaling.kafka.bootstrapServers is empty and so is wow.kafka.bootstrap-servers"}},
		{[]string{"--set", "podDisruptionBudget.minAvailable=1"},
			[]string{"set maxUnavailable or minAvailable, not both"}},
		// values.schema.json
		{[]string{"--set", "autoscaling.scaler=keda"}, []string{"/autoscaling/scaler"}},
		{[]string{"--set", "autoscaling.partitions=0"}, []string{"/autoscaling/partitions"}},
		{[]string{"--set", "autoscaling.maxReplicas=0"}, []string{"/autoscaling/maxReplicas"}},
		{[]string{"--set", "autoscaling.minReplicas=-1"}, []string{"/autoscaling/minReplicas"}},
		{[]string{"--set", "autoscaling.kafka.type=confluent"}, []string{"/autoscaling/kafka/type"}},
		{[]string{"--set", "autoscaling.kafka.lagThreshold=0"}, []string{"/autoscaling/kafka/lagThreshold"}},
		{[]string{"--set", "autoscaling.kafka.offsetResetPolicy=newest"}, []string{"/autoscaling/kafka/offsetResetPolicy"}},
		{[]string{"--set-json", `autoscaling.kafka.bootstrapServers=["kafka"]`}, []string{"/autoscaling/kafka/bootstrapServers/0"}},
		{[]string{"--set-json", `autoscaling.kafka.consumerGroups=[{"topics":["t"]}]`}, []string{"/autoscaling/kafka/consumerGroups/0"}},
		{[]string{"--set", "autoscaling.prometheus.threshold=0"}, []string{"/autoscaling/prometheus/threshold"}},
		{[]string{"--set", "autoscaling.prometheus.serverAddress=prometheus:9090"}, []string{"/autoscaling/prometheus/serverAddress"}},
		{[]string{"--set", "autoscaling.scaleDown.periodSeconds=3600"}, []string{"/autoscaling/scaleDown/periodSeconds"}},
		{[]string{"--set", "autoscaling.maxReplica=3"}, []string{"maxReplica"}},
		{[]string{"--set", "autoscaling.kafka.authenticationRef.kind=TriggerAuthentication"}, []string{"/autoscaling/kafka/authenticationRef"}},
		{[]string{"--set", "podDisruptionBudget.maxUnavailable=one"}, []string{"/podDisruptionBudget/maxUnavailable"}},
		{[]string{"--set", "podDisruptionBudget.unhealthyPodEvictionPolicy=Never"}, []string{"/podDisruptionBudget/unhealthyPodEvictionPolicy"}},
		{[]string{"--set", "replicaCount=-1"}, []string{"/replicaCount"}},
	} {
		_, err := helmTemplate(t, c.args...)
		if err == nil {
			t.Errorf("helm template %v rendered; want an error saying %q", c.args, c.want)
			continue
		}
		for _, w := range c.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("helm template %v: %v\nwant an error saying %q", c.args, err, w)
			}
		}
	}
}

// TestScaledObjectSchemaCheck makes sure the CRD check is not vacuous: a
// broken ScaledObject fails it, with each problem named.
func TestScaledObjectSchemaCheck(t *testing.T) {
	so := map[string]any{
		"apiVersion": "keda.sh/v1alpha1",
		"kind":       "ScaledObject",
		"metadata":   map[string]any{"name": "Bad_Name", "labels": map[string]any{"a": 1}},
		"spec": map[string]any{
			"scaleTargetRef":  map[string]any{"kind": "Deployment"},
			"minReplicaCount": 5,
			"maxReplicaCount": 3,
			"replicas":        2,
			"pollingInterval": 0,
			"triggers": []any{
				map[string]any{"type": "kafka", "metadata": map[string]any{"lagThreshold": 10}},
				map[string]any{"type": "", "metadata": map[string]any{}, "authenticationRef": map[string]any{"name": "x", "kind": "Secret"}},
			},
		},
	}
	errs := strings.Join(validateCustomResource(t, path(scaledObjectCRD), so), "\n")
	for _, want := range []string{
		"metadata.name Bad_Name",
		"metadata.labels.a: 1 is not a string",
		`.spec.scaleTargetRef: required field "name" missing`,
		"minReplicaCount 5 above maxReplicaCount 3",
		`.spec: unknown field "replicas"`,
		".spec.pollingInterval: 0 is below the minimum 1",
		".spec.triggers[0].metadata.lagThreshold: 10 (int) is not a string",
		`.spec.triggers[1].type: "" is shorter than 1`,
		".spec.triggers[1].authenticationRef.kind: Secret is not one of",
	} {
		if !strings.Contains(errs, want) {
			t.Errorf("the CRD check does not report %q; it reports:\n%s", want, errs)
		}
	}
	if ok := validateCustomResource(t, path(scaledObjectCRD), map[string]any{
		"apiVersion": "keda.sh/v1alpha1", "kind": "ScaledObject", "metadata": map[string]any{"name": "ok"},
		"spec": map[string]any{"scaleTargetRef": map[string]any{"name": "d"},
			"triggers": []any{map[string]any{"type": "kafka", "metadata": map[string]any{"consumerGroup": "g"}}}},
	}); len(ok) > 0 {
		t.Errorf("a minimal valid ScaledObject fails the CRD check: %v", ok)
	}
}
