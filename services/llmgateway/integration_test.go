package llmgateway

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	llmv1 "github.com/fabro-sh/fabro-go/gen/fabro/llm/v1"
	"github.com/fabro-sh/fabro-go/platform/auth"
	"github.com/fabro-sh/fabro-go/platform/auth/authtest"
	"github.com/fabro-sh/fabro-go/platform/server"
)

func TestSpans(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	u := newUpstream(t, turn{status: 503}, textTurn("hi"))
	client := dial(t, newGateway(t, u, func(c *Config) { c.TracerProvider = tp }))
	req := userReq("f1", "x")
	req.Metadata = map[string]string{"run_id": "run-7"}
	if _, err := client.Complete(t.Context(), &llmv1.CompleteRequest{Request: req}); err != nil {
		t.Fatal(err)
	}
	spans := rec.Ended()
	if len(spans) != 2 {
		t.Fatalf("%d spans, want one per attempt (2)", len(spans))
	}
	attrs := func(s sdktrace.ReadOnlySpan) map[attribute.Key]attribute.Value {
		m := map[attribute.Key]attribute.Value{}
		for _, kv := range s.Attributes() {
			m[kv.Key] = kv.Value
		}
		return m
	}
	failed, ok := attrs(spans[0]), attrs(spans[1])
	if spans[0].Status().Code.String() != "Error" || failed["error.type"].AsString() != "ERROR_KIND_OVERLOADED" || failed["fabro.llm.attempt"].AsInt64() != 1 {
		t.Errorf("failed attempt span: %v %v", spans[0].Status(), failed)
	}
	checks := map[attribute.Key]string{
		"gen_ai.system":             "fake",
		"gen_ai.provider.name":      "fake",
		"gen_ai.request.model":      "fake-1",
		"gen_ai.response.model":     "fake-1",
		"gen_ai.operation.name":     "chat",
		"fabro.llm.metadata.run_id": "run-7",
	}
	for k, v := range checks {
		if got := ok[k].AsString(); got != v {
			t.Errorf("%s = %q, want %q", k, got, v)
		}
	}
	if ok["gen_ai.usage.input_tokens"].AsInt64() != 10 || ok["gen_ai.usage.output_tokens"].AsInt64() != 2 ||
		!slices.Equal(ok["gen_ai.response.finish_reasons"].AsStringSlice(), []string{"stop"}) || ok["fabro.llm.attempt"].AsInt64() != 2 {
		t.Errorf("successful attempt span: %v", ok)
	}
	if spans[1].Name() != "chat fake-1" {
		t.Errorf("span name %q", spans[1].Name())
	}
}

// TestREST drives the gateway through the shared runtime's REST gateway,
// streaming included.
func TestREST(t *testing.T) {
	u := newUpstream(t, textTurn("over rest"), turn{events: textTurn("streamed").events})
	// One more model, whose id holds a ':' as Ollama tags do.
	var overlay map[string]map[string]any
	if err := json.Unmarshal([]byte(testOverlay(u.srv.URL)), &overlay); err != nil {
		t.Fatal(err)
	}
	overlay["models"]["fake/tagged:v1"] = map[string]any{}
	ob, _ := json.Marshal(overlay)
	overlayPath := filepath.Join(t.TempDir(), "overlay.json")
	if err := os.WriteFile(overlayPath, ob, 0o600); err != nil {
		t.Fatal(err)
	}
	gw := newGateway(t, u, func(c *Config) { c.CatalogOverlay = overlayPath })
	fx := authtest.New(t)
	srv, err := server.Start(t.Context(), server.Config{GRPCAddr: "127.0.0.1:0", HTTPAddr: "127.0.0.1:0", Auth: fx.Store}, slog.New(slog.DiscardHandler), gw)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Shutdown(context.Background()) })
	base := "http://" + srv.HTTPAddr()
	token := fx.Token("alice", auth.RoleUser)
	post := func(path, body string) *http.Response {
		t.Helper()
		req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, base+path, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = resp.Body.Close() })
		return resp
	}
	req := `{"request": {"model": "f1", "messages": [{"role": "ROLE_USER", "parts": [{"text": {"text": "hi"}}]}]}}`

	resp := post("/v1/llm:complete", req)
	var cr llmv1.CompleteResponse
	if err := decodeProtoJSON(resp, &cr); err != nil || resp.StatusCode != 200 {
		t.Fatalf("complete: %d %v", resp.StatusCode, err)
	}
	if got := cr.GetResponse().GetParts()[0].GetText().GetText(); got != "over rest" {
		t.Errorf("complete text %q", got)
	}

	resp = post("/v1/llm:stream", req)
	var kinds []string
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		var line struct {
			Result json.RawMessage `json:"result"`
		}
		if err := json.Unmarshal(sc.Bytes(), &line); err != nil {
			t.Fatalf("stream line %q: %v", sc.Text(), err)
		}
		var sr llmv1.StreamResponse
		if err := protojson.Unmarshal(line.Result, &sr); err != nil {
			t.Fatal(err)
		}
		kinds = append(kinds, string(sr.ProtoReflect().WhichOneof(sr.ProtoReflect().Descriptor().Oneofs().Get(0)).Name()))
	}
	want := []string{"started", "content_block_start", "text_delta", "content_block_end", "usage", "ended"}
	if !slices.Equal(kinds, want) {
		t.Errorf("REST stream events %v, want %v", kinds, want)
	}

	// Errors keep their code and detail over REST: unknown model is 404.
	resp = post("/v1/llm:complete", `{"request": {"model": "fake/fake-l", "messages": [{"role": "ROLE_USER", "parts": [{"text": {"text": "hi"}}]}]}}`)
	if resp.StatusCode != http.StatusNotFound {
		t.Errorf("unknown model over REST: %d", resp.StatusCode)
	}
	var body map[string]any
	_ = json.NewDecoder(resp.Body).Decode(&body)
	if b, _ := json.Marshal(body); !strings.Contains(string(b), "fake/fake-1") {
		t.Errorf("REST error lacks the hint: %s", b)
	}

	// ListModels over REST.
	lreq, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, base+"/v1/models?provider_id=fake", nil)
	lreq.Header.Set("Authorization", "Bearer "+token)
	lr, err := http.DefaultClient.Do(lreq)
	if err == nil {
		defer lr.Body.Close()
		var ml llmv1.ListModelsResponse
		if err := decodeProtoJSON(lr, &ml); err == nil && len(ml.GetModels()) != 3 { // fake-1, fake-2, tagged:v1
			t.Errorf("REST ListModels: %d models", len(ml.GetModels()))
		}
	}

	// The Get calls over REST, a model id with ':' included.
	var gp llmv1.GetProviderResponse
	if code := getREST(t, base, token, "/v1/providers/fake", &gp); code != http.StatusOK || gp.GetProvider().GetProviderId() != "fake" {
		t.Errorf("GET /v1/providers/fake: %d %v", code, &gp)
	}
	for _, id := range []string{"fake-1", "tagged:v1"} {
		var gm llmv1.GetModelResponse
		if code := getREST(t, base, token, "/v1/providers/fake/models/"+id, &gm); code != http.StatusOK || gm.GetModel().GetModelId() != id {
			t.Errorf("GET /v1/providers/fake/models/%s: %d %v", id, code, &gm)
		}
	}
	if code := getREST(t, base, token, "/v1/providers/fake/models/nope", &llmv1.GetModelResponse{}); code != http.StatusNotFound {
		t.Errorf("GET of an unknown model: %d, want 404", code)
	}
}

// getREST GETs path with the token and decodes the JSON answer into m.
func getREST(t *testing.T, base, token, path string, m proto.Message) int {
	t.Helper()
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, base+path, nil)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusOK {
		if err := decodeProtoJSON(resp, m); err != nil {
			t.Errorf("GET %s: %v", path, err)
		}
	}
	return resp.StatusCode
}

func decodeProtoJSON(resp *http.Response, m proto.Message) error {
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	return protojson.UnmarshalOptions{DiscardUnknown: true}.Unmarshal(b, m)
}
