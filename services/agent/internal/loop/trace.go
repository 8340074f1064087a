package loop

import (
	"context"
	"strings"
	"sync"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	otelcodes "go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	agentv1 "github.com/fabro-sh/fabro-go/gen/fabro/agent/v1"
	"github.com/fabro-sh/fabro-go/platform/telemetry"
)

// The spans of a prompt: "invoke_agent" for the prompt, "turn N" for each
// round (the model call and its tool calls), "execute_tool <name>" for each
// call, after the GenAI semantic conventions. They carry ids, counts and
// outcomes; prompt and tool text only with content capture on.
const scope = "github.com/fabro-sh/fabro-go/services/agent"

var (
	tracer = otel.Tracer(scope)

	instrumentsOnce sync.Once
	toolCallsCount  metric.Int64Counter
)

func toolCounter() metric.Int64Counter {
	instrumentsOnce.Do(func() {
		toolCallsCount, _ = otel.Meter(scope).Int64Counter("fabro.agent.tool_calls",
			metric.WithUnit("{call}"), metric.WithDescription("Tool calls run by agent sessions, per tool and outcome"))
	})
	return toolCallsCount
}

func (a *Agent) startPromptSpan(ctx context.Context, promptID, text string, continuation bool) (context.Context, trace.Span) {
	attrs := []attribute.KeyValue{
		attribute.String("gen_ai.operation.name", "invoke_agent"),
		attribute.String("gen_ai.request.model", a.opts.Model),
		attribute.String("fabro.session.id", a.opts.SessionID),
		attribute.String("fabro.prompt.id", promptID),
		attribute.Bool("fabro.prompt.continuation", continuation),
	}
	if telemetry.CaptureContent() {
		attrs = append(attrs, attribute.String("fabro.prompt.text", text))
	}
	return tracer.Start(ctx, "invoke_agent "+a.opts.SessionID, trace.WithAttributes(attrs...))
}

func endPromptSpan(span trace.Span, r *agentv1.PromptReport) {
	span.SetAttributes(
		attribute.String("fabro.prompt.status", strings.TrimPrefix(r.GetStatus().String(), "PROMPT_STATUS_")),
		attribute.Int("fabro.prompt.turns", int(r.GetTurns())),
		attribute.Int("fabro.prompt.tool_calls", int(r.GetToolCalls())),
		attribute.Int64("gen_ai.usage.input_tokens", r.GetUsage().GetInputTokens()+r.GetUsage().GetCacheReadTokens()+r.GetUsage().GetCacheWriteTokens()),
		attribute.Int64("gen_ai.usage.output_tokens", r.GetUsage().GetOutputTokens()),
		attribute.Int64("gen_ai.usage.cache_read.input_tokens", r.GetUsage().GetCacheReadTokens()),
		attribute.Int64("fabro.cost_usd_micros", r.GetCost().GetTotalUsdMicros()),
	)
	if e := r.GetError(); e != nil {
		span.SetAttributes(attribute.String("error.type", e.GetKind().String()))
		if r.GetStatus() == agentv1.PromptStatus_PROMPT_STATUS_FAILED {
			span.SetStatus(otelcodes.Error, e.GetKind().String())
		}
	}
	span.End()
}

// startTurnSpan starts the span of round turn and returns a cancel that
// ends it once the round ends (endRound passes a nil cause; an interrupt's
// cause is recorded as an event, and the round's end still ends the span).
func (a *Agent) startTurnSpan(ctx context.Context, turn int32) (context.Context, func(context.CancelCauseFunc) context.CancelCauseFunc) {
	ctx, span := tracer.Start(ctx, "turn", trace.WithAttributes(
		attribute.String("fabro.session.id", a.opts.SessionID),
		attribute.Int("fabro.agent.turn", int(turn)),
		attribute.String("gen_ai.request.model", a.opts.Model),
	))
	var once sync.Once
	return ctx, func(cancel context.CancelCauseFunc) context.CancelCauseFunc {
		return func(cause error) {
			if cause != nil {
				span.AddEvent("round cancelled", trace.WithAttributes(attribute.String("cause", cause.Error())))
			} else {
				once.Do(func() { span.End() })
			}
			cancel(cause)
		}
	}
}

func (a *Agent) startToolSpan(ctx context.Context, c ToolCall) (context.Context, trace.Span) {
	attrs := []attribute.KeyValue{
		attribute.String("gen_ai.operation.name", "execute_tool"),
		attribute.String("gen_ai.tool.name", c.Name),
		attribute.String("gen_ai.tool.call.id", c.ID),
		attribute.String("fabro.session.id", a.opts.SessionID),
	}
	if telemetry.CaptureContent() {
		attrs = append(attrs, attribute.String("gen_ai.tool.call.arguments", c.Arguments))
	}
	return tracer.Start(ctx, "execute_tool "+c.Name, trace.WithAttributes(attrs...))
}

func endToolSpan(ctx context.Context, span trace.Span, c ToolCall, r ToolResult) {
	outcome := "ok"
	if r.IsError {
		outcome = strings.ToLower(strings.TrimPrefix(r.Kind.String(), "TOOL_ERROR_KIND_"))
		if r.Kind == agentv1.ToolErrorKind_TOOL_ERROR_KIND_UNSPECIFIED {
			outcome = "error"
		}
	}
	truncated := r.CharsOmitted > 0 || r.OmittedBytes > 0
	span.SetAttributes(
		attribute.String("fabro.tool.outcome", outcome),
		attribute.Bool("fabro.tool.truncated", truncated),
		attribute.Int64("fabro.tool.output_chars_omitted", r.CharsOmitted),
		attribute.Int64("fabro.tool.output_bytes_omitted", r.OmittedBytes),
	)
	if p := r.Process; p != nil {
		span.SetAttributes(attribute.String("fabro.process.termination", p.GetTermination().String()))
		if p.ExitCode != nil {
			span.SetAttributes(attribute.Int("process.exit.code", int(p.GetExitCode())))
		}
	}
	if r.IsError {
		span.SetAttributes(attribute.String("error.type", outcome))
		span.SetStatus(otelcodes.Error, outcome)
	}
	span.End()
	toolCounter().Add(ctx, 1, metric.WithAttributes(attribute.String("tool", c.Name), attribute.String("outcome", outcome)))
}
