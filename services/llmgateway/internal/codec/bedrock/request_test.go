package bedrock

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/proto"

	llmv1 "github.com/fabro-sh/fabro-go/gen/fabro/llm/v1"
	"github.com/fabro-sh/fabro-go/services/llmgateway/internal/codec"
)

var fixedNow = time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)

func sigv4Creds() map[string]string {
	return map[string]string{CredAccessKeyID: "AKIDEXAMPLE", CredSecretKey: "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY", CredRegion: "us-west-2"}
}

func provider(base string) *llmv1.Provider {
	return &llmv1.Provider{ProviderId: "bedrock", BaseUrl: base, Codec: llmv1.Codec_CODEC_BEDROCK_CONVERSE}
}

func text(s string) *llmv1.ContentPart {
	return &llmv1.ContentPart{Part: &llmv1.ContentPart_Text{Text: &llmv1.TextPart{Text: s}}}
}

// richRequest exercises every part kind the codec renders.
func richRequest() *llmv1.Request {
	return &llmv1.Request{
		System: "You are terse.",
		Messages: []*llmv1.Message{
			{Role: llmv1.Role_ROLE_SYSTEM, Parts: []*llmv1.ContentPart{text("Answer in French.")}},
			{Role: llmv1.Role_ROLE_USER, Parts: []*llmv1.ContentPart{
				text("Weather in Paris?"),
				{Part: &llmv1.ContentPart_Image{Image: &llmv1.ImagePart{Source: &llmv1.ImagePart_Data{Data: []byte{0x89, 'P', 'N', 'G'}}, MediaType: "image/png"}}},
			}},
			{Role: llmv1.Role_ROLE_ASSISTANT, Parts: []*llmv1.ContentPart{
				{Part: &llmv1.ContentPart_Reasoning{Reasoning: &llmv1.ReasoningPart{Text: "Need weather.", Signature: "EqQB", SignatureOrigin: "bedrock"}}},
				{Part: &llmv1.ContentPart_Reasoning{Reasoning: &llmv1.ReasoningPart{Text: "foreign", Signature: "zzz", SignatureOrigin: "anthropic"}}},
				{Part: &llmv1.ContentPart_Reasoning{Reasoning: &llmv1.ReasoningPart{Signature: "AAECAwQ=", Redacted: true, SignatureOrigin: "bedrock"}}},
				{Part: &llmv1.ContentPart_Opaque{Opaque: &llmv1.OpaquePart{Kind: OpaqueKind, Data: `{"citationsContent": {"content":[{"text":"x"}]}}`}}},
				{Part: &llmv1.ContentPart_Opaque{Opaque: &llmv1.OpaquePart{Kind: "openai.reasoning", Data: `{}`}}},
				text(""),
				{Part: &llmv1.ContentPart_ToolCall{ToolCall: &llmv1.ToolCall{Id: "tooluse_1", Name: "get_weather", Arguments: `{"city": "Paris"}`}}},
				{Part: &llmv1.ContentPart_ToolCall{ToolCall: &llmv1.ToolCall{Id: "tooluse_2", Name: "get_time", Arguments: ``}}},
			}},
			{Role: llmv1.Role_ROLE_TOOL, Parts: []*llmv1.ContentPart{
				{Part: &llmv1.ContentPart_ToolResult{ToolResult: &llmv1.ToolResult{ToolCallId: "tooluse_1", Content: []*llmv1.ContentPart{text(`{"temp_c":21}`)}}}},
			}},
			{Role: llmv1.Role_ROLE_TOOL, Parts: []*llmv1.ContentPart{
				{Part: &llmv1.ContentPart_ToolResult{ToolResult: &llmv1.ToolResult{ToolCallId: "tooluse_2", Content: []*llmv1.ContentPart{text("no clock")}, IsError: true}}},
			}},
		},
		Tools: []*llmv1.ToolDefinition{
			{Name: "get_weather", Description: "Current weather.", Parameters: `{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}`},
			{Name: "get_time"},
		},
		ToolChoice:      &llmv1.ToolChoice{Mode: llmv1.ToolChoiceMode_TOOL_CHOICE_MODE_AUTO},
		MaxOutputTokens: proto.Int32(1024),
		Temperature:     proto.Float64(0.2),
	}
}

const richBody = `{
  "system": [{"text": "You are terse."}, {"text": "Answer in French."}],
  "messages": [
    {"role": "user", "content": [
      {"text": "Weather in Paris?"},
      {"image": {"format": "png", "source": {"bytes": "iVBORw=="}}}]},
    {"role": "assistant", "content": [
      {"reasoningContent": {"reasoningText": {"text": "Need weather.", "signature": "EqQB"}}},
      {"reasoningContent": {"redactedContent": "AAECAwQ="}},
      {"citationsContent": {"content": [{"text": "x"}]}},
      {"toolUse": {"toolUseId": "tooluse_1", "name": "get_weather", "input": {"city": "Paris"}}},
      {"toolUse": {"toolUseId": "tooluse_2", "name": "get_time", "input": {}}}]},
    {"role": "user", "content": [
      {"toolResult": {"toolUseId": "tooluse_1", "content": [{"text": "{\"temp_c\":21}"}]}},
      {"toolResult": {"toolUseId": "tooluse_2", "content": [{"text": "no clock"}], "status": "error"}}]}
  ],
  "toolConfig": {
    "tools": [
      {"toolSpec": {"name": "get_weather", "description": "Current weather.",
        "inputSchema": {"json": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}},
      {"toolSpec": {"name": "get_time", "inputSchema": {"json": {"type": "object", "properties": {}}}}}],
    "toolChoice": {"auto": {}}},
  "inferenceConfig": {"maxTokens": 1024, "temperature": 0.2}
}`

func jsonValue(t *testing.T, b []byte) any {
	t.Helper()
	var v any
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, b)
	}
	return v
}

func requestBody(t *testing.T, req *http.Request) []byte {
	t.Helper()
	b, err := io.ReadAll(req.Body)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestRequestBody(t *testing.T) {
	call := &codec.Call{Provider: provider(""), Model: "us.anthropic.claude-sonnet-4-5-20250929-v1:0", Request: richRequest(), Credentials: sigv4Creds(), Stream: true}
	req, err := New(WithClock(func() time.Time { return fixedNow })).NewRequest(t.Context(), call)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(jsonValue(t, []byte(richBody)), jsonValue(t, requestBody(t, req))); diff != "" {
		t.Errorf("body (-want +got):\n%s", diff)
	}
	if got, want := req.URL.String(), "https://bedrock-runtime.us-west-2.amazonaws.com/model/us.anthropic.claude-sonnet-4-5-20250929-v1%3A0/converse-stream"; got != want {
		t.Errorf("URL = %s, want %s", got, want)
	}
	for k, want := range map[string]string{"Content-Type": "application/json", "Accept": "application/vnd.amazon.eventstream"} {
		if got := req.Header.Get(k); got != want {
			t.Errorf("%s = %q, want %q", k, got, want)
		}
	}
}

func TestRequestKnobs(t *testing.T) {
	base := func(mut func(r *llmv1.Request)) *llmv1.Request {
		r := &llmv1.Request{Messages: []*llmv1.Message{{Role: llmv1.Role_ROLE_USER, Parts: []*llmv1.ContentPart{text("hi")}}}}
		mut(r)
		return r
	}
	tools := []*llmv1.ToolDefinition{{Name: "f", Parameters: `{"type":"object"}`}}
	toolSpec := `"tools":[{"toolSpec":{"name":"f","inputSchema":{"json":{"type":"object"}}}}]`
	msgs := `"messages":[{"role":"user","content":[{"text":"hi"}]}]`
	tests := []struct {
		name  string
		model string
		req   *llmv1.Request
		want  string // JSON body; empty when an error is expected
	}{{
		name:  "claude thinking budget clamped below maxTokens, temperature dropped",
		model: "anthropic.claude-3-7-sonnet-20250219-v1:0",
		req: base(func(r *llmv1.Request) {
			r.ReasoningEffort = llmv1.ReasoningEffort_REASONING_EFFORT_HIGH
			r.MaxOutputTokens = proto.Int32(4096)
			r.Temperature = proto.Float64(0.5)
		}),
		want: `{` + msgs + `,"inferenceConfig":{"maxTokens":4096},"additionalModelRequestFields":{"thinking":{"type":"enabled","budget_tokens":4095}}}`,
	}, {
		name:  "claude thinking without maxTokens leaves room for the answer",
		model: "us.anthropic.claude-sonnet-4-5-20250929-v1:0",
		req:   base(func(r *llmv1.Request) { r.ReasoningEffort = llmv1.ReasoningEffort_REASONING_EFFORT_LOW }),
		want:  `{` + msgs + `,"inferenceConfig":{"maxTokens":10240},"additionalModelRequestFields":{"thinking":{"type":"enabled","budget_tokens":2048}}}`,
	}, {
		name:  "nova reasoningConfig",
		model: "us.amazon.nova-2-lite-v1:0",
		req:   base(func(r *llmv1.Request) { r.ReasoningEffort = llmv1.ReasoningEffort_REASONING_EFFORT_MEDIUM }),
		want:  `{` + msgs + `,"additionalModelRequestFields":{"reasoningConfig":{"type":"enabled","maxReasoningEffort":"medium"}}}`,
	}, {
		name:  "gpt-oss reasoning_effort",
		model: "openai.gpt-oss-120b-1:0",
		req:   base(func(r *llmv1.Request) { r.ReasoningEffort = llmv1.ReasoningEffort_REASONING_EFFORT_MAX }),
		want:  `{` + msgs + `,"additionalModelRequestFields":{"reasoning_effort":"high"}}`,
	}, {
		name:  "other families take no effort knob",
		model: "meta.llama3-70b-instruct-v1:0",
		req:   base(func(r *llmv1.Request) { r.ReasoningEffort = llmv1.ReasoningEffort_REASONING_EFFORT_HIGH }),
		want:  `{` + msgs + `}`,
	}, {
		name:  "required tool choice is any",
		model: "m",
		req: base(func(r *llmv1.Request) {
			r.Tools, r.ToolChoice = tools, &llmv1.ToolChoice{Mode: llmv1.ToolChoiceMode_TOOL_CHOICE_MODE_REQUIRED}
		}),
		want: `{` + msgs + `,"toolConfig":{` + toolSpec + `,"toolChoice":{"any":{}}}}`,
	}, {
		name:  "named tool choice",
		model: "m",
		req: base(func(r *llmv1.Request) {
			r.Tools, r.ToolChoice = tools, &llmv1.ToolChoice{Mode: llmv1.ToolChoiceMode_TOOL_CHOICE_MODE_TOOL, ToolName: "f"}
		}),
		want: `{` + msgs + `,"toolConfig":{` + toolSpec + `,"toolChoice":{"tool":{"name":"f"}}}}`,
	}, {
		name:  "none drops the tools",
		model: "m",
		req: base(func(r *llmv1.Request) {
			r.Tools, r.ToolChoice = tools, &llmv1.ToolChoice{Mode: llmv1.ToolChoiceMode_TOOL_CHOICE_MODE_NONE}
		}),
		want: `{` + msgs + `}`,
	}, {
		name:  "none keeps the tools a tool history needs",
		model: "m",
		req: &llmv1.Request{
			Messages: []*llmv1.Message{
				{Role: llmv1.Role_ROLE_USER, Parts: []*llmv1.ContentPart{text("hi")}},
				{Role: llmv1.Role_ROLE_ASSISTANT, Parts: []*llmv1.ContentPart{{Part: &llmv1.ContentPart_ToolCall{ToolCall: &llmv1.ToolCall{Id: "a", Name: "f", Arguments: "{}"}}}}},
				{Role: llmv1.Role_ROLE_TOOL, Parts: []*llmv1.ContentPart{{Part: &llmv1.ContentPart_ToolResult{ToolResult: &llmv1.ToolResult{ToolCallId: "a"}}}}},
			},
			Tools: tools, ToolChoice: &llmv1.ToolChoice{Mode: llmv1.ToolChoiceMode_TOOL_CHOICE_MODE_NONE},
		},
		want: `{"messages":[{"role":"user","content":[{"text":"hi"}]},{"role":"assistant","content":[{"toolUse":{"toolUseId":"a","name":"f","input":{}}}]},{"role":"user","content":[{"toolResult":{"toolUseId":"a","content":[{"text":""}]}}]}],"toolConfig":{` + toolSpec + `}}`,
	}, {
		name:  "json schema response format is outputConfig with the schema as a string",
		model: "m",
		req: base(func(r *llmv1.Request) {
			r.ResponseFormat = &llmv1.ResponseFormat{Type: llmv1.ResponseFormatType_RESPONSE_FORMAT_TYPE_JSON_SCHEMA, Name: "answer", Schema: `{"type":"object"}`}
		}),
		want: `{` + msgs + `,"outputConfig":{"textFormat":{"type":"json_schema","structure":{"jsonSchema":{"schema":"{\"type\":\"object\"}","name":"answer"}}}}}`,
	}, {
		name:  "data URL image and s3 image",
		model: "m",
		req: base(func(r *llmv1.Request) {
			r.Messages[0].Parts = append(r.Messages[0].Parts,
				&llmv1.ContentPart{Part: &llmv1.ContentPart_Image{Image: &llmv1.ImagePart{Source: &llmv1.ImagePart_Url{Url: "data:image/jpeg;base64,/9j/"}}}},
				&llmv1.ContentPart{Part: &llmv1.ContentPart_Image{Image: &llmv1.ImagePart{Source: &llmv1.ImagePart_Url{Url: "s3://bucket/cat.webp"}}}})
		}),
		want: `{"messages":[{"role":"user","content":[{"text":"hi"},{"image":{"format":"jpeg","source":{"bytes":"/9j/"}}},{"image":{"format":"webp","source":{"s3Location":{"uri":"s3://bucket/cat.webp"}}}}]}]}`,
	}, {
		name:  "http image URL is not expressible",
		model: "m",
		req: base(func(r *llmv1.Request) {
			r.Messages[0].Parts = append(r.Messages[0].Parts, &llmv1.ContentPart{Part: &llmv1.ContentPart_Image{Image: &llmv1.ImagePart{Source: &llmv1.ImagePart_Url{Url: "https://x/cat.png"}}}})
		}),
	}, {
		name:  "malformed tool schema",
		model: "m",
		req:   base(func(r *llmv1.Request) { r.Tools = []*llmv1.ToolDefinition{{Name: "f", Parameters: `{"type":`}} }),
	}, {
		name:  "named tool not among the tools",
		model: "m",
		req: base(func(r *llmv1.Request) {
			r.Tools, r.ToolChoice = tools, &llmv1.ToolChoice{Mode: llmv1.ToolChoiceMode_TOOL_CHOICE_MODE_TOOL, ToolName: "g"}
		}),
	}, {
		name:  "tool call arguments that are not JSON",
		model: "m",
		req: base(func(r *llmv1.Request) {
			r.Messages = append(r.Messages, &llmv1.Message{Role: llmv1.Role_ROLE_ASSISTANT, Parts: []*llmv1.ContentPart{{Part: &llmv1.ContentPart_ToolCall{ToolCall: &llmv1.ToolCall{Id: "a", Name: "f", Arguments: "{"}}}}})
		}),
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req, err := New().NewRequest(t.Context(), &codec.Call{Provider: provider(""), Model: tt.model, Request: tt.req, Credentials: map[string]string{CredBearerToken: "k"}})
			if tt.want == "" {
				var ce *codec.Error
				if !errors.As(err, &ce) || ce.Kind != llmv1.ErrorKind_ERROR_KIND_INVALID_REQUEST {
					t.Fatalf("err = %v, want INVALID_REQUEST", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(jsonValue(t, []byte(tt.want)), jsonValue(t, requestBody(t, req))); diff != "" {
				t.Errorf("body (-want +got):\n%s", diff)
			}
		})
	}
}

func TestEndpoint(t *testing.T) {
	tests := []struct {
		base, model string
		creds       map[string]string
		stream      bool
		want        string
	}{
		{"", "anthropic.claude-3-haiku-20240307-v1:0", map[string]string{CredRegion: "eu-west-1"}, false,
			"https://bedrock-runtime.eu-west-1.amazonaws.com/model/anthropic.claude-3-haiku-20240307-v1%3A0/converse"},
		{"https://bedrock-runtime.ap-northeast-1.amazonaws.com", "arn:aws:bedrock:ap-northeast-1:123456789012:inference-profile/apac.anthropic.claude-sonnet-4-v1:0", nil, true,
			"https://bedrock-runtime.ap-northeast-1.amazonaws.com/model/arn%3Aaws%3Abedrock%3Aap-northeast-1%3A123456789012%3Ainference-profile%2Fapac.anthropic.claude-sonnet-4-v1%3A0/converse-stream"},
		{"https://bedrock-runtime.{region}.amazonaws.com/", "m", nil, false,
			"https://bedrock-runtime.us-east-1.amazonaws.com/model/m/converse"},
		{"http://127.0.0.1:9/proxy/", "a b", nil, false,
			"http://127.0.0.1:9/proxy/model/a%20b/converse"},
	}
	for _, tt := range tests {
		creds := map[string]string{CredBearerToken: "k"}
		for k, v := range tt.creds {
			creds[k] = v
		}
		req, err := New().NewRequest(t.Context(), &codec.Call{Provider: provider(tt.base), Model: tt.model, Request: &llmv1.Request{}, Credentials: creds, Stream: tt.stream})
		if err != nil {
			t.Fatal(err)
		}
		if got := req.URL.String(); got != tt.want {
			t.Errorf("URL(%q, %q) = %s, want %s", tt.base, tt.model, got, tt.want)
		}
	}
}

func TestAuth(t *testing.T) {
	c := New(WithClock(func() time.Time { return fixedNow }))
	newReq := func(creds map[string]string) (*http.Request, error) {
		return c.NewRequest(t.Context(), &codec.Call{
			Provider: &llmv1.Provider{ProviderId: "bedrock", ExtraHeaders: map[string]string{"X-Amzn-Bedrock-Trace": "ENABLED"}},
			Model:    "us.anthropic.claude-sonnet-4-5-20250929-v1:0", Request: richRequest(), Credentials: creds,
		})
	}
	t.Run("bearer API key wins over SigV4", func(t *testing.T) {
		creds := sigv4Creds()
		creds[CredBearerToken] = "ABSKexample"
		req, err := newReq(creds)
		if err != nil {
			t.Fatal(err)
		}
		if got := req.Header.Get("Authorization"); got != "Bearer ABSKexample" {
			t.Errorf("Authorization = %q", got)
		}
		if req.Header.Get("X-Amz-Date") != "" {
			t.Error("bearer request is also SigV4-signed")
		}
	})
	for _, session := range []string{"", "FwoGZXIvYXdzEXAMPLE"} {
		t.Run("sigv4 session="+strconv.Quote(session), func(t *testing.T) {
			creds := sigv4Creds()
			if session != "" {
				creds[CredSessionToken] = session
			}
			req, err := newReq(creds)
			if err != nil {
				t.Fatal(err)
			}
			body := requestBody(t, req)
			if got := req.Header.Get("X-Amz-Date"); got != "20260304T050607Z" {
				t.Errorf("X-Amz-Date = %q", got)
			}
			if got := req.Header.Get("X-Amz-Security-Token"); got != session {
				t.Errorf("X-Amz-Security-Token = %q, want %q", got, session)
			}
			signed := verifySigV4(t, req, body, creds[CredSecretKey])
			want := []string{"content-type", "host", "x-amz-date", "x-amzn-bedrock-trace"}
			if session != "" {
				want = append(want, "x-amz-security-token")
			}
			for _, h := range want {
				if !strings.Contains(";"+signed+";", ";"+h+";") {
					t.Errorf("SignedHeaders %q lacks %s", signed, h)
				}
			}
			if !strings.HasPrefix(req.Header.Get("Authorization"), "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20260304/us-west-2/bedrock/aws4_request, SignedHeaders=") {
				t.Errorf("Authorization = %q", req.Header.Get("Authorization"))
			}
		})
	}
	t.Run("no credentials", func(t *testing.T) {
		_, err := newReq(map[string]string{CredAccessKeyID: "AKID"})
		var ce *codec.Error
		if !errors.As(err, &ce) || ce.Kind != llmv1.ErrorKind_ERROR_KIND_AUTHENTICATION {
			t.Fatalf("err = %v, want AUTHENTICATION", err)
		}
	})
}

// verifySigV4 recomputes a request's SigV4 signature from the published
// algorithm, independently of the SDK signer, and returns SignedHeaders.
// Non-S3 services URI-encode the (already escaped) path a second time.
func verifySigV4(t *testing.T, req *http.Request, body []byte, secret string) string {
	t.Helper()
	auth := req.Header.Get("Authorization")
	var cred, signedHeaders, sig string
	for _, f := range strings.Split(strings.TrimPrefix(auth, "AWS4-HMAC-SHA256 "), ", ") {
		k, v, _ := strings.Cut(f, "=")
		switch k {
		case "Credential":
			cred = v
		case "SignedHeaders":
			signedHeaders = v
		case "Signature":
			sig = v
		}
	}
	parts := strings.SplitN(cred, "/", 2)
	if len(parts) != 2 {
		t.Fatalf("Authorization %q has no credential scope", auth)
	}
	scope := parts[1]
	sp := strings.Split(scope, "/") // date/region/service/aws4_request
	var canon strings.Builder
	canon.WriteString(req.Method + "\n")
	canon.WriteString(uriEncode(req.URL.EscapedPath()) + "\n")
	canon.WriteString(req.URL.RawQuery + "\n")
	names := strings.Split(signedHeaders, ";")
	if !sort.StringsAreSorted(names) {
		t.Errorf("SignedHeaders not sorted: %s", signedHeaders)
	}
	for _, h := range names {
		var v string
		switch h {
		case "host":
			v = req.URL.Host
		case "content-length":
			v = strconv.FormatInt(req.ContentLength, 10)
		default:
			v = strings.Join(req.Header.Values(h), ",")
		}
		canon.WriteString(h + ":" + strings.TrimSpace(v) + "\n")
	}
	sum := sha256.Sum256(body)
	canon.WriteString("\n" + signedHeaders + "\n" + hex.EncodeToString(sum[:]))
	creq := sha256.Sum256([]byte(canon.String()))
	sts := "AWS4-HMAC-SHA256\n" + req.Header.Get("X-Amz-Date") + "\n" + scope + "\n" + hex.EncodeToString(creq[:])
	key := []byte("AWS4" + secret)
	for _, s := range sp {
		key = hmacSHA256(key, s)
	}
	if got := hex.EncodeToString(hmacSHA256(key, sts)); got != sig {
		t.Fatalf("signature %s, recomputed %s\ncanonical request:\n%s", sig, got, canon.String())
	}
	return signedHeaders
}

func hmacSHA256(key []byte, s string) []byte {
	m := hmac.New(sha256.New, key)
	m.Write([]byte(s))
	return m.Sum(nil)
}

// uriEncode is SigV4's UriEncode with '/' kept.
func uriEncode(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || strings.IndexByte("-_.~/", c) >= 0 {
			b.WriteByte(c)
		} else {
			fmt.Fprintf(&b, "%%%02X", c)
		}
	}
	return b.String()
}
