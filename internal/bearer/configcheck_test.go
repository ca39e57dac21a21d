package bearer_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/wowd/wowd/internal/bearer"
	"github.com/wowd/wowd/internal/config"
	_ "github.com/wowd/wowd/internal/handlers" // discard
)

// TestConfigCheckRefusesATokenFileTheStartRefuses (found by review): loading a configuration
// file opens the files it names so that `wowd config validate` finds a file
// the start would refuse (internal/config/files.go: "a file the check
// passes is not refused at start"). A token file holding two words
// (docs/operations.md: "one holding more than one word ... stops the start
// with a configuration error on wow.ingest.token-file") is refused by
// bearer.Open at start, but the configuration check only looks for an
// empty file, so `config validate` passes it.
func TestConfigCheckRefusesATokenFileTheStartRefuses(t *testing.T) {
	dir := t.TempDir()
	token := filepath.Join(dir, "token")
	if err := os.WriteFile(token, []byte("old-token new-token\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := bearer.Open(token, "ingest", nil); err == nil {
		t.Fatal("bearer.Open took a two-word token file; the premise of this test is gone")
	}
	cfgFile := filepath.Join(dir, "wowd.yaml")
	if err := os.WriteFile(cfgFile, []byte(`wow:
  service: s
  kafka:
    bootstrap-servers: [k:9092]
  ingest:
    enabled: true
    listen: 0.0.0.0:9465
    token-file: `+token+`
  admin:
    listen: 0.0.0.0:9466
    token-file: `+token+`
  contexts:
    c: {aggregates: [a]}
  dispatchers:
    d: {topics: [event], handler: {type: discard}}
`), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := config.Load(cfgFile, nil, nil)
	if err == nil {
		t.Fatalf("config.Load (wowd config validate) accepted token file %s, which the start refuses (bearer.Open)", token)
	}
	for _, key := range []string{"wow.ingest.token-file", "wow.admin.token-file"} {
		if !strings.Contains(err.Error(), key) {
			t.Errorf("the configuration error does not name %s:\n%v", key, err)
		}
	}
}
