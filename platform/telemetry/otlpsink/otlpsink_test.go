package otlpsink_test

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"

	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/fabro-sh/fabro-go/platform/telemetry/otlpsink"
)

// TestQueryAPI exports two spans over OTLP/HTTP and reads their trace
// back from the query API.
func TestQueryAPI(t *testing.T) {
	l, err := otlpsink.Listen(otlpsink.New(10, nil), "127.0.0.1:0", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	exp, err := otlptracehttp.New(t.Context(), otlptracehttp.WithEndpointURL("http://"+l.HTTPAddr+"/v1/traces"))
	if err != nil {
		t.Fatal(err)
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	ctx, parent := tp.Tracer("t").Start(context.Background(), "parent")
	_, child := tp.Tracer("t").Start(ctx, "child")
	child.End()
	parent.End()
	_ = tp.Shutdown(context.Background())

	id := parent.SpanContext().TraceID().String()
	resp, err := http.Get("http://" + l.HTTPAddr + "/api/traces/" + id)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var spans []otlpsink.Span
	if err := json.NewDecoder(resp.Body).Decode(&spans); err != nil {
		t.Fatal(err)
	}
	if len(spans) != 2 || spans[0].Name != "parent" || spans[1].ParentSpanID != spans[0].SpanID {
		t.Fatalf("spans = %+v", spans)
	}
}
