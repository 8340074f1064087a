package codec_test

import (
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

// TestOverlayCannotReplaceCredential: for every codec, a catalog overlay
// whose extra headers name the credential's header (in any case) still
// sends the vault's value there, and its other headers still go out.
func TestOverlayCannotReplaceCredential(t *testing.T) {
	const vault = "vault-key-0123456789"
	bearer := &llmv1.Auth{Scheme: llmv1.AuthScheme_AUTH_SCHEME_BEARER, CredentialNames: []string{"KEY"}}
	header := func(name string) *llmv1.Auth {
		return &llmv1.Auth{Scheme: llmv1.AuthScheme_AUTH_SCHEME_HEADER, HeaderName: name, CredentialNames: []string{"KEY"}}
	}
	tests := []struct {
		name    string
		codec   codec.Codec
		auth    *llmv1.Auth
		creds   map[string]string
		overlay string // the extra header naming the credential's header
		header  string // where the credential goes
		want    string
	}{
		{"openai-chat bearer", openaichat.New(), bearer, nil, "authorization", "Authorization", "Bearer " + vault},
		{"openai-chat header", openaichat.New(), header("api-key"), nil, "Api-Key", "api-key", vault},
		{"openai-responses bearer", openairesponses.New(), bearer, nil, "AUTHORIZATION", "Authorization", "Bearer " + vault},
		{"anthropic default", anthropic.New(), nil, map[string]string{"ANTHROPIC_API_KEY": vault}, "x-api-key", "x-api-key", vault},
		{"anthropic default upper case", anthropic.New(), nil, map[string]string{"ANTHROPIC_API_KEY": vault}, "X-API-KEY", "x-api-key", vault},
		{"anthropic bearer", anthropic.New(), bearer, nil, "Authorization", "Authorization", "Bearer " + vault},
		{"gemini default", gemini.New(), nil, map[string]string{"GEMINI_API_KEY": vault}, "x-goog-api-key", "x-goog-api-key", vault},
		{"gemini header", gemini.New(), header("x-custom-key"), nil, "X-Custom-Key", "x-custom-key", vault},
		{"bedrock api key", bedrock.New(), nil, map[string]string{bedrock.CredBearerToken: vault}, "Authorization", "Authorization", "Bearer " + vault},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			creds := tt.creds
			if creds == nil {
				creds = map[string]string{"KEY": vault}
			}
			p := &llmv1.Provider{ProviderId: "p", BaseUrl: "https://upstream.test/v1", Auth: tt.auth,
				ExtraHeaders: map[string]string{tt.overlay: "overlay-value", "X-Title": "fabro"}}
			req, err := tt.codec.NewRequest(t.Context(), &codec.Call{Provider: p, Model: "m", Credentials: creds,
				Request: &llmv1.Request{Model: "p/m", Messages: []*llmv1.Message{{Role: llmv1.Role_ROLE_USER,
					Parts: []*llmv1.ContentPart{{Part: &llmv1.ContentPart_Text{Text: &llmv1.TextPart{Text: "hi"}}}}}}}})
			if err != nil {
				t.Fatal(err)
			}
			if got := req.Header.Values(tt.header); len(got) != 1 || got[0] != tt.want {
				t.Errorf("%s = %q, want only the vault's %q", tt.header, got, tt.want)
			}
			if got := req.Header.Get("X-Title"); got != "fabro" {
				t.Errorf("the overlay's other header X-Title = %q, want it sent", got)
			}
		})
	}
}

// TestOverlayCannotReplaceSignature: Bedrock signs last, so an overlay's
// Authorization is replaced by the SigV4 signature, which covers the
// overlay's other headers.
func TestOverlayCannotReplaceSignature(t *testing.T) {
	p := &llmv1.Provider{ProviderId: "bedrock", BaseUrl: "https://bedrock-runtime.us-east-1.amazonaws.com",
		ExtraHeaders: map[string]string{"Authorization": "overlay-value", "X-Amzn-Bedrock-Trace": "ENABLED"}}
	req, err := bedrock.New().NewRequest(t.Context(), &codec.Call{Provider: p, Model: "anthropic.claude", Request: &llmv1.Request{Model: "bedrock/m"},
		Credentials: map[string]string{bedrock.CredAccessKeyID: "AKIDEXAMPLE", bedrock.CredSecretKey: "secret-0123456789"}})
	if err != nil {
		t.Fatal(err)
	}
	got := req.Header.Values("Authorization")
	if len(got) != 1 || !strings.HasPrefix(got[0], "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/") || !strings.Contains(got[0], "x-amzn-bedrock-trace") {
		t.Errorf("Authorization = %q, want one SigV4 signature covering x-amzn-bedrock-trace", got)
	}
}

// TestResolveCredential: no value, NONE and a HEADER scheme without a
// header send nothing; the catalog's names and scheme win over defaults.
func TestResolveCredential(t *testing.T) {
	d := codec.AuthDefaults{Names: []string{"A"}, Scheme: llmv1.AuthScheme_AUTH_SCHEME_HEADER, Header: "x-api-key"}
	tests := []struct {
		name  string
		auth  *llmv1.Auth
		creds map[string]string
		d     codec.AuthDefaults
		want  codec.Credential
	}{
		{"defaults", nil, map[string]string{"A": "v"}, d, codec.Credential{Header: "x-api-key", Value: "v"}},
		{"first present wins", &llmv1.Auth{CredentialNames: []string{"B", "C"}}, map[string]string{"A": "a", "C": "c"}, d, codec.Credential{Header: "x-api-key", Value: "c"}},
		{"no value", nil, map[string]string{}, d, codec.Credential{}},
		{"none", &llmv1.Auth{Scheme: llmv1.AuthScheme_AUTH_SCHEME_NONE}, map[string]string{"A": "v"}, d, codec.Credential{}},
		{"header without a name", &llmv1.Auth{Scheme: llmv1.AuthScheme_AUTH_SCHEME_HEADER, CredentialNames: []string{"A"}}, map[string]string{"A": "v"}, codec.AuthDefaults{}, codec.Credential{}},
		{"unspecified without defaults", &llmv1.Auth{CredentialNames: []string{"A"}}, map[string]string{"A": "v"}, codec.AuthDefaults{}, codec.Credential{}},
		{"sigv4", &llmv1.Auth{Scheme: llmv1.AuthScheme_AUTH_SCHEME_AWS_SIGV4, CredentialNames: []string{"A"}}, map[string]string{"A": "v"}, d, codec.Credential{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := codec.ResolveCredential(&codec.Call{Provider: &llmv1.Provider{Auth: tt.auth}, Credentials: tt.creds}, tt.d)
			if got != tt.want {
				t.Errorf("ResolveCredential = %+v, want %+v", got, tt.want)
			}
		})
	}
}
