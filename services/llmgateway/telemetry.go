package llmgateway

import (
	"context"
	"sync"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	llmv1 "github.com/fabro-sh/fabro-go/gen/fabro/llm/v1"
	"github.com/fabro-sh/fabro-go/services/llmgateway/internal/catalog"
)

// The gateway's metrics, named after the GenAI semantic conventions where
// they have one (gen_ai.client.*), fabro.llm.* otherwise. Labels are the
// provider and model ids from the catalog, never request content.
type instruments struct {
	tokens     metric.Int64Counter     // fabro.llm.tokens{gen_ai.token.type}
	cost       metric.Int64Counter     // fabro.llm.cost (USD micros)
	retries    metric.Int64Counter     // fabro.llm.retries{error.type}
	failovers  metric.Int64Counter     // fabro.llm.failovers
	ttft       metric.Float64Histogram // gen_ai.client.time_to_first_token
	opDuration metric.Float64Histogram // gen_ai.client.operation.duration
}

var (
	instOnce sync.Once
	inst     instruments
)

func metrics() *instruments {
	instOnce.Do(func() {
		m := otel.Meter("github.com/fabro-sh/fabro-go/services/llmgateway")
		inst.tokens, _ = m.Int64Counter("fabro.llm.tokens", metric.WithUnit("{token}"),
			metric.WithDescription("Tokens of successful model calls, by provider, model and type (input, output, cache_read, cache_write)"))
		inst.cost, _ = m.Int64Counter("fabro.llm.cost", metric.WithUnit("{usd_micro}"),
			metric.WithDescription("Cost of successful model calls in millionths of a US dollar, by provider and model"))
		inst.retries, _ = m.Int64Counter("fabro.llm.retries", metric.WithUnit("{retry}"),
			metric.WithDescription("Attempts retried on the same route, by provider, model and error kind"))
		inst.failovers, _ = m.Int64Counter("fabro.llm.failovers", metric.WithUnit("{failover}"),
			metric.WithDescription("Calls moved to a fallback route, by the route left and the route taken"))
		inst.ttft, _ = m.Float64Histogram("gen_ai.client.time_to_first_token", metric.WithUnit("s"),
			metric.WithDescription("Time from sending a streaming request to its first output"))
		inst.opDuration, _ = m.Float64Histogram("gen_ai.client.operation.duration", metric.WithUnit("s"),
			metric.WithDescription("Duration of one upstream attempt, by provider, model and error type"))
	})
	return &inst
}

func routeAttrs(route catalog.Route) []attribute.KeyValue {
	return []attribute.KeyValue{
		attribute.String("gen_ai.provider.name", route.Provider.GetProviderId()),
		attribute.String("gen_ai.request.model", route.Model.GetModelId()),
	}
}

// recordUsage counts a successful attempt's tokens and cost.
func recordUsage(ctx context.Context, route catalog.Route, resp *llmv1.Response) {
	m := metrics()
	base := routeAttrs(route)
	u := resp.GetUsage()
	for _, t := range []struct {
		kind string
		n    int64
	}{{"input", u.GetInputTokens()}, {"output", u.GetOutputTokens()}, {"cache_read", u.GetCacheReadTokens()}, {"cache_write", u.GetCacheWriteTokens()}} {
		if t.n > 0 {
			m.tokens.Add(ctx, t.n, metric.WithAttributes(append(base, attribute.String("gen_ai.token.type", t.kind))...))
		}
	}
	if c := resp.GetCost().GetTotalUsdMicros(); c > 0 {
		m.cost.Add(ctx, c, metric.WithAttributes(base...))
	}
}

func recordAttempt(ctx context.Context, route catalog.Route, start time.Time, gerr *gwError) {
	attrs := routeAttrs(route)
	if gerr != nil {
		attrs = append(attrs, attribute.String("error.type", gerr.detail.GetKind().String()))
	}
	metrics().opDuration.Record(ctx, time.Since(start).Seconds(), metric.WithAttributes(attrs...))
}

// retryEvent marks a retry on the call's span (the RPC's) and counts it.
func retryEvent(ctx context.Context, route catalog.Route, attempt int, wait time.Duration, gerr *gwError) {
	kind := gerr.detail.GetKind().String()
	trace.SpanFromContext(ctx).AddEvent("gen_ai.retry", trace.WithAttributes(
		attribute.String("gen_ai.provider.name", route.Provider.GetProviderId()),
		attribute.String("gen_ai.request.model", route.Model.GetModelId()),
		attribute.Int("fabro.llm.attempt", attempt),
		attribute.Int64("fabro.llm.retry_wait_ms", wait.Milliseconds()),
		attribute.String("error.type", kind),
	))
	metrics().retries.Add(ctx, 1, metric.WithAttributes(append(routeAttrs(route), attribute.String("error.type", kind))...))
}

// failoverEvent marks a move to a fallback route.
func failoverEvent(ctx context.Context, from, to catalog.Route, kind llmv1.ErrorKind) {
	trace.SpanFromContext(ctx).AddEvent("gen_ai.failover", trace.WithAttributes(
		attribute.String("fabro.llm.from", from.Canonical()),
		attribute.String("fabro.llm.to", to.Canonical()),
		attribute.String("error.type", kind.String()),
	))
	metrics().failovers.Add(ctx, 1, metric.WithAttributes(attribute.String("from", from.Canonical()), attribute.String("to", to.Canonical())))
}

func recordFirstToken(ctx context.Context, route catalog.Route, since time.Time) {
	metrics().ttft.Record(ctx, time.Since(since).Seconds(), metric.WithAttributes(routeAttrs(route)...))
}
