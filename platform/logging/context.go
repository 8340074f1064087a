package logging

import (
	"context"
	"log/slog"

	"go.opentelemetry.io/otel/trace"
)

type ctxKey struct{}

// With returns ctx carrying attrs, which every line logged with the
// returned context (or one derived from it) includes, e.g.
// logging.With(ctx, slog.String("session_id", id)).
func With(ctx context.Context, attrs ...slog.Attr) context.Context {
	prev, _ := ctx.Value(ctxKey{}).([]slog.Attr)
	merged := make([]slog.Attr, 0, len(prev)+len(attrs))
	merged = append(append(merged, prev...), attrs...)
	return context.WithValue(ctx, ctxKey{}, merged)
}

// ContextHandler adds to each record the trace_id and span_id of the span
// in the record's context, if any, and the attributes stored by [With].
type ContextHandler struct{ next slog.Handler }

// NewContextHandler wraps next.
func NewContextHandler(next slog.Handler) *ContextHandler { return &ContextHandler{next: next} }

// Enabled implements slog.Handler.
func (h *ContextHandler) Enabled(ctx context.Context, l slog.Level) bool {
	return h.next.Enabled(ctx, l)
}

// Handle implements slog.Handler.
func (h *ContextHandler) Handle(ctx context.Context, r slog.Record) error {
	if ctx != nil {
		sc := trace.SpanContextFromContext(ctx)
		attrs, _ := ctx.Value(ctxKey{}).([]slog.Attr)
		if sc.IsValid() || len(attrs) > 0 {
			// The record's attribute array may be shared with the caller.
			r = r.Clone()
			if sc.IsValid() {
				r.AddAttrs(slog.String("trace_id", sc.TraceID().String()), slog.String("span_id", sc.SpanID().String()))
			}
			r.AddAttrs(attrs...)
		}
	}
	return h.next.Handle(ctx, r)
}

// WithAttrs implements slog.Handler.
func (h *ContextHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return &ContextHandler{next: h.next.WithAttrs(attrs)}
}

// WithGroup implements slog.Handler. The context attributes stay at the
// top level only if no group is open; inside a group they join it, which
// slog offers no way around.
func (h *ContextHandler) WithGroup(name string) slog.Handler {
	return &ContextHandler{next: h.next.WithGroup(name)}
}
