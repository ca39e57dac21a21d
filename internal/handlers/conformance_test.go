package handlers

import (
	"testing"

	"github.com/wowd/wowd/handler"
	"github.com/wowd/wowd/handler/handlertest"
	"github.com/wowd/wowd/internal/handlerconfig"
)

// newConformance builds the handler name with raw for the conformance suite,
// which closes it.
func newConformance(t *testing.T, name string, raw map[string]any) handler.Handler {
	t.Helper()
	spec, _ := handler.Default().Lookup(name)
	cfg, err := handlerconfig.Decode(spec, raw)
	if err != nil {
		t.Fatal(err)
	}
	h, err := spec.New(cfg, handler.Deps{})
	if err != nil {
		t.Fatal(err)
	}
	return h
}

func TestHTTPConformance(t *testing.T) {
	handlertest.Run(t, func(t *testing.T, target handlertest.Target) handler.Handler {
		return newConformance(t, "http", sinkConfig(target.URL, map[string]any{
			"max-attempts": 3, "max-concurrency": 4, "request-timeout": "5s",
		}))
	})
}

func TestHTTPRateLimitedConformance(t *testing.T) {
	handlertest.Run(t, func(t *testing.T, target handlertest.Target) handler.Handler {
		return newConformance(t, "http", sinkConfig(target.URL, map[string]any{
			"max-attempts": 3, "max-concurrency": 2, "rate-limit": 1000, "rate-burst": 2,
		}))
	})
}

func TestLogConformance(t *testing.T) {
	handlertest.RunStandalone(t, func(t *testing.T) handler.Handler {
		return newConformance(t, "log", map[string]any{"body": true})
	})
}

func TestDiscardConformance(t *testing.T) {
	handlertest.RunStandalone(t, func(t *testing.T) handler.Handler {
		return newConformance(t, "discard", nil)
	})
}

func TestHTTPBatchConformance(t *testing.T) {
	handlertest.Run(t, func(t *testing.T, target handlertest.Target) handler.Handler {
		return newConformance(t, "http", sinkConfig(target.URL, map[string]any{
			"max-attempts": 3, "max-concurrency": 4, "request-timeout": "5s",
			"batch": map[string]any{"max-messages": 4, "linger": "5ms"},
		}))
	})
}
