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

// With tracing on, `wowd run` refuses a malformed OTEL_RESOURCE_ATTRIBUTES
// (exit 2); `wowd config validate` in the same environment must say so too,
// and `--no-files` (another machine's environment) must not.
func TestValidateChecksOTELResourceAttributes(t *testing.T) {
	t.Setenv("OTEL_RESOURCE_ATTRIBUTES", "deployment.environment=prod,novalue")
	t.Setenv("OTEL_SDK_DISABLED", "")
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
        type: log
  tracing:
    enabled: true
    endpoint: http://127.0.0.1:1
  metrics:
    listen: ""
  shutdown:
    timeout: 2s
`
	if err := os.WriteFile(path, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	env := os.Environ()

	// Premise: the daemon refuses this environment with exit code 2.
	done := make(chan int, 1)
	var runErr bytes.Buffer
	go func() {
		var out bytes.Buffer
		done <- run([]string{"run", "--config", path}, &out, &runErr, env, handler.Default())
	}()
	select {
	case code := <-done:
		if code != ExitConfig || !strings.Contains(runErr.String(), "OTEL_RESOURCE_ATTRIBUTES") {
			t.Fatalf("premise: wowd run exited %d (want %d naming OTEL_RESOURCE_ATTRIBUTES); stderr:\n%s", code, ExitConfig, runErr.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatal("premise: wowd run did not refuse the environment within 30s")
	}

	var out, errOut bytes.Buffer
	code := run([]string{"config", "validate", "--config", path}, &out, &errOut, env, handler.Default())
	if code != ExitConfig || !strings.Contains(errOut.String(), "OTEL_RESOURCE_ATTRIBUTES") || !strings.Contains(errOut.String(), "novalue") {
		t.Errorf("wowd config validate exited %d, want %d naming OTEL_RESOURCE_ATTRIBUTES and the item; stdout: %q stderr: %q",
			code, ExitConfig, strings.TrimSpace(out.String()), strings.TrimSpace(errOut.String()))
	}
	out.Reset()
	errOut.Reset()
	if code := run([]string{"config", "validate", "--no-files", "--config", path}, &out, &errOut, env, handler.Default()); code != ExitOK {
		t.Errorf("wowd config validate --no-files exited %d, want %d: the environment is another machine's; stderr: %q", code, ExitOK, errOut.String())
	}
}
