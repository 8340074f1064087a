package codec_test

import (
	"io"
	"strings"
	"testing"

	llmv1 "github.com/fabro-sh/fabro-go/gen/fabro/llm/v1"
	"github.com/fabro-sh/fabro-go/services/llmgateway/internal/codec"
	"github.com/fabro-sh/fabro-go/services/llmgateway/internal/codec/anthropic"
	"github.com/fabro-sh/fabro-go/services/llmgateway/internal/codec/bedrock"
	"github.com/fabro-sh/fabro-go/services/llmgateway/internal/codec/gemini"
	"github.com/fabro-sh/fabro-go/services/llmgateway/internal/codec/openaichat"
	"github.com/fabro-sh/fabro-go/services/llmgateway/internal/codec/openairesponses"
)

// TestSpeed: a request's speed tier reaches Anthropic as its fast mode (the
// body's speed and the beta header), and every protocol without one refuses
// it instead of dropping it.
func TestSpeed(t *testing.T) {
	req := &llmv1.Request{Speed: "fast", Messages: []*llmv1.Message{{Role: llmv1.Role_ROLE_USER, Parts: []*llmv1.ContentPart{{Part: &llmv1.ContentPart_Text{Text: &llmv1.TextPart{Text: "hi"}}}}}}}
	provider := &llmv1.Provider{BaseUrl: "http://upstream.test/v1"}
	creds := map[string]string{"ANTHROPIC_API_KEY": "k", "OPENAI_API_KEY": "k", "GEMINI_API_KEY": "k", "AWS_BEARER_TOKEN_BEDROCK": "k"}
	t.Run("anthropic", func(t *testing.T) {
		r, err := anthropic.New().NewRequest(t.Context(), &codec.Call{Provider: provider, Model: "claude-opus-5", Request: req, Credentials: creds})
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(r.Body)
		if !strings.Contains(string(body), `"speed":"fast"`) {
			t.Errorf("body lacks the speed: %s", body)
		}
		if got := r.Header.Values("anthropic-beta"); !strings.Contains(strings.Join(got, ","), anthropic.FastModeBeta) {
			t.Errorf("anthropic-beta = %q, want %s", got, anthropic.FastModeBeta)
		}
		plain, err := anthropic.New().NewRequest(t.Context(), &codec.Call{Provider: provider, Model: "claude-opus-5", Request: &llmv1.Request{Messages: req.Messages}, Credentials: creds})
		if err != nil {
			t.Fatal(err)
		}
		if b, _ := io.ReadAll(plain.Body); strings.Contains(string(b), "speed") || plain.Header.Get("anthropic-beta") != "" {
			t.Errorf("a request without speed sent one: %s %v", b, plain.Header)
		}
	})
	for name, c := range map[string]codec.Codec{
		"openai-chat": openaichat.New(), "openai-responses": openairesponses.New(), "gemini": gemini.New(), "bedrock": bedrock.New(),
	} {
		t.Run(name, func(t *testing.T) {
			_, err := c.NewRequest(t.Context(), &codec.Call{Provider: provider, Model: "m", Request: req, Credentials: creds})
			if err == nil || !strings.Contains(err.Error(), `speed "fast"`) {
				t.Errorf("NewRequest with a speed = %v; want an error naming it", err)
			}
		})
	}
}
