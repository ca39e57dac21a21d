package deploy

import (
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
)

// make test-unit is "everything but the real-Kafka suite": the packages it
// tests leave test/realkafka out, as scripts/test-all does (that suite
// starts a broker itself, and its memory checks go wrong beside the
// race-built suites).
func TestMakeTestUnitLeavesOutRealKafka(t *testing.T) {
	mk := needTool(t, "make", "apt-get install make")
	out, err := exec.Command(mk, "-s", "-n", "-C", root, "test-unit").CombinedOutput()
	if err != nil {
		t.Fatalf("make -n test-unit: %v\n%s", err, out)
	}
	tested := false
	for _, line := range strings.Split(string(out), "\n") {
		if !strings.HasPrefix(line, "go test") {
			continue
		}
		tested = true
		if strings.Contains(line, "./...") && !strings.Contains(line, "realkafka") {
			t.Errorf("make test-unit runs %q, which includes ./test/realkafka", line)
		}
	}
	if !tested {
		t.Fatalf("make -n test-unit runs no go test:\n%s", out)
	}
}

// make help lists every target the Makefile describes (README names some).
func TestMakeHelpListsEveryDescribedTarget(t *testing.T) {
	makeBin := needTool(t, "make", "apt-get install make")
	mk, err := os.ReadFile(path("Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	help, err := exec.Command(makeBin, "-s", "-C", root, "help").Output()
	if err != nil {
		t.Fatal(err)
	}
	targets := regexp.MustCompile(`(?m)^([a-z0-9-]+):.*## `).FindAllStringSubmatch(string(mk), -1)
	if len(targets) < 5 {
		t.Fatalf("setup: %d described targets found in the Makefile", len(targets))
	}
	for _, m := range targets {
		if !regexp.MustCompile(`(?m)^\s+` + regexp.QuoteMeta(m[1]) + `\s`).Match(help) {
			t.Errorf("make help does not list %s", m[1])
		}
	}
}
