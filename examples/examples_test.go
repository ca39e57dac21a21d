package examples_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/wowd/wowd/internal/proctest"
)

// pluginDir is the out-of-tree plugin module, with its own go.mod.
const pluginDir = "audit-plugin"

// audit is examples/audit-plugin/cmd/wowd-audit, built as its users would:
// go build inside the plugin's module.
var audit = &proctest.Binary{Pkg: "./cmd/wowd-audit", Dir: pluginDir, Env: []string{"GOWORK=off"}}

// wowdAudit returns the built wowd-audit.
func wowdAudit(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("builds a binary")
	}
	return audit.Path(t)
}

func TestMain(m *testing.M) {
	code := m.Run()
	audit.Remove()
	os.Exit(code)
}

// goCmd is a go command run in the plugin's module.
func goCmd(args ...string) *exec.Cmd {
	cmd := exec.Command("go", args...)
	cmd.Dir = pluginDir
	cmd.Env = append(os.Environ(), "GOWORK=off")
	return cmd
}

// TestAuditPluginPasses runs the plugin module's own checks (go vet, and its
// tests, the handler conformance suite among them), which `go test ./...` of
// this module does not reach.
func TestAuditPluginPasses(t *testing.T) {
	if testing.Short() {
		t.Skip("runs another module's tests")
	}
	if out, err := goCmd("vet", "./...").CombinedOutput(); err != nil {
		t.Fatalf("go vet: %v\n%s", err, out)
	}
	args := []string{"test", "-count=1"}
	if raceEnabled {
		args = append(args, "-race")
	}
	if out, err := goCmd(append(args, "./...")...).CombinedOutput(); err != nil {
		t.Fatalf("go test: %v\n%s", err, out)
	}
}

func TestAuditPluginIsListed(t *testing.T) {
	out, code := runBin(t, wowdAudit(t), "handlers")
	if code != 0 {
		t.Fatalf("exit %d:\n%s", code, out)
	}
	for _, want := range []string{
		"audit", "Appends one JSON line per message",
		"path", "required", "fsync", "max-attempts", "default 5",
		"http", "log", "discard", // the built-ins are still there
	} {
		if !strings.Contains(out, want) {
			t.Errorf("`wowd-audit handlers` lacks %q:\n%s", want, out)
		}
	}
}

func TestAuditPluginConfigValidate(t *testing.T) {
	bin := wowdAudit(t)
	good := proctest.WriteConfig(t, auditConfig(9092, 0, filepath.Join(t.TempDir(), "audit.jsonl")))
	if out, code := runBin(t, bin, "config", "validate", "--config", good); code != 0 || !strings.Contains(out, "ok") {
		t.Fatalf("good config: exit %d:\n%s", code, out)
	}
	bad := proctest.WriteConfig(t, strings.Replace(auditConfig(9092, 0, "/tmp/x"), "fsync: true", "fsnyc: true", 1))
	out, code := runBin(t, bin, "config", "validate", "--config", bad)
	if code != 2 || !strings.Contains(out, "fsnyc") {
		t.Fatalf("bad config: exit %d, want 2 naming the key:\n%s", code, out)
	}
}

// TestAuditPluginDev runs `wowd-audit dev`, produces records to its embedded
// broker and checks the audit file gets their lines, then that SIGTERM stops
// it with exit code 0.
func TestAuditPluginDev(t *testing.T) {
	bin := wowdAudit(t)
	const records = 20
	brokerPort, metricsPort := proctest.FreePort(t), proctest.FreePort(t)
	path := filepath.Join(t.TempDir(), "audit.jsonl")
	cfg := proctest.WriteConfig(t, auditConfig(brokerPort, metricsPort, path))

	var out proctest.Output
	cmd := exec.Command(bin, "dev", "--config", cfg)
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		if t.Failed() {
			t.Logf("wowd-audit output:\n%s", out.String())
		}
	})
	proctest.WaitReady(t, "wowd-audit", metricsPort, exited)

	cl, err := kgo.NewClient(kgo.SeedBrokers(fmt.Sprintf("127.0.0.1:%d", brokerPort)))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var recs []*kgo.Record
	for i := range records {
		id := fmt.Sprintf("cart-%d", i%4)
		recs = append(recs, &kgo.Record{Topic: "wow.shop.cart.event", Key: []byte(id), Value: wowEvent("shop", "cart", id, i/4+1)})
	}
	if err := cl.ProduceSync(context.Background(), recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}

	var lines []map[string]any
	deadline := time.Now().Add(30 * time.Second)
	for len(lines) < records {
		select {
		case err := <-exited:
			t.Fatalf("wowd-audit exited early: %v", err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("the audit file has %d lines, want %d", len(lines), records)
		}
		time.Sleep(50 * time.Millisecond)
		lines = readLines(t, path)
	}
	seen := map[string]bool{}
	for _, l := range lines {
		if l["topic"] != "wow.shop.cart.event" || l["dispatcher"] != "audit-trail" || l["service"] != "audited" ||
			l["context"] != "shop" || l["aggregate"] != "cart" || l["kind"] != "event" ||
			!strings.HasPrefix(fmt.Sprint(l["aggregate_id"]), "cart-") || l["size"] == 0.0 {
			t.Errorf("line %v", l)
		}
		seen[fmt.Sprint(l["partition"], "/", l["offset"])] = true
	}
	if len(seen) != records {
		t.Errorf("%d distinct records in %d lines, want %d", len(seen), len(lines), records)
	}

	proctest.Terminate(t, "wowd-audit", cmd.Process, exited, 15*time.Second) // its shutdown timeout is 10s
}

// wowEvent is a domain event stream of aggregate id at version, as a Wow
// service puts it on Kafka.
func wowEvent(contextName, aggregate, id string, version int) []byte {
	return fmt.Appendf(nil, `{"id":"%s-%d","contextName":%q,"aggregateName":%q,"header":{},`+
		`"aggregateId":%q,"tenantId":"(0)","ownerId":"","spaceId":"","commandId":"c-%s-%d","requestId":"c-%s-%d",`+
		`"version":%d,"body":[{"id":"e-%s-%d","name":"item_added","revision":"0.0.1","bodyType":"example.ItemAdded","body":{}}],`+
		`"createTime":%d}`,
		id, version, contextName, aggregate, id, id, version, id, version, version, id, version, time.Now().UnixMilli())
}

// auditConfig is a configuration with one dispatcher writing the events of
// shop.cart to an audit file at path. A metrics port of 0 leaves metrics off.
func auditConfig(brokerPort, metricsPort int, path string) string {
	metrics := ""
	if metricsPort != 0 {
		metrics = fmt.Sprintf("  metrics:\n    listen: 127.0.0.1:%d\n", metricsPort)
	}
	return fmt.Sprintf(`wow:
  service: audited
  kafka:
    bootstrap-servers: [127.0.0.1:%d]
  contexts:
    shop:
      aggregates: [cart]
  dispatchers:
    audit-trail:
      topics: [event]
      handler:
        type: audit
        path: %s
        fsync: true
%s  shutdown:
    timeout: 10s
  dev:
    partitions: 2
`, brokerPort, path, metrics)
}

func readLines(t *testing.T, path string) []map[string]any {
	t.Helper()
	b, err := os.ReadFile(path)
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	// Only whole lines: the plugin may be writing the last one right now.
	b = b[:bytes.LastIndexByte(b, '\n')+1]
	var lines []map[string]any
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		var l map[string]any
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			t.Fatalf("line %q: %v", sc.Text(), err)
		}
		lines = append(lines, l)
	}
	return lines
}

func runBin(t *testing.T, bin string, args ...string) (string, int) {
	t.Helper()
	return proctest.Run(t, exec.Command(bin, args...))
}
