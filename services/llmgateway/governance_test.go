package llmgateway

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go"
	anthropicoption "github.com/anthropics/anthropic-sdk-go/option"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	llmv1 "github.com/fabro-sh/fabro-go/gen/fabro/llm/v1"
	"github.com/fabro-sh/fabro-go/platform/auth"
	"github.com/fabro-sh/fabro-go/platform/server"
	"github.com/fabro-sh/fabro-go/services/llmgateway/fakeprovider"
)

// governedStack is the shipped server with real token checks against a
// token store whose tokens carry policies, the gateway in front of one
// fake provider, its governance clock fixed.
type governedStack struct {
	fp    *fakeprovider.Server
	base  string // REST base URL
	grpc  string
	store *auth.Store
}

func newGovernedStack(t testing.TB, opts ...func(*Config)) *governedStack {
	t.Helper()
	fp := fakeprovider.New()
	l, err := fakeprovider.Listen("127.0.0.1:0", fp)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	dir := t.TempDir()
	overlay := filepath.Join(dir, "overlay.json")
	if err := os.WriteFile(overlay, fakeprovider.CatalogOverlay(l.URL), 0o600); err != nil {
		t.Fatal(err)
	}
	clock := time.Date(2026, 12, 2, 10, 0, 5, 0, time.UTC)
	cfg := Config{CatalogOverlay: overlay, Backoff: func(int, time.Duration) time.Duration { return 0 },
		LookupEnv:     func(k string) (string, bool) { v, ok := e2eEnv[k]; return v, ok },
		GovernanceNow: func() time.Time { return clock }}
	for _, o := range opts {
		o(&cfg)
	}
	logger := discardLogger()
	gw, err := New(context.Background(), cfg, logger)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = gw.Close() })
	store := auth.OpenStore(filepath.Join(dir, "tokens.json"))
	gw.SetAuthenticator(TokenAuthenticator(store, logger))
	gw.SetPolicies(store)
	srv, err := server.Start(context.Background(), server.Config{GRPCAddr: "127.0.0.1:0", HTTPAddr: "127.0.0.1:0", Auth: store}, logger, gw)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Shutdown(context.Background()) })
	return &governedStack{fp: fp, base: "http://" + srv.HTTPAddr(), grpc: srv.GRPCAddr(), store: store}
}

func (g *governedStack) token(t testing.TB, name string, p *auth.Policy) string {
	t.Helper()
	v, _, err := g.store.IssueWithPolicy(name, auth.RoleUser, p)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func post(t testing.TB, url string, hdr map[string]string, body string) (*http.Response, []byte) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, b
}

// TestGovernanceBudgetCrossedMidStream: a stream admitted under its
// token's budget finishes although its cost crosses it; the next call is
// refused with the API's 429 and Retry-After, on both compatible endpoints
// and over gRPC with RetryInfo, and reaches no provider.
func TestGovernanceBudgetCrossedMidStream(t *testing.T) {
	g := newGovernedStack(t)
	tok := g.token(t, "alice", &auth.Policy{Budget: &auth.Budget{USDMicros: 1, Period: auth.PeriodDay}})
	g.fp.Enqueue(fakeprovider.Turn{Text: strings.Repeat("word ", 40), Usage: fakeprovider.Usage{Input: 1000, Output: 400}})
	client := anthropic.NewClient(anthropicoption.WithBaseURL(g.base+"/anthropic/"), anthropicoption.WithAPIKey(tok), anthropicoption.WithMaxRetries(0))
	params := anthropic.MessageNewParams{Model: "anthropic/claude-sonnet-4.5", MaxTokens: 100,
		Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("hi"))}}
	s := client.Messages.NewStreaming(t.Context(), params)
	var acc anthropic.Message
	for s.Next() {
		if err := acc.Accumulate(s.Current()); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Err(); err != nil {
		t.Fatalf("the stream that crossed the budget did not finish: %v", err)
	}
	if acc.StopReason != "end_turn" || len(acc.Content) != 1 || acc.Content[0].Text != strings.Repeat("word ", 40) {
		t.Fatalf("stream ended %q with %+v", acc.StopReason, acc.Content)
	}
	upstream := len(g.fp.Requests())

	resp, body := post(t, g.base+"/anthropic/v1/messages", map[string]string{"x-api-key": tok, "anthropic-version": "2023-06-01"},
		`{"model":"anthropic/claude-sonnet-4.5","max_tokens":10,"messages":[{"role":"user","content":"hi"}]}`)
	var ae struct {
		Type  string `json:"type"`
		Error struct{ Type, Message string }
	}
	_ = json.Unmarshal(body, &ae)
	if resp.StatusCode != http.StatusTooManyRequests || ae.Type != "error" || ae.Error.Type != "rate_limit_error" ||
		!strings.Contains(ae.Error.Message, "budget") || resp.Header.Get("Retry-After") != "50395" {
		t.Errorf("anthropic: %d retry-after %q %s", resp.StatusCode, resp.Header.Get("Retry-After"), body)
	}
	if !strings.HasPrefix(resp.Header.Get("request-id"), "req_") {
		t.Errorf("anthropic: no request-id header: %v", resp.Header)
	}
	resp, body = post(t, g.base+"/openai/v1/chat/completions", map[string]string{"Authorization": "Bearer " + tok},
		`{"model":"anthropic/claude-sonnet-4.5","messages":[{"role":"user","content":"hi"}]}`)
	var oe struct {
		Error struct{ Type, Message string }
	}
	_ = json.Unmarshal(body, &oe)
	if resp.StatusCode != http.StatusTooManyRequests || oe.Error.Type == "" || resp.Header.Get("Retry-After") == "" {
		t.Errorf("openai: %d retry-after %q %s", resp.StatusCode, resp.Header.Get("Retry-After"), body)
	}

	conn, err := grpc.NewClient(g.grpc, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx := metadata.AppendToOutgoingContext(t.Context(), "authorization", "Bearer "+tok)
	st, err := llmv1.NewLLMGatewayServiceClient(conn).Stream(ctx, &llmv1.StreamRequest{Request: userReq("anthropic/claude-sonnet-4.5", "hi")})
	if err == nil {
		_, err = st.Recv()
	}
	sts := status.Convert(err)
	var retry *errdetails.RetryInfo
	for _, d := range sts.Details() {
		if r, ok := d.(*errdetails.RetryInfo); ok {
			retry = r
		}
	}
	if sts.Code() != codes.ResourceExhausted || retry == nil || retry.GetRetryDelay().AsDuration() < 13*time.Hour {
		t.Errorf("grpc: %v, retry %v", sts, retry)
	}
	if n := len(g.fp.Requests()); n != upstream {
		t.Errorf("refused calls reached the provider: %d requests, want %d", n, upstream)
	}
}

// TestGovernanceRateLimitConcurrent: 50 callers at once on a token allowed
// 10 requests a minute: 10 answered, 40 refused 429 with Retry-After, 10
// upstream requests.
func TestGovernanceRateLimitConcurrent(t *testing.T) {
	g := newGovernedStack(t)
	tok := g.token(t, "bot", &auth.Policy{RequestsPerMinute: 10})
	g.fp.Script(func(fakeprovider.Request) fakeprovider.Turn {
		return fakeprovider.Turn{Text: "ok", Usage: fakeprovider.Usage{Input: 1, Output: 1}}
	})
	var mu sync.Mutex
	got := map[int]int{}
	var wg sync.WaitGroup
	for range 50 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, body := post(t, g.base+"/openai/v1/chat/completions", map[string]string{"Authorization": "Bearer " + tok},
				`{"model":"anthropic/claude-sonnet-4.5","messages":[{"role":"user","content":"hi"}]}`)
			if resp.StatusCode == http.StatusTooManyRequests && (resp.Header.Get("Retry-After") != "55" || !strings.Contains(string(body), `"rate_limit_exceeded"`)) {
				t.Errorf("429 without Retry-After 55 or code: %q %s", resp.Header.Get("Retry-After"), body)
			}
			if resp.Header.Get("x-ratelimit-limit-requests") != "10" || resp.Header.Get("x-ratelimit-remaining-requests") == "" ||
				resp.Header.Get("x-ratelimit-reset-requests") == "" || !strings.HasPrefix(resp.Header.Get("x-request-id"), "req_") {
				t.Errorf("headers %v", resp.Header)
			}
			mu.Lock()
			got[resp.StatusCode]++
			mu.Unlock()
		}()
	}
	wg.Wait()
	if got[200] != 10 || got[429] != 40 || len(got) != 2 {
		t.Errorf("statuses %v, want 10 × 200 and 40 × 429", got)
	}
	if n := len(g.fp.Requests()); n != 10 {
		t.Errorf("%d upstream requests, want 10", n)
	}
}

// TestGovernanceModelAllowList: a model outside the token's list is 403
// naming it (PERMISSION_DENIED over gRPC), with no upstream request.
func TestGovernanceModelAllowList(t *testing.T) {
	g := newGovernedStack(t)
	tok := g.token(t, "carol", &auth.Policy{Models: []string{"anthropic/*"}})
	resp, body := post(t, g.base+"/openai/v1/chat/completions", map[string]string{"Authorization": "Bearer " + tok},
		`{"model":"openai/gpt-5","messages":[{"role":"user","content":"hi"}]}`)
	if resp.StatusCode != http.StatusForbidden || !strings.Contains(string(body), `openai/gpt-5`) {
		t.Errorf("openai: %d %s", resp.StatusCode, body)
	}
	resp, body = post(t, g.base+"/anthropic/v1/messages", map[string]string{"x-api-key": tok, "anthropic-version": "2023-06-01"},
		`{"model":"openai/gpt-5","max_tokens":10,"messages":[{"role":"user","content":"hi"}]}`)
	if resp.StatusCode != http.StatusForbidden || !strings.Contains(string(body), `"permission_error"`) || !strings.Contains(string(body), "openai/gpt-5") {
		t.Errorf("anthropic: %d %s", resp.StatusCode, body)
	}
	conn, err := grpc.NewClient(g.grpc, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx := metadata.AppendToOutgoingContext(t.Context(), "authorization", "Bearer "+tok)
	_, err = llmv1.NewLLMGatewayServiceClient(conn).Complete(ctx, &llmv1.CompleteRequest{Request: userReq("openai/gpt-5", "hi")})
	if s := status.Convert(err); s.Code() != codes.PermissionDenied || !strings.Contains(s.Message(), "openai/gpt-5") {
		t.Errorf("grpc: %v", err)
	}
	if n := len(g.fp.Requests()); n != 0 {
		t.Errorf("%d upstream requests, want 0", n)
	}
}

// TestCompatMissingCredential: a provider without a credential is the
// API's 400 (invalid_request_error) naming what to set, never a 5xx an SDK
// would retry.
func TestCompatMissingCredential(t *testing.T) {
	_, base, _ := newCompatServer(t)
	resp, body := post(t, base+"/openai/v1/chat/completions", map[string]string{"Authorization": "Bearer " + compatToken},
		`{"model":"mistral/mistral-large-latest","messages":[{"role":"user","content":"hi"}]}`)
	if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(body), `"invalid_request_error"`) || !strings.Contains(string(body), "MISTRAL_API_KEY") {
		t.Errorf("openai: %d %s", resp.StatusCode, body)
	}
	resp, body = post(t, base+"/anthropic/v1/messages", map[string]string{"x-api-key": compatToken, "anthropic-version": "2023-06-01"},
		`{"model":"mistral/mistral-large-latest","max_tokens":10,"messages":[{"role":"user","content":"hi"}]}`)
	if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(body), `"invalid_request_error"`) || !strings.Contains(string(body), "MISTRAL_API_KEY") {
		t.Errorf("anthropic: %d %s", resp.StatusCode, body)
	}
}

// TestCompatAnthropicVersionRequired: Messages without anthropic-version is
// the API's 400, as the real API answers it.
func TestCompatAnthropicVersionRequired(t *testing.T) {
	fp, base, _ := newCompatServer(t)
	resp, body := post(t, base+"/anthropic/v1/messages", map[string]string{"x-api-key": compatToken},
		`{"model":"anthropic/claude-sonnet-4.5","max_tokens":10,"messages":[{"role":"user","content":"hi"}]}`)
	if want := `{"type":"error","error":{"type":"invalid_request_error","message":"anthropic-version: header is required"}}`; resp.StatusCode != http.StatusBadRequest || strings.TrimSpace(string(body)) != want {
		t.Errorf("%d %s", resp.StatusCode, body)
	}
	if n := len(fp.Requests()); n != 0 {
		t.Errorf("%d upstream requests", n)
	}
}

// TestGovernanceModelsListed: a token with a model list sees only those
// models in the compatible endpoints' listings.
func TestGovernanceModelsListed(t *testing.T) {
	g := newGovernedStack(t)
	tok := g.token(t, "dave", &auth.Policy{Models: []string{"anthropic/*"}})
	all := g.token(t, "erin", nil)
	count := func(key string) (n, other int) {
		req, _ := http.NewRequest(http.MethodGet, g.base+"/openai/v1/models", nil)
		req.Header.Set("Authorization", "Bearer "+key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var list struct{ Data []struct{ ID string } }
		if err := json.NewDecoder(resp.Body).Decode(&list); err != nil {
			t.Fatal(err)
		}
		for _, m := range list.Data {
			if strings.HasPrefix(m.ID, "anthropic/") {
				n++
			} else {
				other++
			}
		}
		return n, other
	}
	n, other := count(tok)
	if n == 0 || other != 0 {
		t.Errorf("restricted token lists %d anthropic models and %d others", n, other)
	}
	if n2, other2 := count(all); n2 != n || other2 == 0 {
		t.Errorf("unrestricted token lists %d anthropic models and %d others", n2, other2)
	}
}
