package handlers

import (
	"context"

	"github.com/wowd/wowd/handler"
)

func discardSpec() handler.Spec {
	return handler.Spec{
		Name:    "discard",
		Summary: "Acknowledges every message at once without looking at it (for benchmarks).",
		// It reads nothing: a Wow message is only checked and routed.
		RoutingOnly: true,
		New: func(any, handler.Deps) (handler.Handler, error) {
			return discard{}, nil
		},
	}
}

// discard acknowledges every message at once.
type discard struct{}

var _ handler.Handler = discard{}

func (discard) Handle(_ context.Context, _ *handler.Message, ack handler.Ack) { ack.Done(nil) }
