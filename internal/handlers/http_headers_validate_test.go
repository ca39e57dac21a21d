package handlers

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/wowd/wowd/handler"
	"github.com/wowd/wowd/internal/config"
)

// TestConfigValidateRefusesTheHeaderFilesTheSinkRefuses: `wowd config
// validate` (config.Load) opens the files a configuration names as `wowd
// run` will use them, and must refuse a headers-from-file file exactly
// when building the sink does. It only checked that the file was not
// empty, while the sink also refuses a value it cannot send (a control
// character: a token split over two lines), so validate said ok and run
// stopped at start.
func TestConfigValidateRefusesTheHeaderFilesTheSinkRefuses(t *testing.T) {
	dir := t.TempDir()
	for name, content := range map[string]string{
		"token":          "Bearer abc\n",
		"two lines":      "Bearer abc\ndef\n",
		"tab":            "Bearer\tabc",
		"nul":            "Bearer abc\x00",
		"empty":          " \n",
		"just too large": strings.Repeat("a", maxHeaderFile+1),
		"missing":        "",
	} {
		t.Run(name, func(t *testing.T) {
			file := filepath.Join(dir, strings.ReplaceAll(name, " ", "-"))
			if name != "missing" {
				if err := os.WriteFile(file, []byte(content), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			cfgPath := filepath.Join(dir, "wowd-"+filepath.Base(file)+".yaml")
			if err := os.WriteFile(cfgPath, []byte(`wow:
  service: s
  kafka:
    bootstrap-servers: [localhost:9092]
  contexts:
    c:
      aggregates: [a]
  dispatchers:
    d:
      topics: [event]
      handler:
        type: http
        url: http://127.0.0.1:8080/wow
        headers-from-file:
          Authorization: `+file+"\n"), 0o600); err != nil {
				t.Fatal(err)
			}
			reg := handler.Default()
			_, loadErr := config.Load(cfgPath, reg, nil)

			cfg := defaultHTTPConfig()
			cfg.URL = "http://127.0.0.1:8080/wow"
			cfg.HeadersFromFile = map[string]string{"Authorization": file}
			sink, runErr := newHTTPSink(*cfg, handler.Deps{Dispatcher: "d", Timeout: config.DefaultHandlerTimeout})
			if sink != nil {
				_ = sink.Close(context.Background())
			}

			switch {
			case loadErr == nil && runErr != nil:
				t.Fatalf("validate accepted it, the sink refuses it: %v", runErr)
			case loadErr != nil && runErr == nil:
				t.Fatalf("validate refused it, the sink takes it: %v", loadErr)
			case loadErr != nil:
				msg := loadErr.Error()
				if !strings.Contains(msg, "wow.dispatchers.d.handler.headers-from-file.Authorization: ") || !strings.Contains(msg, file) {
					t.Errorf("the error does not name the key and the file:\n%s", msg)
				}
				if n := strings.Count(msg, "\n") + 1; n != 1 {
					t.Errorf("%d errors, want 1:\n%s", n, msg)
				}
				if strings.Contains(msg, "Bearer") || strings.Contains(msg, "abc") {
					t.Errorf("the error shows the file's content:\n%s", msg)
				}
			}
		})
	}
}
