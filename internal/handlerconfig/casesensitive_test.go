package handlerconfig_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/wowd/wowd/handler"
	"github.com/wowd/wowd/internal/handlerconfig"
)

type nestedConfig struct {
	URL string `config:"url"`
	TLS struct {
		CAFile string `config:"ca-file"`
	} `config:"tls"`
}

// TestHandlerKeysAreCaseSensitive: a handler's keys are written as they are
// declared, as the fixed keys are: Max-Attempts is not max-attempts, and
// TLS: {CA-File: x} is not tls.ca-file. Each is an unknown key, named where
// it is written; the decoder matched them without regard to case, so they
// set the field, and a file check that goes by the key's name (ca-file)
// passed over CA-File.
func TestHandlerKeysAreCaseSensitive(t *testing.T) {
	cfg, err := handlerconfig.Decode(testSpec(), map[string]any{"url": "http://x", "Max-Attempts": 9})
	if err == nil {
		t.Errorf("Max-Attempts accepted as max-attempts: %+v", cfg)
	} else if !strings.Contains(err.Error(), "Max-Attempts: unknown key") {
		t.Errorf("error %q does not name Max-Attempts as unknown", err)
	}

	spec := handler.Spec{Name: "n", Config: func() any { return &nestedConfig{} },
		New: func(any, handler.Deps) (handler.Handler, error) { return nil, nil }}
	for _, raw := range []map[string]any{
		{"url": "http://x", "tls": map[string]any{"CA-File": "ca.pem"}},
		{"url": "http://x", "TLS": map[string]any{"ca-file": "ca.pem"}},
		{"URL": "http://x"},
	} {
		cfg, err := handlerconfig.Decode(spec, raw)
		if err == nil {
			t.Errorf("%v accepted: %+v", raw, cfg)
			continue
		}
		var uk *handlerconfig.UnknownKeyError
		if !errors.As(err, &uk) {
			t.Errorf("%v: %v, want an unknown key", raw, err)
		}
	}
}
