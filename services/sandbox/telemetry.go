package sandbox

import (
	"context"
	"strings"
	"sync"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	otelcodes "go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	sandboxv1 "github.com/fabro-sh/fabro-go/gen/fabro/sandbox/v1"
	"github.com/fabro-sh/fabro-go/platform/telemetry"
)

const scope = "github.com/fabro-sh/fabro-go/services/sandbox"

var (
	tracer   = otel.Tracer(scope)
	instOnce sync.Once
	execs    metric.Int64Counter
	execDur  metric.Float64Histogram
)

// startExecSpan starts the span of one command: its driver and sandbox,
// never its command line or environment (content capture aside).
func startExecSpan(ctx context.Context, e *entry, command string) (context.Context, trace.Span) {
	attrs := []attribute.KeyValue{
		attribute.String("fabro.sandbox.driver", e.driver),
		attribute.String("fabro.sandbox.id", e.id),
	}
	if telemetry.CaptureContent() {
		attrs = append(attrs, attribute.String("process.command_line", command))
	}
	return tracer.Start(ctx, "sandbox.exec "+e.driver, trace.WithAttributes(attrs...))
}

// endExecSpan records how the command ended, on the span and in the exec
// count and duration metrics.
func endExecSpan(ctx context.Context, span trace.Span, driver string, res *sandboxv1.ExecResult, err error) {
	defer span.End()
	if err != nil {
		span.SetStatus(otelcodes.Error, "exec failed to start")
		span.SetAttributes(attribute.String("error.type", "start"))
		execs.Add(ctx, 1, metric.WithAttributes(attribute.String("driver", driver), attribute.String("termination", "error")))
		return
	}
	term := strings.ToLower(strings.TrimPrefix(res.GetTermination().String(), "TERMINATION_"))
	span.SetAttributes(
		attribute.String("fabro.exec.id", res.GetExecId()),
		attribute.String("fabro.exec.termination", term),
		attribute.Int64("fabro.exec.duration_ms", res.GetDuration().AsDuration().Milliseconds()),
		attribute.Int64("fabro.exec.stdout_bytes", res.GetStdoutStats().GetObservedBytes()),
		attribute.Int64("fabro.exec.stderr_bytes", res.GetStderrStats().GetObservedBytes()),
		attribute.Int64("fabro.exec.omitted_bytes", res.GetStdoutStats().GetOmittedBytes()+res.GetStderrStats().GetOmittedBytes()),
	)
	if res.ExitCode != nil {
		span.SetAttributes(attribute.Int("process.exit.code", int(res.GetExitCode())))
	}
	if res.GetSignal() != "" {
		span.SetAttributes(attribute.String("fabro.exec.signal", res.GetSignal()))
	}
	attrs := metric.WithAttributes(attribute.String("driver", driver), attribute.String("termination", term))
	execs.Add(ctx, 1, attrs)
	execDur.Record(ctx, res.GetDuration().AsDuration().Seconds(), attrs)
}

func initMetrics() {
	instOnce.Do(func() {
		m := otel.Meter(scope)
		execs, _ = m.Int64Counter("fabro.sandbox.execs", metric.WithUnit("{exec}"),
			metric.WithDescription("Commands run in sandboxes, by driver and how they ended"))
		execDur, _ = m.Float64Histogram("fabro.sandbox.exec.duration", metric.WithUnit("s"),
			metric.WithDescription("Duration of sandbox commands, by driver and how they ended"))
	})
}
