package logging

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/trace"
)

func TestContextAttributes(t *testing.T) {
	tid, _ := trace.TraceIDFromHex("4bf92f3577b34da6a3ce929d0e0e4736")
	sid, _ := trace.SpanIDFromHex("00f067aa0ba902b7")
	traced := trace.ContextWithSpanContext(context.Background(), trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid, TraceFlags: trace.FlagsSampled}))
	traced = With(traced, slog.String("session_id", "s_1"))
	traced = With(traced, slog.String("rpc_method", "/x.v1.X/Y"))
	for _, format := range []string{"text", "json"} {
		t.Run(format, func(t *testing.T) {
			var buf bytes.Buffer
			logger, err := New(&buf, format, "info")
			if err != nil {
				t.Fatal(err)
			}
			logger.InfoContext(traced, "traced line")
			logger.InfoContext(context.Background(), "plain line")
			lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
			for _, want := range []string{"4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7", "s_1", "/x.v1.X/Y", "trace_id", "span_id", "session_id", "rpc_method"} {
				if !strings.Contains(lines[0], want) {
					t.Errorf("traced line lacks %q: %s", want, lines[0])
				}
			}
			if strings.Contains(lines[1], "trace_id") || strings.Contains(lines[1], "session_id") {
				t.Errorf("plain line has context attributes: %s", lines[1])
			}
		})
	}
}
