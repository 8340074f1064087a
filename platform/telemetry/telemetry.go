// Package telemetry is the one OpenTelemetry setup every fabro-go binary
// shares: a tracer provider, a meter provider (pushed over OTLP and pulled
// as Prometheus text from /metrics), the W3C trace-context and baggage
// propagators, and an error handler that logs export failures at most once
// a minute. It is configured by the standard OTEL_* environment variables;
// with none set nothing is exported and tracing costs next to nothing.
//
// Rule for bad input: an OTEL_* value that does not parse fails Setup with
// an error naming the variable.
package telemetry

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlpmetric/otlpmetricgrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlpmetric/otlpmetrichttp"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	"go.opentelemetry.io/otel/metric"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/propagation"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	tracenoop "go.opentelemetry.io/otel/trace/noop"

	"github.com/fabro-sh/fabro-go/platform/logging"
)

// ErrorLogInterval is the least time between two logged export errors;
// the ones in between are counted and the count logged with the next.
const ErrorLogInterval = time.Minute

// Config configures Setup.
type Config struct {
	// ServiceName is service.name when OTEL_SERVICE_NAME (and the
	// OTEL_RESOURCE_ATTRIBUTES entry) is not set.
	ServiceName string
	// Logger receives export errors (rate-limited) and the start-up line.
	Logger *slog.Logger
	// LookupEnv reads the environment (default os.LookupEnv).
	LookupEnv func(string) (string, bool)
}

// Telemetry is an installed setup. Its providers are also the global ones
// (otel.GetTracerProvider, otel.GetMeterProvider).
type Telemetry struct {
	TracerProvider trace.TracerProvider
	MeterProvider  metric.MeterProvider
	Propagator     propagation.TextMapPropagator

	metrics   http.Handler // nil with OTEL_SDK_DISABLED
	shutdowns []func(context.Context) error
	once      sync.Once
	err       error
}

var captureContent atomic.Bool

// CaptureContent reports whether the operator opted into recording prompt
// and completion content in spans
// (OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true). Off by
// default: no prompt, file content or secret goes into an attribute.
func CaptureContent() bool { return captureContent.Load() }

// Setup reads the OTEL_* environment, builds the providers and installs
// them, with the propagators and the error handler, as the globals.
func Setup(ctx context.Context, cfg Config) (_ *Telemetry, err error) {
	if cfg.LookupEnv == nil {
		cfg.LookupEnv = os.LookupEnv
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	s, err := parseSettings(cfg.LookupEnv, cfg.ServiceName)
	if err != nil {
		return nil, fmt.Errorf("telemetry: %w", err)
	}
	t := &Telemetry{}
	defer func() {
		if err != nil {
			_ = t.Shutdown(context.WithoutCancel(ctx))
		}
	}()
	captureContent.Store(s.captureContent && !s.disabled)

	var props []propagation.TextMapPropagator
	for _, p := range s.propagators {
		switch p {
		case "tracecontext":
			props = append(props, propagation.TraceContext{})
		case "baggage":
			props = append(props, propagation.Baggage{})
		}
	}
	t.Propagator = propagation.NewCompositeTextMapPropagator(props...)
	otel.SetTextMapPropagator(t.Propagator)
	handler := newLimitedHandler(cfg.Logger, ErrorLogInterval)
	otel.SetErrorHandler(handler)
	// The SDK's own diagnostics: errors only, through our logger.
	otel.SetLogger(logr.FromSlogHandler(cfg.Logger.Handler()))

	if s.disabled {
		t.TracerProvider, t.MeterProvider = tracenoop.NewTracerProvider(), metricnoop.NewMeterProvider()
		otel.SetTracerProvider(t.TracerProvider)
		otel.SetMeterProvider(t.MeterProvider)
		cfg.Logger.InfoContext(ctx, "telemetry disabled (OTEL_SDK_DISABLED)")
		return t, nil
	}

	attrs := []attribute.KeyValue{attribute.String("service.name", s.serviceName)}
	for k, v := range s.resourceAttrs {
		if k != "service.name" {
			attrs = append(attrs, attribute.String(k, v))
		}
	}
	res, err := resource.Merge(resource.Default(), resource.NewSchemaless(attrs...))
	if err != nil {
		return nil, fmt.Errorf("telemetry: resource: %w", err)
	}

	// Traces: without an exporter, a no-op provider. It still carries an
	// incoming trace context through to outgoing calls and log lines.
	if s.tracesExporter == "otlp" {
		exp, err := traceExporter(ctx, s.traces, s.timeout("OTEL_EXPORTER_OTLP_TRACES_TIMEOUT"))
		if err != nil {
			return nil, err
		}
		tp := sdktrace.NewTracerProvider(
			sdktrace.WithResource(res),
			sdktrace.WithSampler(sampler(s.sampler, s.samplerArg)),
			// The batcher's queue is bounded (OTEL_BSP_MAX_QUEUE_SIZE,
			// default 2048): with the collector down, spans are dropped,
			// never queued without end.
			sdktrace.WithBatcher(exp, s.batchOptions()...),
		)
		t.shutdowns = append(t.shutdowns, tp.Shutdown)
		t.TracerProvider = tp
	} else {
		t.TracerProvider = tracenoop.NewTracerProvider()
	}
	otel.SetTracerProvider(t.TracerProvider)

	reg := prometheus.NewRegistry()
	prom, err := otelprom.New(otelprom.WithRegisterer(reg), otelprom.WithoutScopeInfo())
	if err != nil {
		return nil, fmt.Errorf("telemetry: prometheus exporter: %w", err)
	}
	mopts := []sdkmetric.Option{sdkmetric.WithResource(res), sdkmetric.WithReader(prom)}
	if s.metricsOTLP {
		exp, err := metricExporter(ctx, s.metrics, s.timeout("OTEL_EXPORTER_OTLP_METRICS_TIMEOUT"))
		if err != nil {
			return nil, err
		}
		var ropts []sdkmetric.PeriodicReaderOption
		if ms, ok := s.ints["OTEL_METRIC_EXPORT_INTERVAL"]; ok && ms > 0 {
			ropts = append(ropts, sdkmetric.WithInterval(time.Duration(ms)*time.Millisecond))
		}
		if ms, ok := s.ints["OTEL_METRIC_EXPORT_TIMEOUT"]; ok && ms > 0 {
			ropts = append(ropts, sdkmetric.WithTimeout(time.Duration(ms)*time.Millisecond))
		}
		mopts = append(mopts, sdkmetric.WithReader(sdkmetric.NewPeriodicReader(exp, ropts...)))
	}
	mp := sdkmetric.NewMeterProvider(mopts...)
	t.shutdowns = append(t.shutdowns, mp.Shutdown)
	t.MeterProvider = mp
	otel.SetMeterProvider(mp)
	t.metrics = promhttp.HandlerFor(reg, promhttp.HandlerOpts{ErrorLog: slog.NewLogLogger(cfg.Logger.Handler(), slog.LevelWarn)})

	cfg.Logger.InfoContext(ctx, "telemetry configured", "service_name", s.serviceName,
		"traces", describe(s.tracesExporter == "otlp", s.traces), "metrics_otlp", describe(s.metricsOTLP, s.metrics),
		"sampler", s.sampler, "content_capture", s.captureContent)
	return t, nil
}

func describe(on bool, e endpoint) string {
	if !on {
		return "none"
	}
	return e.protocol + " " + e.url.Redacted()
}

// timeout is the signal's exporter timeout, else the generic one; 0 for
// the exporter's default.
func (s settings) timeout(signalVar string) time.Duration {
	ms, ok := s.ints[signalVar]
	if !ok {
		ms = s.ints["OTEL_EXPORTER_OTLP_TIMEOUT"]
	}
	return time.Duration(ms) * time.Millisecond
}

func (s settings) batchOptions() []sdktrace.BatchSpanProcessorOption {
	var o []sdktrace.BatchSpanProcessorOption
	ms := func(name string) (time.Duration, bool) {
		n, ok := s.ints[name]
		return time.Duration(n) * time.Millisecond, ok && n > 0
	}
	if d, ok := ms("OTEL_BSP_SCHEDULE_DELAY"); ok {
		o = append(o, sdktrace.WithBatchTimeout(d))
	}
	if d, ok := ms("OTEL_BSP_EXPORT_TIMEOUT"); ok {
		o = append(o, sdktrace.WithExportTimeout(d))
	}
	if n, ok := s.ints["OTEL_BSP_MAX_QUEUE_SIZE"]; ok && n > 0 {
		o = append(o, sdktrace.WithMaxQueueSize(int(n)))
	}
	if n, ok := s.ints["OTEL_BSP_MAX_EXPORT_BATCH_SIZE"]; ok && n > 0 {
		o = append(o, sdktrace.WithMaxExportBatchSize(int(n)))
	}
	return o
}

func traceExporter(ctx context.Context, e endpoint, timeout time.Duration) (sdktrace.SpanExporter, error) {
	var (
		exp sdktrace.SpanExporter
		err error
	)
	if e.protocol == ProtocolGRPC {
		opts := []otlptracegrpc.Option{otlptracegrpc.WithEndpointURL(e.url.String())}
		if timeout > 0 {
			opts = append(opts, otlptracegrpc.WithTimeout(timeout))
		}
		exp, err = otlptracegrpc.New(ctx, opts...)
	} else {
		opts := []otlptracehttp.Option{otlptracehttp.WithEndpointURL(e.url.String())}
		if timeout > 0 {
			opts = append(opts, otlptracehttp.WithTimeout(timeout))
		}
		exp, err = otlptracehttp.New(ctx, opts...)
	}
	if err != nil {
		return nil, fmt.Errorf("telemetry: OTLP trace exporter: %w", err)
	}
	return exp, nil
}

func metricExporter(ctx context.Context, e endpoint, timeout time.Duration) (sdkmetric.Exporter, error) {
	var (
		exp sdkmetric.Exporter
		err error
	)
	if e.protocol == ProtocolGRPC {
		opts := []otlpmetricgrpc.Option{otlpmetricgrpc.WithEndpointURL(e.url.String())}
		if timeout > 0 {
			opts = append(opts, otlpmetricgrpc.WithTimeout(timeout))
		}
		exp, err = otlpmetricgrpc.New(ctx, opts...)
	} else {
		opts := []otlpmetrichttp.Option{otlpmetrichttp.WithEndpointURL(e.url.String())}
		if timeout > 0 {
			opts = append(opts, otlpmetrichttp.WithTimeout(timeout))
		}
		exp, err = otlpmetrichttp.New(ctx, opts...)
	}
	if err != nil {
		return nil, fmt.Errorf("telemetry: OTLP metric exporter: %w", err)
	}
	return exp, nil
}

func sampler(name string, arg float64) sdktrace.Sampler {
	switch name {
	case "always_on":
		return sdktrace.AlwaysSample()
	case "always_off":
		return sdktrace.NeverSample()
	case "traceidratio":
		return sdktrace.TraceIDRatioBased(arg)
	case "parentbased_always_off":
		return sdktrace.ParentBased(sdktrace.NeverSample())
	case "parentbased_traceidratio":
		return sdktrace.ParentBased(sdktrace.TraceIDRatioBased(arg))
	default:
		return sdktrace.ParentBased(sdktrace.AlwaysSample())
	}
}

// MetricsHandler serves the metrics as Prometheus text; nil when the SDK
// is disabled.
func (t *Telemetry) MetricsHandler() http.Handler { return t.metrics }

// Shutdown flushes the spans and metrics not yet exported and stops the
// exporters; ctx bounds the wait (an unreachable collector must not hold
// the process). Later calls return the first result.
func (t *Telemetry) Shutdown(ctx context.Context) error {
	t.once.Do(func() {
		var errs []error
		for i := len(t.shutdowns) - 1; i >= 0; i-- {
			errs = append(errs, t.shutdowns[i](ctx))
		}
		t.err = errors.Join(errs...)
	})
	return t.err
}

// limitedHandler logs OpenTelemetry errors (failed exports, mostly) at
// most once per interval, with how many it kept quiet since.
type limitedHandler struct {
	logger *slog.Logger
	limit  logging.Limiter
}

func newLimitedHandler(logger *slog.Logger, interval time.Duration) *limitedHandler {
	return &limitedHandler{logger: logger, limit: logging.Limiter{Interval: interval}}
}

func (h *limitedHandler) Handle(err error) {
	if ok, n := h.limit.Allow(); ok {
		h.logger.Warn("telemetry export failed", "error", err, "suppressed_since_last", n)
	}
}
