package handlers

import (
	"context"
	"errors"
	"fmt"

	"go.uber.org/zap"

	"github.com/wowd/wowd/handler"
)

// LogConfig configures the log handler.
type LogConfig struct {
	Body    bool `config:"body" desc:"Also log the message value as a string."`
	MaxBody int  `config:"max-body" desc:"Bytes of the value logged when body is true; longer values are cut."`
}

// Validate checks the configuration.
func (c *LogConfig) Validate() error {
	if c.MaxBody <= 0 {
		return errors.New("max-body: must be positive")
	}
	return nil
}

func logSpec() handler.Spec {
	return handler.Spec{
		Name:    "log",
		Summary: "Logs each message at info level and acknowledges it.",
		Config:  func() any { return &LogConfig{MaxBody: 256} },
		New: func(cfg any, deps handler.Deps) (handler.Handler, error) {
			c, ok := cfg.(*LogConfig)
			if !ok {
				return nil, fmt.Errorf("log: config is %T, want *LogConfig", cfg)
			}
			if err := c.Validate(); err != nil {
				return nil, err
			}
			log := deps.Logger
			if log == nil {
				log = zap.NewNop()
			}
			return &logHandler{log: log, body: c.Body, maxBody: c.MaxBody}, nil
		},
	}
}

// logHandler logs each message and acknowledges it.
type logHandler struct {
	log     *zap.Logger
	body    bool
	maxBody int
}

var _ handler.Handler = (*logHandler)(nil)

func (h *logHandler) Handle(_ context.Context, m *handler.Message, ack handler.Ack) {
	if ce := h.log.Check(zap.InfoLevel, "message"); ce != nil {
		// The logger wowd hands a handler already names its dispatcher.
		fields := []zap.Field{
			zap.String("topic", m.Topic),
			zap.Int32("partition", m.Partition),
			zap.Int64("offset", m.Offset),
			zap.ByteString("key", m.Key),
			zap.Int("value_size", len(m.Value)),
		}
		if h.body {
			fields = append(fields, zap.ByteString("value", m.Value[:min(len(m.Value), h.maxBody)]))
		}
		ce.Write(fields...)
	}
	ack.Done(nil)
}
