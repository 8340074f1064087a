package server

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	agentv1 "github.com/fabro-sh/fabro-go/gen/fabro/agent/v1"
	vaultv1 "github.com/fabro-sh/fabro-go/gen/fabro/vault/v1"
	"github.com/fabro-sh/fabro-go/platform/auth"
	"github.com/fabro-sh/fabro-go/platform/auth/authtest"
	"github.com/fabro-sh/fabro-go/platform/logging"
	"github.com/fabro-sh/fabro-go/platform/telemetry"
	"github.com/fabro-sh/fabro-go/platform/telemetry/otlpsink"
)

// startTraced starts a server whose telemetry exports to a fresh sink.
func startTraced(t *testing.T, cfg Config) (*Server, *syncBuffer, *telemetry.Telemetry, *otlpsink.Listeners) {
	t.Helper()
	sink, err := otlpsink.Listen(otlpsink.New(10000, nil), "127.0.0.1:0", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(sink.Close)
	env := map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://" + sink.GRPCAddr, "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}
	tel, err := telemetry.Setup(t.Context(), telemetry.Config{ServiceName: "srv-test",
		LookupEnv: func(k string) (string, bool) { v, ok := env[k]; return v, ok }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tel.Shutdown(context.Background()) })
	logs := new(syncBuffer)
	logger := slog.New(logging.NewContextHandler(slog.NewJSONHandler(io.MultiWriter(logs, t.Output()), &slog.HandlerOptions{Level: slog.LevelDebug})))
	cfg.GRPCAddr, cfg.HTTPAddr, cfg.Metrics = "127.0.0.1:0", "127.0.0.1:0", tel.MetricsHandler()
	srv, err := Start(t.Context(), cfg, logger, newFakeVault(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
	})
	return srv, logs, tel, sink
}

func get(t *testing.T, url string, header map[string]string) (int, string) {
	t.Helper()
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, url, nil)
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func TestRESTTraceparent(t *testing.T) {
	fx := authtest.New(t)
	admin := "Bearer " + fx.Token("root", auth.RoleAdmin)
	srv, logs, tel, sink := startTraced(t, Config{Auth: fx.Store})
	const traceID = "4bf92f3577b34da6a3ce929d0e0e4736"
	base := "http://" + srv.HTTPAddr()
	if code, body := get(t, base+"/v1/secrets/OK", map[string]string{"traceparent": "00-" + traceID + "-00f067aa0ba902b7-01", "Authorization": admin}); code != http.StatusOK {
		t.Fatalf("status %d: %s", code, body)
	}
	// Malformed: ignored, a new trace starts, the request still works.
	if code, body := get(t, base+"/v1/secrets/MALFORMED", map[string]string{"traceparent": "00-zzzz-00f067aa0ba902b7-01", "Authorization": admin}); code != http.StatusOK {
		t.Fatalf("status %d: %s", code, body)
	}
	if err := tel.Shutdown(t.Context()); err != nil {
		t.Fatal(err)
	}
	var continued, fresh []otlpsink.Span
	for _, s := range sink.Spans() {
		if s.TraceID == traceID {
			continued = append(continued, s)
		} else {
			fresh = append(fresh, s)
		}
	}
	// The REST span, the loopback client span and the gRPC server span.
	names := map[string]bool{}
	for _, s := range continued {
		names[s.Kind+" "+s.Name] = true
	}
	for _, want := range []string{"SPAN_KIND_SERVER GET /v1/secrets/OK", "SPAN_KIND_CLIENT fabro.vault.v1.VaultService/GetSecret", "SPAN_KIND_SERVER fabro.vault.v1.VaultService/GetSecret"} {
		if !names[want] {
			t.Errorf("trace %s lacks %q; has %v", traceID, want, names)
		}
	}
	if len(fresh) < 3 {
		t.Errorf("the malformed traceparent's request made %d spans in other traces, want 3", len(fresh))
	}
	// The traced call's log line carries its trace id. A REST call is
	// logged once, by the HTTP access log (its loopback gRPC call is not
	// logged again); calls over gRPC get rpc_method too (cmd/fabro's
	// telemetry tests).
	var found bool
	for _, line := range strings.Split(logs.String(), "\n") {
		if strings.Contains(line, `"msg":"http request"`) && strings.Contains(line, `"trace_id":"`+traceID+`"`) &&
			strings.Contains(line, `"span_id":"`) && strings.Contains(line, `"path":"/v1/secrets/OK"`) {
			found = true
		}
	}
	if !found {
		t.Errorf("no http request line with trace_id %s:\n%s", traceID, logs.String())
	}
}

func TestMetricsAndPprof(t *testing.T) {
	fx := authtest.New(t)
	admin := map[string]string{"Authorization": "Bearer " + fx.Token("root", auth.RoleAdmin)}
	user := map[string]string{"Authorization": "Bearer " + fx.Token("ann", auth.RoleUser)}
	srv, _, _, _ := startTraced(t, Config{Auth: fx.Store, Pprof: true})
	base := "http://" + srv.HTTPAddr()
	get(t, base+"/v1/secrets/OK", admin)
	get(t, base+"/v1/secrets/MISSING", admin)
	for _, tc := range []struct {
		path   string
		header map[string]string
		want   int
	}{
		{"/metrics", nil, http.StatusUnauthorized},
		{"/metrics", map[string]string{"Authorization": "Bearer not-a-token"}, http.StatusUnauthorized},
		{"/metrics", user, http.StatusForbidden},
		{"/debug/pprof/", nil, http.StatusUnauthorized},
		{"/debug/pprof/", user, http.StatusForbidden},
		{"/debug/pprof/", admin, http.StatusOK},
	} {
		if code, body := get(t, base+tc.path, tc.header); code != tc.want {
			t.Errorf("GET %s with %v = %d %s, want %d", tc.path, tc.header, code, body, tc.want)
		}
	}
	// The server records a call's latency when the call ends, which can be
	// after the REST answer reached this client: scrape until both codes
	// are there.
	var (
		codes map[string]bool
		body  string
	)
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		codes, body = getSecretCodes(t, base, admin)
		if len(codes) >= 2 || time.Now().After(deadline) {
			break
		}
	}
	if len(codes) < 2 {
		t.Errorf("want GetSecret latency per code (OK and NOT_FOUND), got %v in\n%s", codes, body)
	}

	// The operator's switch: a scraper on loopback needs no credential.
	open, _, _, _ := startTraced(t, Config{Auth: fx.Store, MetricsLoopbackOpen: true})
	if code, _ := get(t, "http://"+open.HTTPAddr()+"/metrics", nil); code != http.StatusOK {
		t.Errorf("MetricsLoopbackOpen: /metrics from loopback = %d, want 200", code)
	}
	if code, _ := get(t, "http://"+open.HTTPAddr()+"/debug/pprof/", admin); code != http.StatusNotFound {
		t.Errorf("pprof off by default, yet /debug/pprof/ answers %d", code)
	}
}

func famNames[V any](m map[string]V) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

func TestSessionIDOfRequests(t *testing.T) {
	for _, tc := range []struct {
		req  any
		want string
	}{
		{&agentv1.PromptRequest{SessionId: "s_1", Text: "secret prompt"}, "s_1"},
		{&agentv1.CreateSessionRequest{}, ""},
		{&vaultv1.GetSecretRequest{Name: "x"}, ""},
		{"not a message", ""},
	} {
		if got := sessionID(tc.req); got != tc.want {
			t.Errorf("sessionID(%T) = %q, want %q", tc.req, got, tc.want)
		}
	}
}

// getSecretCodes scrapes /metrics for the codes GetSecret's latency
// histogram has.
func getSecretCodes(t *testing.T, base string, admin map[string]string) (map[string]bool, string) {
	t.Helper()
	code, body := get(t, base+"/metrics", admin)
	if code != http.StatusOK {
		t.Fatalf("/metrics: %d", code)
	}
	fams, err := telemetry.ParsePrometheus(strings.NewReader(body))
	if err != nil {
		t.Fatalf("parse /metrics: %v\n%s", err, body)
	}
	f := fams["rpc_server_call_duration_seconds"]
	if f == nil {
		t.Fatalf("no RPC latency histogram; families: %v", famNames(fams))
	}
	codes := map[string]bool{}
	for _, m := range f.GetMetric() {
		labels := map[string]string{}
		for _, l := range m.GetLabel() {
			labels[l.GetName()] = l.GetValue()
		}
		if labels["rpc_method"] == "fabro.vault.v1.VaultService/GetSecret" || labels["rpc_method"] == "GetSecret" {
			codes[labels["rpc_response_status_code"]+labels["rpc_grpc_status_code"]] = true
		}
	}
	return codes, body
}
