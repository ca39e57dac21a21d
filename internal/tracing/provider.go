package tracing

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path"
	"strconv"
	"strings"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"
)

// The exporters of wow.tracing.exporter.
const (
	ExporterHTTP = "otlp-http"
	ExporterGRPC = "otlp-grpc"
)

// Options configure the spans of a process (wow.tracing). Whatever they
// leave empty, the OpenTelemetry SDK and its exporters take from the
// standard OTEL_* environment variables, then from their own defaults.
type Options struct {
	// Exporter is ExporterHTTP or ExporterGRPC; empty: grpc when
	// OTEL_EXPORTER_OTLP_TRACES_PROTOCOL (or OTEL_EXPORTER_OTLP_PROTOCOL)
	// says grpc, otherwise otlp-http.
	Exporter string
	// Endpoint is the collector's base URL, as OTEL_EXPORTER_OTLP_ENDPOINT
	// takes it: http://host:port (plain text) or https://host:port; the
	// HTTP exporter posts to its path + /v1/traces. Empty: the exporter
	// reads OTEL_EXPORTER_OTLP_TRACES_ENDPOINT or OTEL_EXPORTER_OTLP_ENDPOINT,
	// else localhost:4318 (HTTP) or localhost:4317 (gRPC).
	Endpoint string
	// SamplingRatio, when set, samples that fraction of the traces that
	// start here (parentbased_traceidratio: a message whose producer sampled
	// or did not sample its trace follows it). Nil: the SDK reads
	// OTEL_TRACES_SAMPLER and OTEL_TRACES_SAMPLER_ARG, else samples
	// everything (parentbased_always_on).
	SamplingRatio *float64
	// ResourceAttributes are key=value pairs; they win over
	// OTEL_RESOURCE_ATTRIBUTES and OTEL_SERVICE_NAME, which win over the
	// defaults (service.name = Service, service.version = Version).
	ResourceAttributes []string
	Service, Version   string

	Logger *zap.Logger // export errors are logged here; nil: not logged
	// Getenv reads the environment (os.Getenv when nil).
	Getenv func(string) string
}

// Provider owns the process's tracer provider and its exporter.
type Provider struct {
	tp     *sdktrace.TracerProvider
	tracer trace.Tracer
}

// ParseResourceAttribute splits one key=value resource attribute.
func ParseResourceAttribute(kv string) (key, value string, err error) {
	k, v, ok := strings.Cut(kv, "=")
	k, v = strings.TrimSpace(k), strings.TrimSpace(v)
	if !ok || k == "" {
		return "", "", fmt.Errorf("%q is not key=value", kv)
	}
	return k, v, nil
}

// ParseSamplingRatio parses a sampling ratio: a number from 0 to 1.
func ParseSamplingRatio(s string) (float64, error) {
	r, err := strconv.ParseFloat(strings.TrimSpace(s), 64)
	if err != nil || !(r >= 0 && r <= 1) { // NaN too
		return 0, fmt.Errorf("%q is not a number from 0 to 1", s)
	}
	return r, nil
}

// CheckEndpoint reports what is wrong with an endpoint URL, if anything.
func CheckEndpoint(s string) error {
	u, err := url.Parse(s)
	switch {
	case err != nil:
		return fmt.Errorf("%q is not a URL", s)
	case u.Scheme != "http" && u.Scheme != "https":
		return fmt.Errorf("%q: want an http:// or https:// URL (the collector's base URL)", s)
	case u.Host == "":
		return fmt.Errorf("%q has no host", s)
	}
	return nil
}

// Disabled reports whether OTEL_SDK_DISABLED turns the SDK off (the
// specification's rule: only "true", any case, does).
func Disabled(getenv func(string) string) bool {
	if getenv == nil {
		getenv = os.Getenv
	}
	return strings.EqualFold(strings.TrimSpace(getenv("OTEL_SDK_DISABLED")), "true")
}

// New builds the tracer provider. It also becomes OpenTelemetry's global
// tracer provider, with W3C trace context as the global propagator, so
// that compiled-in plugins instrumented with OpenTelemetry record their
// spans with wowd's as parents. Nothing connects until the first export.
func New(ctx context.Context, o Options) (*Provider, error) {
	if o.Getenv == nil {
		o.Getenv = os.Getenv
	}
	exp, err := newExporter(ctx, o)
	if err != nil {
		return nil, err
	}
	res, err := newResource(ctx, o)
	if err != nil {
		return nil, err
	}
	opts := []sdktrace.TracerProviderOption{sdktrace.WithBatcher(exp), sdktrace.WithResource(res)}
	if o.SamplingRatio != nil {
		opts = append(opts, sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.TraceIDRatioBased(*o.SamplingRatio))))
	}
	tp := sdktrace.NewTracerProvider(opts...)
	if o.Logger != nil {
		log := o.Logger
		otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) { log.Warn("tracing: spans not exported", zap.Error(err)) }))
	}
	otel.SetTracerProvider(tp)
	otel.SetTextMapPropagator(propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{}))
	return &Provider{tp: tp, tracer: tp.Tracer(instrumentation, trace.WithSchemaURL(semconv.SchemaURL))}, nil
}

// instrumentation names wowd's tracer.
const instrumentation = "github.com/wowd/wowd"

// Tracer returns the tracer of message spans.
func (p *Provider) Tracer() trace.Tracer { return p.tracer }

// Shutdown exports the spans still buffered and stops the exporter; ctx
// bounds how long that may take.
func (p *Provider) Shutdown(ctx context.Context) error {
	if err := p.tp.Shutdown(ctx); err != nil {
		return fmt.Errorf("tracing: flushing spans at shutdown: %w", err)
	}
	return nil
}

func newExporter(ctx context.Context, o Options) (sdktrace.SpanExporter, error) {
	kind := o.Exporter
	if kind == "" {
		protocol := o.Getenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
		if protocol == "" {
			protocol = o.Getenv("OTEL_EXPORTER_OTLP_PROTOCOL")
		}
		kind = ExporterHTTP
		if strings.TrimSpace(protocol) == "grpc" {
			kind = ExporterGRPC
		}
	}
	var u *url.URL
	if o.Endpoint != "" {
		if err := CheckEndpoint(o.Endpoint); err != nil {
			return nil, err
		}
		u, _ = url.Parse(o.Endpoint)
	}
	switch kind {
	case ExporterHTTP:
		var opts []otlptracehttp.Option
		if u != nil {
			// The whole URL: its scheme decides TLS both ways, whatever
			// OTEL_EXPORTER_OTLP_ENDPOINT or _INSECURE said (the key wins).
			traces := url.URL{Scheme: u.Scheme, Host: u.Host, Path: path.Join("/", u.Path, "v1/traces")}
			opts = append(opts, otlptracehttp.WithEndpointURL(traces.String()))
		}
		exp, err := otlptracehttp.New(ctx, opts...)
		if err != nil {
			return nil, fmt.Errorf("tracing: otlp-http exporter: %w", err)
		}
		return exp, nil
	case ExporterGRPC:
		var opts []otlptracegrpc.Option
		if u != nil {
			opts = append(opts, otlptracegrpc.WithEndpointURL(u.Scheme+"://"+u.Host)) // TLS from the scheme, as for HTTP
		}
		exp, err := otlptracegrpc.New(ctx, opts...)
		if err != nil {
			return nil, fmt.Errorf("tracing: otlp-grpc exporter: %w", err)
		}
		return exp, nil
	}
	return nil, fmt.Errorf("tracing: unknown exporter %q (want %s or %s)", kind, ExporterHTTP, ExporterGRPC)
}

// newResource merges, lowest first: the SDK's defaults, service.name and
// service.version, OTEL_RESOURCE_ATTRIBUTES and OTEL_SERVICE_NAME, and
// o.ResourceAttributes.
func newResource(ctx context.Context, o Options) (*resource.Resource, error) {
	var own []attribute.KeyValue
	for _, kv := range o.ResourceAttributes {
		k, v, err := ParseResourceAttribute(kv)
		if err != nil {
			return nil, fmt.Errorf("tracing: resource attribute %w", err)
		}
		own = append(own, attribute.String(k, v))
	}
	base := []attribute.KeyValue{semconv.ServiceName(o.Service)}
	if o.Service == "" {
		base[0] = semconv.ServiceName("wowd")
	}
	if o.Version != "" {
		base = append(base, semconv.ServiceVersion(o.Version))
	}
	res, err := resource.New(ctx,
		resource.WithTelemetrySDK(),
		resource.WithSchemaURL(semconv.SchemaURL),
		resource.WithAttributes(base...),
		resource.WithDetectors(envDetector{o.Getenv}),
		resource.WithAttributes(own...),
	)
	if err != nil && !errors.Is(err, resource.ErrPartialResource) {
		return nil, fmt.Errorf("tracing: resource: %w", err)
	}
	return res, nil
}

// envDetector reads OTEL_RESOURCE_ATTRIBUTES and OTEL_SERVICE_NAME through
// getenv (resource.WithFromEnv reads the process's environment only).
type envDetector struct{ getenv func(string) string }

func (d envDetector) Detect(context.Context) (*resource.Resource, error) {
	var attrs []attribute.KeyValue
	for item := range strings.SplitSeq(d.getenv("OTEL_RESOURCE_ATTRIBUTES"), ",") {
		if strings.TrimSpace(item) == "" {
			continue
		}
		k, v, err := ParseResourceAttribute(item)
		if err != nil {
			return nil, fmt.Errorf("OTEL_RESOURCE_ATTRIBUTES: %w", err)
		}
		if uv, err := url.PathUnescape(v); err == nil {
			v = uv // values are percent-encoded
		}
		attrs = append(attrs, attribute.String(k, v))
	}
	if name := strings.TrimSpace(d.getenv("OTEL_SERVICE_NAME")); name != "" {
		attrs = append(attrs, semconv.ServiceName(name))
	}
	return resource.NewSchemaless(attrs...), nil
}
