package vault

import (
	"context"
	"sync"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/fabro-sh/fabro-go/services/vault/internal/audit"
)

var (
	instOnce sync.Once
	resolves metric.Int64Counter
)

// observe counts credential resolves per caller and outcome, and puts the
// same on the RPC's span. Names of credentials are not recorded, values
// never.
func observe(ctx context.Context, e audit.Entry) {
	if e.Op != "resolve" {
		return
	}
	instOnce.Do(func() {
		resolves, _ = otel.Meter("github.com/fabro-sh/fabro-go/services/vault").Int64Counter("fabro.vault.resolves",
			metric.WithUnit("{resolve}"), metric.WithDescription("Credential resolves, by calling service and outcome (a gRPC code)"))
	})
	attrs := []attribute.KeyValue{attribute.String("caller", e.Caller), attribute.String("outcome", e.Outcome)}
	resolves.Add(ctx, 1, metric.WithAttributes(attrs...))
	trace.SpanFromContext(ctx).SetAttributes(
		attribute.String("fabro.vault.caller", e.Caller),
		attribute.String("fabro.vault.outcome", e.Outcome),
		attribute.Int("fabro.vault.credentials", len(e.Names)),
	)
}
