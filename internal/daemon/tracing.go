package daemon

import (
	"context"
	"strconv"
	"time"

	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"

	"github.com/wowd/wowd/internal/tracing"
)

// tracingFlushTimeout bounds how long Stop waits for the last spans to be
// exported, even past the shutdown deadline: an unreachable collector must
// not hold the process. A variable for tests.
var tracingFlushTimeout = 5 * time.Second

// buildTracing makes the tracer provider when wow.tracing.enabled is set
// and OTEL_SDK_DISABLED does not say otherwise.
func (rt *Daemon) buildTracing(version string) error {
	tc := rt.cfg.Tracing
	if !tc.Enabled {
		return nil
	}
	if tracing.Disabled(nil) {
		rt.log.Info("tracing: wow.tracing.enabled is set, but OTEL_SDK_DISABLED=true: no spans")
		return nil
	}
	o := tracing.Options{
		Exporter:           tc.Exporter,
		Endpoint:           tc.Endpoint,
		ResourceAttributes: tc.ResourceAttributes,
		Service:            rt.cfg.Service,
		Version:            version,
		Logger:             rt.log.Named("tracing"),
	}
	if tc.SamplingRatio != "" {
		r, err := strconv.ParseFloat(tc.SamplingRatio, 64)
		if err != nil {
			return &ConfigError{Path: "wow.tracing.sampling-ratio", Err: err}
		}
		o.SamplingRatio = &r
	}
	p, err := tracing.New(context.Background(), o)
	if err != nil {
		return &ConfigError{Path: "wow.tracing", Err: err}
	}
	rt.tracing = p
	rt.log.Info("tracing: a span per message", zap.String("exporter", tc.Exporter), zap.String("endpoint", tc.Endpoint),
		zap.String("sampling_ratio", tc.SamplingRatio))
	return nil
}

// tracer returns the tracer of the receivers, nil without tracing.
func (rt *Daemon) tracer() trace.Tracer {
	if rt.tracing == nil {
		return nil
	}
	return rt.tracing.Tracer()
}

// stopTracing exports the spans still buffered, for at most
// tracingFlushTimeout, and stops the exporter.
func (rt *Daemon) stopTracing(ctx context.Context) error {
	if rt.tracing == nil {
		return nil
	}
	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), tracingFlushTimeout)
	defer cancel()
	err := rt.tracing.Shutdown(fctx)
	rt.tracing = nil
	return err
}
