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

// TestModelsProvidersAndProbe: `fabro secret set` probes a provider key
// before storing it; `fabro models` and `fabro providers` print the
// catalog and the readiness as tables.
func TestModelsProvidersAndProbe(t *testing.T) {
	fp := fakeprovider.New()
	fp.Script(func(r fakeprovider.Request) fakeprovider.Turn {
		if r.Protocol == "anthropic-messages" && r.Header.Get("X-Api-Key") != "sk-ant-good" {
			return fakeprovider.Turn{Fault: &fakeprovider.Fault{Kind: fakeprovider.FaultAuth}}
		}
		return fakeprovider.Turn{Text: "ready"}
	})
	l, err := fakeprovider.Listen("127.0.0.1:0", fp)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	dir := t.TempDir()
	overlay := filepath.Join(dir, "overlay.json")
	if err := os.WriteFile(overlay, fakeprovider.CatalogOverlay(l.URL), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("FABRO_LLM_CATALOG_OVERLAY", overlay)
	s := startServe(t, filepath.Join(dir, "data"))

	_, errOut, code := fabro(t, "sk-ant-bad", "secret", "set", "ANTHROPIC_API_KEY", "-server", s.grpcAddr)
	if code != 1 || !strings.Contains(errOut, "ANTHROPIC_API_KEY not stored: the probe failed") || !strings.Contains(errOut, "--no-probe") {
		t.Errorf("bad key: exit %d, stderr %q", code, errOut)
	}
	out, errOut, code := fabro(t, "sk-ant-good", "secret", "set", "ANTHROPIC_API_KEY", "-server", s.grpcAddr)
	if code != 0 || !strings.Contains(out, "stored ANTHROPIC_API_KEY version 1") || !strings.Contains(errOut, "probe anthropic") {
		t.Errorf("good key: exit %d, %q %q", code, out, errOut)
	}
	out, _, code = fabro(t, "sk-ant-bad", "secret", "set", "ANTHROPIC_API_KEY", "-no-probe", "-server", s.grpcAddr)
	if code != 0 || !strings.Contains(out, "version 2") {
		t.Errorf("--no-probe: exit %d, %q", code, out)
	}
	fabro(t, "sk-ant-good", "secret", "set", "ANTHROPIC_API_KEY", "-server", s.grpcAddr)

	// fabro serve mounts the compatible endpoints on its REST port.
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, "http://"+s.httpAddr+"/openai/v1/models", nil)
	req.Header.Set("Authorization", "Bearer "+s.adminToken(t))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), `"id":"anthropic/claude-sonnet-5"`) || !strings.Contains(string(body), `"object":"list"`) {
		t.Errorf("GET /openai/v1/models: %d %s", resp.StatusCode, body)
	}

	out, errOut, code = fabro(t, "", "models", "-server", s.grpcAddr)
	if code != 0 || !strings.HasPrefix(out, "MODEL ") || !strings.Contains(out, "anthropic/claude-sonnet-4.5") {
		t.Errorf("models: exit %d, %q %q", code, out, errOut)
	}
	out, errOut, code = fabro(t, "", "providers", "-probe", "-server", s.grpcAddr)
	if code != 0 {
		t.Fatalf("providers: exit %d %q", code, errOut)
	}
	rows := map[string]string{}
	for _, l := range strings.Split(out, "\n") {
		if f := strings.Fields(l); len(f) > 0 {
			rows[f[0]] = l
		}
	}
	if !strings.Contains(rows["anthropic"], "ready") || !strings.Contains(rows["anthropic"], "probed anthropic/") {
		t.Errorf("anthropic row %q", rows["anthropic"])
	}
	if !strings.Contains(rows["openai"], "missing credentials") || !strings.Contains(rows["openai"], "OPENAI_API_KEY") {
		t.Errorf("openai row %q\n%s", rows["openai"], out)
	}
}
