package telemetry

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/metric"

	"github.com/fabro-sh/fabro-go/platform/telemetry/otlpsink"
)

func envOf(m map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

func TestSetupExportsOverBothProtocols(t *testing.T) {
	sink, err := otlpsink.Listen(otlpsink.New(1000, nil), "127.0.0.1:0", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer sink.Close()
	for _, tc := range []struct{ protocol, endpoint string }{
		{ProtocolGRPC, "http://" + sink.GRPCAddr},
		{ProtocolHTTPProtobuf, "http://" + sink.HTTPAddr},
	} {
		t.Run(tc.protocol, func(t *testing.T) {
			ctx := context.Background()
			tel, err := Setup(ctx, Config{ServiceName: "unit", LookupEnv: envOf(map[string]string{
				"OTEL_EXPORTER_OTLP_ENDPOINT": tc.endpoint,
				"OTEL_EXPORTER_OTLP_PROTOCOL": tc.protocol,
				"OTEL_RESOURCE_ATTRIBUTES":    "deployment.environment=test%20run,service.name=ignored",
				"OTEL_SERVICE_NAME":           "svc-" + tc.protocol,
			})})
			if err != nil {
				t.Fatal(err)
			}
			_, span := otel.Tracer("test").Start(ctx, "op-"+tc.protocol)
			span.End()
			c, _ := otel.Meter("test").Int64Counter("fabro.test.count", metric.WithUnit("{call}"))
			c.Add(ctx, 3)
			// Shutdown flushes: no wait for the batch timer.
			if err := tel.Shutdown(ctx); err != nil {
				t.Fatal(err)
			}
			var got *otlpsink.Span
			for _, s := range sink.Spans() {
				if s.Name == "op-"+tc.protocol {
					got = &s
				}
			}
			if got == nil || got.Service != "svc-"+tc.protocol {
				t.Fatalf("span not received or wrong service: %+v", got)
			}
			if !strings.Contains(got.Raw, "test run") {
				t.Errorf("resource attribute missing: %s", got.Raw)
			}
			if !sink.MetricNames()["fabro.test.count"] {
				t.Errorf("metric not received: %v", sink.MetricNames())
			}
		})
	}
}

func TestNothingSetExportsNothing(t *testing.T) {
	tel, err := Setup(context.Background(), Config{ServiceName: "unit", LookupEnv: envOf(nil)})
	if err != nil {
		t.Fatal(err)
	}
	defer tel.Shutdown(context.Background())
	_, span := otel.Tracer("x").Start(context.Background(), "op")
	if span.IsRecording() {
		t.Error("a span records with no exporter configured")
	}
	span.End()
	if tel.MetricsHandler() == nil {
		t.Fatal("no /metrics handler")
	}
}

func TestBadValuesNameTheVariable(t *testing.T) {
	for _, tc := range []struct{ name, value string }{
		{"OTEL_SDK_DISABLED", "yes"},
		{"OTEL_EXPORTER_OTLP_PROTOCOL", "http/json"},
		{"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "udp"},
		{"OTEL_EXPORTER_OTLP_ENDPOINT", "localhost:4317"},
		{"OTEL_EXPORTER_OTLP_METRICS_ENDPOINT", "ftp://x"},
		{"OTEL_TRACES_SAMPLER", "sometimes"},
		{"OTEL_TRACES_EXPORTER", "jaeger"},
		{"OTEL_METRICS_EXPORTER", "statsd"},
		{"OTEL_RESOURCE_ATTRIBUTES", "novalue"},
		{"OTEL_BSP_MAX_QUEUE_SIZE", "-3"},
		{"OTEL_METRIC_EXPORT_INTERVAL", "1m"},
		{"OTEL_PROPAGATORS", "b3"},
		{"OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Setup(context.Background(), Config{LookupEnv: envOf(map[string]string{tc.name: tc.value})})
			if err == nil || !strings.Contains(err.Error(), tc.name) {
				t.Fatalf("err = %v, want one naming %s", err, tc.name)
			}
		})
	}
	t.Run("OTEL_TRACES_SAMPLER_ARG", func(t *testing.T) {
		_, err := Setup(context.Background(), Config{LookupEnv: envOf(map[string]string{
			"OTEL_TRACES_SAMPLER": "traceidratio", "OTEL_TRACES_SAMPLER_ARG": "1.5"})})
		if err == nil || !strings.Contains(err.Error(), "OTEL_TRACES_SAMPLER_ARG") {
			t.Fatalf("err = %v", err)
		}
	})
}

func TestUnreachableEndpointRunsAndShutsDownBounded(t *testing.T) {
	var logs syncBuffer
	logger := slog.New(slog.NewTextHandler(&logs, nil))
	tel, err := Setup(context.Background(), Config{ServiceName: "unit", Logger: logger, LookupEnv: envOf(map[string]string{
		// Port 9 (discard): nothing listens on loopback.
		"OTEL_EXPORTER_OTLP_ENDPOINT":    "http://127.0.0.1:9",
		"OTEL_EXPORTER_OTLP_PROTOCOL":    "grpc",
		"OTEL_BSP_MAX_QUEUE_SIZE":        "16",
		"OTEL_BSP_MAX_EXPORT_BATCH_SIZE": "8",
		"OTEL_BSP_SCHEDULE_DELAY":        "1",
		"OTEL_EXPORTER_OTLP_TIMEOUT":     "50",
	})})
	if err != nil {
		t.Fatal(err)
	}
	tp := tel.TracerProvider.(interface {
		ForceFlush(context.Context) error
	})
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for round := range 5 {
		for range 2000 { // far more than the queue holds: the excess is dropped
			_, span := otel.Tracer("x").Start(context.Background(), "op")
			span.End()
		}
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		_ = tp.ForceFlush(ctx) // fails: every export fails
		cancel()
		_ = round
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	// 10000 spans kept would be megabytes; the queue holds 16.
	if grown := int64(after.HeapAlloc) - int64(before.HeapAlloc); grown > 4<<20 {
		t.Errorf("heap grew by %d bytes with the collector away", grown)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	_ = tel.Shutdown(ctx) // returns, within ctx, whatever the collector
	if n := strings.Count(logs.String(), "telemetry export failed"); n != 1 {
		t.Errorf("%d export-failure lines within a second, want exactly 1 (logged, then rate-limited):\n%s", n, logs.String())
	}
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func TestLimitedHandlerLogsOncePerInterval(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var logs bytes.Buffer
		h := newLimitedHandler(slog.New(slog.NewTextHandler(&logs, nil)), time.Minute)
		for range 50 {
			h.Handle(errors.New("connection refused"))
			time.Sleep(time.Second)
		}
		if n := strings.Count(logs.String(), "telemetry export failed"); n != 1 {
			t.Fatalf("%d lines in 50 s, want 1:\n%s", n, logs.String())
		}
		time.Sleep(time.Minute)
		h.Handle(errors.New("connection refused"))
		if !strings.Contains(logs.String(), "suppressed_since_last=49") {
			t.Fatalf("the second line should count the suppressed errors:\n%s", logs.String())
		}
	})
}

func TestMetricsHandlerParses(t *testing.T) {
	tel, err := Setup(context.Background(), Config{ServiceName: "unit", LookupEnv: envOf(nil)})
	if err != nil {
		t.Fatal(err)
	}
	defer tel.Shutdown(context.Background())
	c, _ := otel.Meter("test").Int64Counter("fabro.llm.tokens", metric.WithUnit("{token}"))
	c.Add(context.Background(), 42)
	rec := httptest.NewRecorder()
	tel.MetricsHandler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	fams, err := ParsePrometheus(rec.Body)
	if err != nil {
		t.Fatal(err)
	}
	f, ok := fams["fabro_llm_tokens_total"]
	if !ok {
		t.Fatalf("no fabro_llm_tokens_total in %v", keys(fams))
	}
	if v := f.GetMetric()[0].GetCounter().GetValue(); v != 42 {
		t.Fatalf("value %v", v)
	}
}

func keys[V any](m map[string]V) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}
