package main

import (
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fabro-sh/fabro-go/services/llmgateway/fakeprovider"
)

// TestServeBudgetSurvivesRestart: fabro serve keeps its tokens' spend in
// the embedded NATS's JetStream key-value store, so a token that spent its
// budget is refused by the next process on the same data directory, from
// its first call, and the provider never sees that call.
func TestServeBudgetSurvivesRestart(t *testing.T) {
	fp := fakeprovider.New()
	fp.Script(func(fakeprovider.Request) fakeprovider.Turn {
		// 1000 input tokens cost a few thousand USD micros: far over a
		// budget of 1 micro.
		return fakeprovider.Turn{Text: "spent", Usage: fakeprovider.Usage{Input: 1000, Output: 10}}
	})
	fake, err := fakeprovider.Listen("127.0.0.1:0", fp)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { fake.Close() })
	dir := t.TempDir()
	overlay := filepath.Join(dir, "catalog.json")
	if err := os.WriteFile(overlay, fakeprovider.CatalogOverlay(fake.URL), 0o600); err != nil {
		t.Fatal(err)
	}
	data := filepath.Join(dir, "data")
	env := []string{"FABRO_LLM_CATALOG_OVERLAY=" + overlay, "ANTHROPIC_API_KEY="}
	s := startServe(t, data, env...)
	if _, errOut, code := fabro(t, "sk-ant-fake", "secret", "set", "ANTHROPIC_API_KEY", "-no-probe", "-server", s.grpcAddr); code != 0 {
		t.Fatalf("secret set: %s", errOut)
	}
	out, errOut, code := fabro(t, "", "token", "create", "--name", "bot", "--budget", "0.000001usd/month", "-server", s.grpcAddr)
	if code != 0 {
		t.Fatalf("token create: %d %s", code, errOut)
	}
	token := strings.TrimSpace(out)
	call := func(s *serveProc) (int, string, string) {
		req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, "http://"+s.httpAddr+"/anthropic/v1/messages",
			strings.NewReader(`{"model":"claude-sonnet-4.5","max_tokens":16,"messages":[{"role":"user","content":"hi"}]}`))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("anthropic-version", "2023-06-01")
		req.Header.Set("x-api-key", token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, resp.Header.Get("Retry-After"), string(b)
	}
	if code, _, body := call(s); code != http.StatusOK {
		t.Fatalf("first call: %d %s", code, body)
	}
	if code, _, body := call(s); code != http.StatusTooManyRequests {
		t.Fatalf("second call, budget spent: %d %s", code, body)
	}
	s.stop(t)

	s = startServe(t, data, env...)
	code, retryAfter, body := call(s)
	if code != http.StatusTooManyRequests || retryAfter == "" || !strings.Contains(body, "budget") || !strings.Contains(body, `"rate_limit_error"`) {
		t.Errorf("after the restart: %d Retry-After %q %s; want 429 with Retry-After, the budget spent", code, retryAfter, body)
	}
	if n := len(fake.Requests()); n != 1 {
		t.Errorf("the provider saw %d requests, want 1 (the refused calls never reach it)", n)
	}
}
