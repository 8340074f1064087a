package llmgateway

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	llmv1 "github.com/fabro-sh/fabro-go/gen/fabro/llm/v1"
	"github.com/fabro-sh/fabro-go/platform/server"
	"github.com/fabro-sh/fabro-go/services/llmgateway/fakeprovider"
	"github.com/fabro-sh/fabro-go/services/llmgateway/internal/codec"
	"github.com/fabro-sh/fabro-go/services/llmgateway/internal/codec/bedrock"
)

// lastBody decodes the fake's last request body.
func lastBody(t *testing.T, fp *fakeprovider.Server) map[string]any {
	t.Helper()
	reqs := fp.Requests()
	var m map[string]any
	if err := json.Unmarshal(reqs[len(reqs)-1].Body, &m); err != nil {
		t.Fatal(err)
	}
	return m
}

// TestCatalogOutputLimit: without a caller limit, the catalog's per-model
// limit is sent (Anthropic no longer gets a fixed 8192, the others none);
// a caller's limit wins.
func TestCatalogOutputLimit(t *testing.T) {
	fp, client, gw := newE2E(t)
	for _, tt := range []struct {
		model, field string
	}{
		{"anthropic/claude-sonnet-4.5", "max_tokens"},
		{"openai/gpt-5", "max_output_tokens"},
		{"groq/llama-3.3-70b-versatile", "max_tokens"},
	} {
		r, err := gw.ResolveModel(t.Context(), &llmv1.ResolveModelRequest{Selector: tt.model})
		if err != nil {
			t.Fatal(err)
		}
		want := float64(r.GetModel().GetMaxOutputTokens())
		fp.Enqueue(fakeprovider.Turn{Text: "ok"}, fakeprovider.Turn{Text: "ok"})
		req := userReq(tt.model, "hi")
		if _, err := client.Complete(t.Context(), &llmv1.CompleteRequest{Request: req}); err != nil {
			t.Fatal(err)
		}
		if got := lastBody(t, fp)[tt.field]; got != want || want == 0 {
			t.Errorf("%s: %s = %v, want the catalog's %v", tt.model, tt.field, got, want)
		}
		n := int32(77)
		req.MaxOutputTokens = &n
		if _, err := client.Complete(t.Context(), &llmv1.CompleteRequest{Request: req}); err != nil {
			t.Fatal(err)
		}
		if got := lastBody(t, fp)[tt.field]; got != float64(77) {
			t.Errorf("%s: %s = %v, want the caller's 77", tt.model, tt.field, got)
		}
	}
}

// TestStructuredOutputFallback: a model the catalog marks without native
// schema support gets the schema as instructions, and the reply is held to
// the schema.
func TestStructuredOutputFallback(t *testing.T) {
	fp, client, _ := newE2E(t)
	const model = "groq/llama-3.3-70b-versatile" // capabilities: tools only
	schema := `{"type":"object","properties":{"n":{"type":"integer"}},"required":["n"]}`
	req := userReq(model, "count")
	req.ResponseFormat = &llmv1.ResponseFormat{Type: llmv1.ResponseFormatType_RESPONSE_FORMAT_TYPE_JSON_SCHEMA, Name: "count", Schema: schema}

	fp.Enqueue(fakeprovider.Turn{Text: `{"n": 3}`})
	resp, err := client.Complete(t.Context(), &llmv1.CompleteRequest{Request: req})
	if err != nil {
		t.Fatal(err)
	}
	body := lastBody(t, fp)
	rf, _ := body["response_format"].(map[string]any)
	if rf["type"] != "json_object" || !strings.Contains(string(fp.Requests()[0].Body), `\"required\":[\"n\"]`) {
		t.Errorf("upstream request: response_format %v, body %s", rf, fp.Requests()[0].Body)
	}
	if len(resp.GetResponse().GetWarnings()) != 1 || !strings.Contains(resp.GetResponse().GetWarnings()[0], "no native structured output") {
		t.Errorf("warnings %q", resp.GetResponse().GetWarnings())
	}

	fp.Enqueue(fakeprovider.Turn{Text: `{"n": "three"}`})
	_, err = client.Complete(t.Context(), &llmv1.CompleteRequest{Request: req})
	if d := detailOf(t, err); d.GetKind() != llmv1.ErrorKind_ERROR_KIND_RESPONSE_DECODE || !strings.Contains(d.GetMessage(), "does not match schema count") {
		t.Errorf("invalid reply: %v", err)
	}

	// A model with native support gets the schema natively.
	fp.Enqueue(fakeprovider.Turn{Text: `{"n": 3}`})
	req.Model = "openai/gpt-5"
	if _, err := client.Complete(t.Context(), &llmv1.CompleteRequest{Request: req}); err != nil {
		t.Fatal(err)
	}
	if f := lastBody(t, fp)["text"].(map[string]any)["format"].(map[string]any); f["type"] != "json_schema" {
		t.Errorf("native format %v", f)
	}
}

// TestForeignSignatureDropped: another provider's signatures are not sent,
// and the Response says so.
func TestForeignSignatureDropped(t *testing.T) {
	fp, client, _ := newE2E(t)
	fp.Enqueue(fakeprovider.Turn{Text: "ok"})
	req := userReq("anthropic/claude-sonnet-4.5", "hi")
	req.Messages = append(req.Messages,
		&llmv1.Message{Role: llmv1.Role_ROLE_ASSISTANT, Parts: []*llmv1.ContentPart{
			{Part: &llmv1.ContentPart_Reasoning{Reasoning: &llmv1.ReasoningPart{Text: "thought", Signature: "GEMINI-SIG", SignatureOrigin: "gemini"}}},
			{Part: &llmv1.ContentPart_Reasoning{Reasoning: &llmv1.ReasoningPart{Text: "mine", Signature: "ANTH-SIG", SignatureOrigin: "anthropic"}}},
			{Part: &llmv1.ContentPart_Text{Text: &llmv1.TextPart{Text: "answer"}}},
		}},
		userText("more"))
	resp, err := client.Complete(t.Context(), &llmv1.CompleteRequest{Request: req})
	if err != nil {
		t.Fatal(err)
	}
	body := string(fp.Requests()[0].Body)
	if strings.Contains(body, "GEMINI-SIG") || !strings.Contains(body, "ANTH-SIG") {
		t.Errorf("upstream body %s", body)
	}
	w := resp.GetResponse().GetWarnings()
	if len(w) != 1 || !strings.Contains(w[0], "dropped 1 signature(s) made by gemini") {
		t.Errorf("warnings %q", w)
	}
}

// TestFailoverListsEveryRoute: the final error names each route tried.
func TestFailoverListsEveryRoute(t *testing.T) {
	u := newUpstream(t, turn{status: 500}, turn{status: 500}, turn{status: 500}, turn{status: 502}, turn{status: 502}, turn{status: 502})
	gw := newGateway(t, u)
	_, err := dial(t, gw).Complete(t.Context(), &llmv1.CompleteRequest{Request: userReq("f1", "hi")})
	msg := status.Convert(err).Message()
	if !strings.Contains(msg, "all 2 routes failed") || !strings.Contains(msg, "fake/fake-1: scripted 500") || !strings.Contains(msg, "backup/backup-1: scripted 502") {
		t.Errorf("message %q", msg)
	}
}

// TestBedrockRegionFromEnvironment: with no region in the catalog's base
// URL, AWS_REGION (then AWS_DEFAULT_REGION) picks the endpoint and signing
// region.
func TestBedrockRegionFromEnvironment(t *testing.T) {
	for _, tt := range []struct {
		env  map[string]string
		want string
	}{
		{map[string]string{"AWS_REGION": "eu-west-3"}, "eu-west-3"},
		{map[string]string{"AWS_DEFAULT_REGION": "ap-south-1"}, "ap-south-1"},
		{map[string]string{"AWS_REGION": "eu-west-3", "AWS_DEFAULT_REGION": "ap-south-1"}, "eu-west-3"},
		{map[string]string{}, bedrock.DefaultRegion},
	} {
		env := map[string]string{"AWS_ACCESS_KEY_ID": "AKID", "AWS_SECRET_ACCESS_KEY": "secret"}
		for k, v := range tt.env {
			env[k] = v
		}
		p := &llmv1.Provider{ProviderId: "bedrock", Codec: llmv1.Codec_CODEC_BEDROCK_CONVERSE, BaseUrl: "https://bedrock-runtime.{region}.amazonaws.com",
			Auth: &llmv1.Auth{Scheme: llmv1.AuthScheme_AUTH_SCHEME_AWS_SIGV4, CredentialNames: []string{"AWS_BEARER_TOKEN_BEDROCK", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"}}}
		creds, err := credentialsFor(t.Context(), EnvCredentials{LookupEnv: func(k string) (string, bool) { v, ok := env[k]; return v, ok }}, p)
		if err != nil {
			t.Fatal(err)
		}
		hreq, err := builtinCodecs()[llmv1.Codec_CODEC_BEDROCK_CONVERSE].NewRequest(t.Context(), &codec.Call{Provider: p, Model: "m", Request: userReq("m", "hi"), Credentials: creds})
		if err != nil {
			t.Fatal(err)
		}
		if hreq.URL.Host != "bedrock-runtime."+tt.want+".amazonaws.com" || !strings.Contains(hreq.Header.Get("Authorization"), "/"+tt.want+"/bedrock/") {
			t.Errorf("env %v: host %s, authorization %s", tt.env, hreq.URL.Host, hreq.Header.Get("Authorization"))
		}
	}
}

// TestPerProviderIdleTimeout: a provider's own idle timeout cuts a stall
// the gateway's default would wait out.
func TestPerProviderIdleTimeout(t *testing.T) {
	fp := fakeprovider.New()
	l, err := fakeprovider.Listen("127.0.0.1:0", fp)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	var overlay map[string]any
	_ = json.Unmarshal(fakeprovider.CatalogOverlay(l.URL), &overlay)
	overlay["providers"].(map[string]any)["anthropic"].(map[string]any)["idleTimeout"] = "0.1s"
	b, _ := json.Marshal(overlay)
	path := filepath.Join(t.TempDir(), "overlay.json")
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	gw, err := New(t.Context(), Config{CatalogOverlay: path, IdleTimeout: time.Hour, MaxAttempts: 1,
		LookupEnv: func(k string) (string, bool) { v, ok := e2eEnv[k]; return v, ok }}, discardLogger())
	if err != nil {
		t.Fatal(err)
	}
	fp.Enqueue(fakeprovider.Turn{Text: "x", Fault: &fakeprovider.Fault{Kind: fakeprovider.FaultStall}})
	req := userReq("anthropic/claude-sonnet-4.5", "hi")
	req.DisableFallbacks = true
	st, err := dial(t, gw).Stream(t.Context(), &llmv1.StreamRequest{Request: req})
	if err != nil {
		t.Fatal(err)
	}
	_, err = collect(t, st)
	if d := detailOf(t, err); d.GetKind() != llmv1.ErrorKind_ERROR_KIND_TIMEOUT || !strings.Contains(d.GetMessage(), "100ms") {
		t.Errorf("error %v", err)
	}
}

// TestFakeScriptFaults: "stall" is a fault name, an unknown one an error,
// and an unknown fault kind never a clean reply.
func TestFakeScriptFaults(t *testing.T) {
	dir := t.TempDir()
	write := func(s string) string {
		p := filepath.Join(dir, "s.json")
		if err := os.WriteFile(p, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	turns, err := fakeprovider.LoadScript(write(`[{"Text":"x","Fault":{"Kind":"stall","AfterChunks":1}}]`))
	if err != nil || turns[0].Fault.Kind != fakeprovider.FaultStall {
		t.Errorf("stall: %v %+v", err, turns)
	}
	if _, err := fakeprovider.LoadScript(write(`[{"Text":"x","Fault":{"Kind":"stal"}}]`)); err == nil || !strings.Contains(err.Error(), `unknown fault "stal"`) {
		t.Errorf("unknown fault name: %v", err)
	}
	fp := fakeprovider.New(fakeprovider.Turn{Text: "x", Fault: &fakeprovider.Fault{Kind: 99}})
	l, err := fakeprovider.Listen("127.0.0.1:0", fp)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	resp, err := http.Post(l.URL+"/v1/messages", "application/json", strings.NewReader(`{}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusInternalServerError {
		t.Errorf("unknown fault kind: status %d", resp.StatusCode)
	}
}

// syncBuffer is a log sink safe for the server's goroutines.
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

// TestFailedStreamLogged: a stream that fails in band is logged with its
// error's code by the shipped server's access log, not code=OK.
func TestFailedStreamLogged(t *testing.T) {
	fp := fakeprovider.New()
	l, err := fakeprovider.Listen("127.0.0.1:0", fp)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	path := filepath.Join(t.TempDir(), "overlay.json")
	if err := os.WriteFile(path, fakeprovider.CatalogOverlay(l.URL), 0o600); err != nil {
		t.Fatal(err)
	}
	var logs syncBuffer
	logger := slog.New(slog.NewTextHandler(&logs, nil))
	gw, err := New(t.Context(), Config{CatalogOverlay: path, LookupEnv: func(k string) (string, bool) { v, ok := e2eEnv[k]; return v, ok }}, logger)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := server.Start(context.Background(), server.Config{GRPCAddr: "127.0.0.1:0", NoAuth: true}, logger, gw)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := grpc.NewClient(srv.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fp.Enqueue(fakeprovider.Turn{Text: "a reply long enough to be cut", ChunkRunes: 4, Fault: &fakeprovider.Fault{Kind: fakeprovider.FaultMidStreamError, AfterChunks: 3}})
	req := userReq("anthropic/claude-sonnet-4.5", "hi")
	req.DisableFallbacks = true
	st, err := llmv1.NewLLMGatewayServiceClient(conn).Stream(t.Context(), &llmv1.StreamRequest{Request: req})
	if err != nil {
		t.Fatal(err)
	}
	evs, err := collect(t, st)
	if err != nil || evs[len(evs)-1].GetError() == nil {
		t.Fatalf("want an in-band error event, got %v", err)
	}
	// The note to the access log is not the client's: upstream text in a
	// trailer could break the transport.
	if v := st.Trailer().Get(server.StreamErrorTrailer); len(v) > 0 {
		t.Errorf("the client got the internal trailer %q", v)
	}
	if err := srv.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	var line string
	for _, l := range strings.Split(logs.String(), "\n") {
		if strings.Contains(l, "grpc request") && strings.Contains(l, "/Stream") {
			line = l
		}
	}
	if !strings.Contains(line, "code="+codes.Unavailable.String()) || !strings.Contains(line, "Overloaded") {
		t.Errorf("access log line %q", line)
	}
}

// TestListProvidersReadiness: ready, missing credentials naming the
// variable, unusable with the probe's error, disabled.
func TestListProvidersReadiness(t *testing.T) {
	fp, client, _ := newE2E(t)
	fp.Script(func(r fakeprovider.Request) fakeprovider.Turn {
		if r.Protocol == "gemini-generate" {
			return fakeprovider.Turn{Fault: &fakeprovider.Fault{Kind: fakeprovider.FaultAuth}}
		}
		return fakeprovider.Turn{Text: "ready"}
	})
	for _, probe := range []bool{false, true} {
		resp, err := client.ListProviders(t.Context(), &llmv1.ListProvidersRequest{Probe: probe})
		if err != nil {
			t.Fatal(err)
		}
		if len(resp.GetReadiness()) != len(resp.GetProviders()) {
			t.Fatalf("%d readiness for %d providers", len(resp.GetReadiness()), len(resp.GetProviders()))
		}
		got := map[string]*llmv1.ProviderReadiness{}
		for i, r := range resp.GetReadiness() {
			if r.GetProviderId() != resp.GetProviders()[i].GetProviderId() {
				t.Errorf("readiness %d is %s, provider %s", i, r.GetProviderId(), resp.GetProviders()[i].GetProviderId())
			}
			got[r.GetProviderId()] = r
		}
		if r := got["anthropic"]; r.GetState() != llmv1.ReadinessState_READINESS_STATE_READY || r.GetProbed() != probe {
			t.Errorf("probe %v: anthropic %v", probe, r)
		}
		if r := got["mistral"]; r.GetState() != llmv1.ReadinessState_READINESS_STATE_MISSING_CREDENTIALS || !slices.Equal(r.GetMissingCredentials(), []string{"MISTRAL_API_KEY"}) {
			t.Errorf("mistral %v", r)
		}
		wantGemini := llmv1.ReadinessState_READINESS_STATE_READY
		if probe {
			wantGemini = llmv1.ReadinessState_READINESS_STATE_UNUSABLE
		}
		if r := got["gemini"]; r.GetState() != wantGemini || (probe && r.GetError().GetKind() != llmv1.ErrorKind_ERROR_KIND_AUTHENTICATION) {
			t.Errorf("probe %v: gemini %v", probe, r)
		}
	}
}

// TestProbeCredential: a key is probed with the provider's probe model
// before it is stored; a bad one says what failed.
func TestProbeCredential(t *testing.T) {
	fp := fakeprovider.New()
	l, err := fakeprovider.Listen("127.0.0.1:0", fp)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	path := filepath.Join(t.TempDir(), "overlay.json")
	if err := os.WriteFile(path, fakeprovider.CatalogOverlay(l.URL), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := Config{CatalogOverlay: path, LookupEnv: func(string) (string, bool) { return "", false }, MaxAttempts: 1}
	fp.Script(func(r fakeprovider.Request) fakeprovider.Turn {
		if r.Header.Get("X-Api-Key") != "good-key" {
			return fakeprovider.Turn{Fault: &fakeprovider.Fault{Kind: fakeprovider.FaultAuth}}
		}
		return fakeprovider.Turn{Text: "ready"}
	})
	res, err := ProbeCredential(t.Context(), cfg, "ANTHROPIC_API_KEY", "good-key", discardLogger())
	if err != nil || len(res) != 1 || res[0].Err != nil || res[0].Provider != "anthropic" {
		t.Fatalf("good key: %v %v", res, err)
	}
	res, err = ProbeCredential(t.Context(), cfg, "ANTHROPIC_API_KEY", "bad-key", discardLogger())
	if err != nil || len(res) != 1 || res[0].Err == nil {
		t.Fatalf("bad key: %v %v", res, err)
	}
	res, err = ProbeCredential(t.Context(), cfg, "SOME_TOOL_TOKEN", "x", discardLogger())
	if err != nil || len(res) != 0 {
		t.Errorf("unused name: %v %v", res, err)
	}
}
