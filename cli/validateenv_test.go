package cli

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/wowd/wowd/handler"
)

// Found by review. DESIGN.md, "Commands": "`wowd config validate --config FILE` — all
// errors, exit 2 on any", and "Exit codes: ... 2 configuration error".
// docs/operations.md tells operators to run validate "where wowd will run
// (in its container, with its secrets mounted)" before deploying. An http
// sink whose headers-from-env names a variable that is not set is a
// configuration error to `wowd run` (exit 2, "environment variable ... is
// not set"), but `wowd config validate` of the same file in the same
// environment says "ok" and exits 0: the check operators rely on passes a
// configuration the daemon then refuses.
func TestValidateReportsTheEnvironmentRunRefuses(t *testing.T) {
	const unset = "WOWD_REVIEW_DESIGN_UNSET_SINK_TOKEN"
	if _, ok := os.LookupEnv(unset); ok {
		t.Skipf("%s is set in this environment", unset)
	}
	path := filepath.Join(t.TempDir(), "wowd.yaml")
	doc := `
wow:
  service: cart-projector
  kafka:
    bootstrap-servers: [127.0.0.1:1]
  contexts:
    example:
      aggregates: [cart]
  dispatchers:
    cart-projection:
      topics: [event]
      handler:
        type: http
        url: http://127.0.0.1:8080/wow
        headers-from-env:
          Authorization: ` + unset + `
  metrics:
    listen: ""
  shutdown:
    timeout: 2s
`
	if err := os.WriteFile(path, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	env := os.Environ()

	// Premise: the daemon refuses this configuration with exit code 2.
	type result struct {
		code   int
		stderr string
	}
	done := make(chan result, 1)
	go func() {
		var out, errOut bytes.Buffer
		code := run([]string{"run", "--config", path}, &out, &errOut, env, handler.Default())
		done <- result{code, errOut.String()}
	}()
	select {
	case r := <-done:
		if r.code != ExitConfig || !strings.Contains(r.stderr, unset) {
			t.Fatalf("premise: wowd run exited %d (want %d naming %s); stderr:\n%s", r.code, ExitConfig, unset, r.stderr)
		}
		t.Logf("wowd run: exit %d: %s", r.code, strings.TrimSpace(r.stderr))
	case <-time.After(30 * time.Second):
		t.Fatal("premise: wowd run did not refuse the configuration within 30s")
	}

	var out, errOut bytes.Buffer
	code := run([]string{"config", "validate", "--config", path}, &out, &errOut, env, handler.Default())
	if code != ExitConfig {
		t.Errorf("wowd config validate exited %d, want %d (the configuration error wowd run reports); stdout: %q stderr: %q",
			code, ExitConfig, strings.TrimSpace(out.String()), strings.TrimSpace(errOut.String()))
	}
}
