package config_test

import (
	"context"
	"fmt"
	"time"

	"github.com/wowd/wowd/handler"
)

type httpConfig struct {
	URL     string            `config:"url" required:"true" desc:"Where to POST messages."`
	Timeout time.Duration     `config:"request-timeout" reload:"true" desc:"Per-request timeout."`
	Headers map[string]string `config:"headers" desc:"Extra request headers."`
	Token   string            `config:"token" secret:"true" desc:"Bearer token."`
}

// FitTry is the sink's check that a request fits in a try.
func (c *httpConfig) FitTry(try time.Duration) error {
	if c.Timeout >= try {
		return fmt.Errorf("request-timeout: %v must be less than the dispatcher's handler.timeout (%v)", c.Timeout, try)
	}
	return nil
}

type logConfig struct {
	Level string `config:"level" desc:"Log level of each message."`
}

func newNothing(any, handler.Deps) (handler.Handler, error) {
	return handler.Sync(func(context.Context, *handler.Message) error { return nil }), nil
}

// testRegistry holds the handler types the tests configure: discard (no
// configuration), http and log.
func testRegistry() *handler.Registry {
	var r handler.Registry
	r.Register(handler.Spec{Name: "discard", New: newNothing})
	r.Register(handler.Spec{Name: "http", New: newNothing,
		Config: func() any { return &httpConfig{Timeout: 5 * time.Second} }})
	r.Register(handler.Spec{Name: "log", New: newNothing,
		Config: func() any { return &logConfig{Level: "info"} }})
	return &r
}
