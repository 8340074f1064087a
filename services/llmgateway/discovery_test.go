package llmgateway

import (
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	llmv1 "github.com/fabro-sh/fabro-go/gen/fabro/llm/v1"
	"github.com/fabro-sh/fabro-go/services/llmgateway/fakeprovider"
)

// TestDiscovery: Ollama's /api/tags and an OpenAI-compatible /v1/models are
// listed beside the catalog's models and usable by name; a slow or failing
// provider hides nothing and gets a warning naming it; the list is cached
// for the TTL and refreshed after it.
func TestDiscovery(t *testing.T) {
	var ollamaHits, vllmHits atomic.Int32
	ollama := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/api/tags" {
			http.NotFound(w, r)
			return
		}
		n := ollamaHits.Add(1)
		fmt.Fprintf(w, `{"models":[{"name":"qwen3:8b","model":"qwen3:8b","size":1},{"name":"llama3.2:latest","model":"llama3.2:latest"},{"name":"gen%d","model":"gen%d"},{"name":"user/ns-model"}]}`, n, n)
	}))
	defer ollama.Close()
	fp := fakeprovider.New()
	l, err := fakeprovider.Listen("127.0.0.1:0", fp)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	vllm := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/v1/models":
			vllmHits.Add(1)
			if r.Header.Get("Authorization") != "Bearer sk-vllm" {
				http.Error(w, "no key", http.StatusUnauthorized)
				return
			}
			fmt.Fprint(w, `{"object":"list","data":[{"id":"Qwen2.5-Coder-32B","object":"model","owned_by":"vllm"}]}`)
		default: // the chat completions of a discovered model: the fake's
			r.URL.Path = strings.TrimPrefix(r.URL.Path, "")
			resp, err := http.Post(l.URL+r.URL.Path, "application/json", r.Body)
			if err != nil {
				http.Error(w, err.Error(), http.StatusBadGateway)
				return
			}
			defer resp.Body.Close()
			w.WriteHeader(resp.StatusCode)
			_, _ = fmt.Fprint(w, readAll(resp))
		}
	}))
	defer vllm.Close()
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { <-r.Context().Done() }))
	defer slow.Close()
	failing := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { http.Error(w, "boom", 500) }))
	defer failing.Close()

	prov := func(base, disc, auth string) string {
		return fmt.Sprintf(`{"codec":"CODEC_OPENAI_CHAT","chatDialect":"CHAT_DIALECT_COMPATIBLE","baseUrl":%q,"discovery":%q,"auth":%s}`, base, disc, auth)
	}
	overlay := `{"providers":{` +
		`"ollama":` + prov(ollama.URL+"/v1", "DISCOVERY_OLLAMA_TAGS", `{"scheme":"AUTH_SCHEME_NONE"}`) + `,` +
		`"vllm":` + prov(vllm.URL+"/v1", "DISCOVERY_OPENAI_MODELS", `{"scheme":"AUTH_SCHEME_BEARER","credentialNames":["VLLM_API_KEY"]}`) + `,` +
		`"slowp":` + prov(slow.URL+"/v1", "DISCOVERY_OPENAI_MODELS", `{"scheme":"AUTH_SCHEME_NONE"}`) + `,` +
		`"badp":` + prov(failing.URL+"/v1", "DISCOVERY_OPENAI_MODELS", `{"scheme":"AUTH_SCHEME_NONE"}`) + `},` +
		`"models":{"slowp/catalog-model":{},"badp/catalog-model":{}}}`
	path := filepath.Join(t.TempDir(), "overlay.json")
	if err := os.WriteFile(path, []byte(overlay), 0o600); err != nil {
		t.Fatal(err)
	}
	gw, err := New(t.Context(), Config{CatalogOverlay: path, DiscoveryTTL: time.Hour, DiscoveryWait: 300 * time.Millisecond,
		LookupEnv: func(k string) (string, bool) {
			if k == "VLLM_API_KEY" {
				return "sk-vllm", true
			}
			return "", false
		}}, discardLogger())
	if err != nil {
		t.Fatal(err)
	}
	defer gw.Close()
	client := dial(t, gw)

	resp, err := client.ListModels(t.Context(), &llmv1.ListModelsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, m := range resp.GetModels() {
		ids = append(ids, m.GetProviderId()+"/"+m.GetModelId())
	}
	for _, want := range []string{"ollama/qwen3:8b", "ollama/gen1", "vllm/Qwen2.5-Coder-32B", "slowp/catalog-model", "badp/catalog-model", "anthropic/claude-sonnet-4.5"} {
		if !slices.Contains(ids, want) {
			t.Errorf("%s not listed in %v", want, ids)
		}
	}
	if slices.Contains(ids, "ollama/user/ns-model") || slices.Contains(ids, "ollama/llama3.2:latest") == false {
		t.Errorf("ollama ids %v", ids)
	}
	w := strings.Join(resp.GetWarnings(), "\n")
	if !strings.Contains(w, "provider slowp: live model list not fetched yet") || !strings.Contains(w, "provider badp: model discovery failed") ||
		strings.Contains(w, "ollama") || strings.Contains(w, "vllm") {
		t.Errorf("warnings:\n%s", w)
	}
	// Cached within the TTL.
	if _, err := client.ListModels(t.Context(), &llmv1.ListModelsRequest{ProviderId: "ollama"}); err != nil {
		t.Fatal(err)
	}
	if n := ollamaHits.Load(); n != 1 {
		t.Errorf("ollama fetched %d times within the TTL", n)
	}
	// A discovered model is usable by name.
	r, err := client.ResolveModel(t.Context(), &llmv1.ResolveModelRequest{Selector: "vllm/Qwen2.5-Coder-32B"})
	if err != nil || !r.GetModel().GetDiscovered() || r.GetPassthrough() {
		t.Fatalf("resolve discovered: %v %v", r, err)
	}
	fp.Enqueue(fakeprovider.Turn{Text: "hi from vllm"})
	cr, err := client.Complete(t.Context(), &llmv1.CompleteRequest{Request: userReq("vllm/Qwen2.5-Coder-32B", "hi")})
	if err != nil || replyText(cr.GetResponse()) != "hi from vllm" {
		t.Fatalf("complete on a discovered model: %v %v", cr, err)
	}
	if body := string(fp.Requests()[0].Body); !strings.Contains(body, `"model":"Qwen2.5-Coder-32B"`) {
		t.Errorf("upstream body %s", body)
	}
}

// TestDiscoveryRefresh: after the TTL the background refresh fetches again.
func TestDiscoveryRefresh(t *testing.T) {
	var hits atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := hits.Add(1)
		fmt.Fprintf(w, `{"data":[{"id":"m%d"}]}`, n)
	}))
	defer srv.Close()
	path := filepath.Join(t.TempDir(), "overlay.json")
	overlay := fmt.Sprintf(`{"providers":{"vllm":{"baseUrl":%q}}}`, srv.URL+"/v1")
	if err := os.WriteFile(path, []byte(overlay), 0o600); err != nil {
		t.Fatal(err)
	}
	gw, err := New(t.Context(), Config{CatalogOverlay: path, DiscoveryTTL: 20 * time.Millisecond, LookupEnv: func(string) (string, bool) { return "", false }}, discardLogger())
	if err != nil {
		t.Fatal(err)
	}
	defer gw.Close()
	if _, err := gw.ListModels(t.Context(), &llmv1.ListModelsRequest{ProviderId: "vllm"}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for hits.Load() < 3 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond) // waiting on another goroutine's timer
	}
	resp, err := gw.ListModels(t.Context(), &llmv1.ListModelsRequest{ProviderId: "vllm"})
	if err != nil {
		t.Fatal(err)
	}
	if hits.Load() < 3 || len(resp.GetModels()) != 1 || resp.GetModels()[0].GetModelId() == "m1" {
		t.Errorf("after %d fetches: %v", hits.Load(), resp.GetModels())
	}
}

func readAll(resp *http.Response) string {
	var b strings.Builder
	buf := make([]byte, 4096)
	for {
		n, err := resp.Body.Read(buf)
		b.Write(buf[:n])
		if err != nil {
			return b.String()
		}
	}
}

// closedAddr is a loopback address nothing listens on (a port taken, then
// released).
func closedAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}

// TestDiscoveryUnreachable: a discoverable provider with nothing listening
// is UNREACHABLE (not READY) in ListProviders, with the connection's
// error; its model list warns only when the operator configured it (a
// built-in local provider that is not running is no news); and once the
// server starts, a fetch within seconds (not the TTL) lists its models.
func TestDiscoveryUnreachable(t *testing.T) {
	addr := closedAddr(t)
	path := filepath.Join(t.TempDir(), "overlay.json")
	overlay := fmt.Sprintf(`{"providers":{"vllm":{"baseUrl":"http://%s/v1","auth":{"scheme":"AUTH_SCHEME_NONE"}}}}`, addr)
	if err := os.WriteFile(path, []byte(overlay), 0o600); err != nil {
		t.Fatal(err)
	}
	gw, err := New(t.Context(), Config{CatalogOverlay: path, DiscoveryTTL: time.Hour, DiscoveryWait: 5 * time.Second,
		LookupEnv: func(string) (string, bool) { return "", false }}, discardLogger())
	if err != nil {
		t.Fatal(err)
	}
	defer gw.Close()

	resp, err := gw.ListProviders(t.Context(), &llmv1.ListProvidersRequest{})
	if err != nil {
		t.Fatal(err)
	}
	for i, p := range resp.GetProviders() {
		if p.GetProviderId() != "vllm" {
			continue
		}
		r := resp.GetReadiness()[i]
		if r.GetState() != llmv1.ReadinessState_READINESS_STATE_UNREACHABLE || !strings.Contains(r.GetError().GetMessage(), "refused") {
			t.Errorf("vllm with nothing listening: %v", r)
		}
	}
	vllm, _ := gw.cat.Provider("vllm")
	if _, w := gw.disc.models(t.Context(), vllm, false); !strings.Contains(w, "provider vllm: model discovery failed") {
		t.Errorf("configured provider's warning %q", w)
	}
	if _, w := gw.disc.models(t.Context(), vllm, true); w != "" {
		t.Errorf("a quiet unreachable provider warned %q", w)
	}
	if !gw.cat.Configured("vllm") || gw.cat.Configured("ollama") {
		t.Errorf("Configured: vllm %v (overlay names it), ollama %v (built in)", gw.cat.Configured("vllm"), gw.cat.Configured("ollama"))
	}
	_, warnings := gw.listModels(t.Context(), "vllm", false)
	if !strings.Contains(strings.Join(warnings, "\n"), "provider vllm") {
		t.Errorf("ListModels of a configured, unreachable provider: no warning in %v", warnings)
	}

	// The server starts: the failure was cached for seconds, not the TTL.
	l, err := net.Listen("tcp", addr)
	if err != nil {
		t.Skipf("the released port %s was taken meanwhile: %v", addr, err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, `{"object":"list","data":[{"id":"started-late","object":"model"}]}`)
	})}
	go srv.Serve(l)
	defer srv.Close()
	deadline := time.Now().Add(30 * time.Second)
	for {
		models, warnings := gw.listModels(t.Context(), "vllm", false)
		if slices.ContainsFunc(models, func(m *llmv1.Model) bool { return m.GetModelId() == "started-late" }) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("a provider started after a failed fetch is still unlisted after 30 s: %d models, warnings %v", len(models), warnings)
		}
		time.Sleep(100 * time.Millisecond) // the backoff runs on the wall clock
	}
	resp, err = gw.ListProviders(t.Context(), &llmv1.ListProvidersRequest{})
	if err != nil {
		t.Fatal(err)
	}
	for i, p := range resp.GetProviders() {
		if p.GetProviderId() == "vllm" && resp.GetReadiness()[i].GetState() != llmv1.ReadinessState_READINESS_STATE_READY {
			t.Errorf("vllm once listening: %v", resp.GetReadiness()[i])
		}
	}
}
