package catalog

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"

	llmv1 "github.com/fabro-sh/fabro-go/gen/fabro/llm/v1"
)

func TestBuiltinProviders(t *testing.T) {
	c, err := Load("")
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"anthropic", "bedrock", "deepseek", "fireworks", "gemini", "groq", "mistral", "moonshot", "ollama", "openai", "openrouter", "together", "vllm", "xai", "zai"}
	var got []string
	for _, p := range c.Providers(false) {
		got = append(got, p.GetProviderId())
		if !p.GetEnabled() {
			t.Errorf("provider %s is not enabled by default", p.GetProviderId())
		}
		// Built-in chat providers say their dialect; inference is for
		// overlays only.
		if p.GetCodec() == llmv1.Codec_CODEC_OPENAI_CHAT && p.GetChatDialect() == llmv1.ChatDialect_CHAT_DIALECT_UNSPECIFIED {
			t.Errorf("provider %s: openai-chat without chat_dialect", p.GetProviderId())
		}
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("providers (-want +got):\n%s", diff)
	}
	for _, m := range c.Models("", true) {
		for _, f := range m.GetFallbacks() {
			if _, err := c.Resolve(f); err != nil {
				t.Errorf("model %s/%s: fallback %q: %v", m.GetProviderId(), m.GetModelId(), f, err)
			}
		}
	}
}

func TestResolve(t *testing.T) {
	overlay := []byte(`{
	  "providers": {
	    "groq": {"enabled": false},
	    "acme": {"codec": "CODEC_OPENAI_CHAT", "baseUrl": "https://llm.acme.test/v1",
	             "auth": {"scheme": "AUTH_SCHEME_BEARER", "credentialNames": ["ACME_API_KEY"]}, "defaultModel": "acme-1"},
	    "openai": {"baseUrl": "https://proxy.internal.test/v1"},
	    "zai": {"defaultModel": null}
	  },
	  "models": {
	    "acme/acme-1": {"aliases": ["roadrunner"], "contextWindow": 1000},
	    "xai/grok-code-fast-1": {"enabled": false},
	    "zai/glm-4.6": null
	  }
	}`)
	c, err := Parse(builtin, overlay)
	if err != nil {
		t.Fatal(err)
	}
	if got := c.providers["openai"].GetBaseUrl(); got != "https://proxy.internal.test/v1" {
		t.Errorf("overlay base URL = %q", got)
	}
	if got := c.providers["openai"].GetAuth().GetCredentialNames(); !cmp.Equal(got, []string{"OPENAI_API_KEY"}) {
		t.Errorf("overlay lost untouched fields: credential names %v", got)
	}

	type want struct {
		canonical   string
		apiModel    string
		passthrough bool
		err         string // "notfound", "disabled", "empty"
		hints       []string
	}
	tests := []struct {
		sel  string
		want want
	}{
		{"anthropic/claude-sonnet-4.5", want{canonical: "anthropic/claude-sonnet-4.5", apiModel: "claude-sonnet-4-5"}},
		{"claude-sonnet-4.5", want{canonical: "anthropic/claude-sonnet-4.5", apiModel: "claude-sonnet-4-5"}},
		{"sonnet", want{canonical: "anthropic/claude-sonnet-4.5", apiModel: "claude-sonnet-4-5"}},
		{"anthropic/sonnet", want{canonical: "anthropic/claude-sonnet-4.5", apiModel: "claude-sonnet-4-5"}},
		{"anthropic", want{canonical: "anthropic/claude-sonnet-5", apiModel: "claude-sonnet-5"}},
		{"openrouter/anthropic/claude-sonnet-4.5", want{canonical: "openrouter/openrouter-claude-sonnet-4.5", apiModel: "anthropic/claude-sonnet-4.5"}},
		{"roadrunner", want{canonical: "acme/acme-1", apiModel: "acme-1"}},
		{"acme", want{canonical: "acme/acme-1", apiModel: "acme-1"}},
		{"ollama/qwen3:32b", want{canonical: "ollama/qwen3:32b", apiModel: "qwen3:32b", passthrough: true}},
		{"vllm/my-finetune", want{canonical: "vllm/my-finetune", apiModel: "my-finetune", passthrough: true}},
		{"ollama/llama3.2", want{canonical: "ollama/llama3.2", apiModel: "llama3.2"}},
		{"", want{err: "empty"}},
		{"groq/llama-3.3-70b-versatile", want{err: "disabled"}},
		{"llama-3.3-70b-versatile", want{err: "disabled"}},
		{"groq", want{err: "disabled"}},
		{"grok-code-fast-1", want{err: "disabled"}},
		{"glm-4.6", want{err: "notfound"}},
		{"claude-sonet-4.5", want{err: "notfound", hints: []string{"anthropic/claude-sonnet-4.5"}}},
		{"anthropic/claude-sonet-4.5", want{err: "notfound", hints: []string{"anthropic/claude-sonnet-4.5"}}},
		{"gpt5", want{err: "notfound", hints: []string{"openai/gpt-5"}}},
		{"nosuch/model", want{err: "notfound"}},
		{"openai/gpt-9000", want{err: "notfound"}},
	}
	for _, tt := range tests {
		t.Run(tt.sel, func(t *testing.T) {
			r, err := c.Resolve(tt.sel)
			var got want
			var nf *NotFoundError
			var de *DisabledError
			switch {
			case err == nil:
				got = want{canonical: r.Canonical(), apiModel: r.APIModel(), passthrough: r.Passthrough}
			case errors.As(err, &nf):
				got = want{err: "notfound", hints: nf.Hints}
			case errors.As(err, &de):
				got = want{err: "disabled"}
			case errors.Is(err, ErrEmptySelector):
				got = want{err: "empty"}
			default:
				t.Fatalf("unexpected error %v", err)
			}
			if tt.want.hints == nil {
				got.hints = nil // only check hints where the table names them
			} else if len(got.hints) > len(tt.want.hints) {
				got.hints = got.hints[:len(tt.want.hints)] // the nearest come first
			}
			if diff := cmp.Diff(tt.want, got, cmp.AllowUnexported(want{})); diff != "" {
				t.Errorf("Resolve(%q) (-want +got):\n%s", tt.sel, diff)
			}
		})
	}
}

func TestListing(t *testing.T) {
	c, err := Parse(builtin, []byte(`{"providers": {"xai": {"enabled": false}}}`))
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range c.Models("", false) {
		if m.GetProviderId() == "xai" {
			t.Errorf("model %s of a disabled provider listed", m.GetModelId())
		}
	}
	if n := len(c.Models("xai", true)); n == 0 {
		t.Error("include_disabled lists no xai models")
	}
	ms := c.Models("", true)
	for i := 1; i < len(ms); i++ {
		a, b := ms[i-1].GetProviderId()+"/"+ms[i-1].GetModelId(), ms[i].GetProviderId()+"/"+ms[i].GetModelId()
		if a > b {
			t.Errorf("models not sorted: %s before %s", a, b)
		}
	}
	if p, _ := c.Provider("xai"); p.GetEnabled() {
		t.Error("xai still enabled")
	}
}

func TestBadLayers(t *testing.T) {
	tests := map[string]string{
		"bad json":          `{`,
		"no codec":          `{"providers": {"x": {"baseUrl": "https://x.test", "auth": {"scheme": "AUTH_SCHEME_NONE"}}}}`,
		"relative url":      `{"providers": {"x": {"codec": "CODEC_OPENAI_CHAT", "baseUrl": "/v1", "auth": {"scheme": "AUTH_SCHEME_NONE"}}}}`,
		"no credentials":    `{"providers": {"x": {"codec": "CODEC_OPENAI_CHAT", "baseUrl": "https://x.test", "auth": {"scheme": "AUTH_SCHEME_BEARER"}}}}`,
		"unknown provider":  `{"models": {"nope/m": {}}}`,
		"slash in model":    `{"models": {"openai/a/b": {}}}`,
		"unknown field":     `{"models": {"openai/m": {"contextWindw": 5}}}`,
		"bad default model": `{"providers": {"openai": {"defaultModel": "gpt-0"}}}`,
	}
	for name, layer := range tests {
		t.Run(name, func(t *testing.T) {
			if _, err := Parse(builtin, []byte(layer)); err == nil {
				t.Errorf("Parse accepted %s", layer)
			}
		})
	}
}

func TestLoadOverlayFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "overlay.json")
	if err := os.WriteFile(path, []byte(`{"providers": {"ollama": {"baseUrl": "http://gpu-box.test:11434/v1"}}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	r, err := c.Resolve("ollama/mistral")
	if err != nil {
		t.Fatal(err)
	}
	if got := r.Provider.GetBaseUrl(); got != "http://gpu-box.test:11434/v1" {
		t.Errorf("base URL = %q", got)
	}
	if r.Provider.GetCodec() != llmv1.Codec_CODEC_OPENAI_CHAT {
		t.Errorf("codec lost by overlay: %v", r.Provider.GetCodec())
	}
	if _, err := Load(filepath.Join(t.TempDir(), "missing.json")); err == nil {
		t.Error("missing overlay file accepted")
	}
}

// TestCurrentCatalog: the newest published generations resolve, with the
// figures of SOURCES.md, and the catalog names its defaults and its date.
func TestCurrentCatalog(t *testing.T) {
	c, err := Load("")
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		sel          string
		ctx, out     int64
		in, outPrice int64
		profile      string
	}{
		{"openai/gpt-5.4", 1050000, 128000, 2500000, 15000000, "openai"},
		{"anthropic/claude-opus-5", 1000000, 128000, 5000000, 25000000, "claude-5"},
		{"sonnet-5", 1000000, 128000, 2000000, 10000000, "claude-5"},
		{"gemini/gemini-3.1-pro-preview", 1048576, 65536, 2000000, 12000000, "gemini"},
	} {
		r, err := c.Resolve(tt.sel)
		if err != nil {
			t.Errorf("%s: %v", tt.sel, err)
			continue
		}
		m := r.Model
		if m.GetContextWindow() != tt.ctx || m.GetMaxOutputTokens() != tt.out || m.GetPricing().GetInputUsdMicrosPerMillion() != tt.in ||
			m.GetPricing().GetOutputUsdMicrosPerMillion() != tt.outPrice || m.GetAgentProfile() != tt.profile {
			t.Errorf("%s: %v", tt.sel, m)
		}
	}
	d := c.Defaults()
	for _, sel := range []string{d.Model, d.SmallModel, d.ProbeModel} {
		if _, err := c.Resolve(sel); err != nil || sel == "" {
			t.Errorf("default %q: %v", sel, err)
		}
	}
	if c.Checked() == "" {
		t.Error("the catalog does not say when it was checked")
	}
	for _, p := range c.Providers(false) {
		if pm := p.GetProbeModel(); pm != "" {
			if _, err := c.Resolve(p.GetProviderId() + "/" + pm); err != nil {
				t.Errorf("provider %s probe model: %v", p.GetProviderId(), err)
			}
		}
	}
}
