package gemini

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/proto"

	llmv1 "github.com/fabro-sh/fabro-go/gen/fabro/llm/v1"
	"github.com/fabro-sh/fabro-go/services/llmgateway/internal/codec"
)

func sseBody(chunks ...string) string {
	var b strings.Builder
	for _, c := range chunks {
		b.WriteString("data: " + c + "\r\n\r\n")
	}
	return b.String()
}

const (
	thought1 = `{"candidates":[{"content":{"parts":[{"text":"let me think ","thought":true}],"role":"model"},"index":0}],"usageMetadata":{"promptTokenCount":1200,"totalTokenCount":1200},"modelVersion":"gemini-2.5-flash","responseId":"resp1"}`
	text1    = `{"candidates":[{"content":{"parts":[{"text":"Hello"}],"role":"model"},"index":0}],"usageMetadata":{"promptTokenCount":1200,"totalTokenCount":1200},"modelVersion":"gemini-2.5-flash","responseId":"resp1"}`
)

func TestDecodeStream(t *testing.T) {
	usage := codec.Usage{Input: 200, CacheRead: 1000, Output: 23, Reasoning: 15}
	final := func(parts, finish string) string {
		return `{"candidates":[{"content":{"parts":` + parts + `,"role":"model"},"finishReason":"` + finish + `","index":0}],"usageMetadata":{"promptTokenCount":1200,"candidatesTokenCount":8,"thoughtsTokenCount":15,"cachedContentTokenCount":1000,"totalTokenCount":1223},"modelVersion":"gemini-2.5-flash","responseId":"resp1"}`
	}
	tests := []struct {
		name    string
		stream  string
		want    result
		wantErr error
		kind    llmv1.ErrorKind
	}{{
		name: "thoughts, text signed by a signature-only part, cache and thoughts usage",
		stream: sseBody(thought1,
			`{"candidates":[{"content":{"parts":[{"text":"step by step","thought":true}],"role":"model"},"index":0}]}`,
			text1, final(`[{"text":" w\u00f6rld 😀"},{"text":"","thoughtSignature":"dGVzdA=="}]`, "STOP")),
		want: result{ID: "resp1", Model: "gemini-2.5-flash", Usage: usage, Finish: llmv1.FinishReason_FINISH_REASON_STOP, RawFinish: "STOP",
			Blocks: []block{
				{Kind: llmv1.ContentBlockKind_CONTENT_BLOCK_KIND_REASONING, Text: "let me think step by step", Ended: true},
				{Kind: llmv1.ContentBlockKind_CONTENT_BLOCK_KIND_TEXT, Text: "Hello wörld 😀", Signature: "dGVzdA==", Ended: true},
			}},
	}, {
		name:   "parallel calls to one tool, no ids: synthesized, never merged",
		stream: sseBody(text1, final(`[{"functionCall":{"name":"get_weather","args":{"city":"Paris"}},"thoughtSignature":"c2ln"},{"functionCall":{"name":"get_weather","args":{"city":"Rome"}}},{"functionCall":{"id":"real-id","name":"now"}}]`, "STOP")),
		want: result{ID: "resp1", Model: "gemini-2.5-flash", Usage: usage, Finish: llmv1.FinishReason_FINISH_REASON_TOOL_CALLS, RawFinish: "STOP",
			Blocks: []block{
				{Kind: llmv1.ContentBlockKind_CONTENT_BLOCK_KIND_TEXT, Text: "Hello", Ended: true},
				{Kind: llmv1.ContentBlockKind_CONTENT_BLOCK_KIND_TOOL_CALL, ID: "gc_resp1_0", Name: "get_weather", Text: `{"city":"Paris"}`, Signature: "c2ln", Ended: true},
				{Kind: llmv1.ContentBlockKind_CONTENT_BLOCK_KIND_TOOL_CALL, ID: "gc_resp1_1", Name: "get_weather", Text: `{"city":"Rome"}`, Ended: true},
				{Kind: llmv1.ContentBlockKind_CONTENT_BLOCK_KIND_TOOL_CALL, ID: "real-id", Name: "now", Text: `{}`, Ended: true},
			}},
	}, {
		name:   "MAX_TOKENS, then a trailing usage-only chunk",
		stream: sseBody(text1, final(`[{"text":"!"}]`, "MAX_TOKENS"), `{"usageMetadata":{"promptTokenCount":1200,"candidatesTokenCount":9,"thoughtsTokenCount":15,"cachedContentTokenCount":1000}}`),
		want: result{ID: "resp1", Model: "gemini-2.5-flash", Usage: codec.Usage{Input: 200, CacheRead: 1000, Output: 24, Reasoning: 15}, Finish: llmv1.FinishReason_FINISH_REASON_LENGTH, RawFinish: "MAX_TOKENS",
			Blocks: []block{{Kind: llmv1.ContentBlockKind_CONTENT_BLOCK_KIND_TEXT, Text: "Hello!", Ended: true}}},
	}, {
		name:   "SAFETY is a content filter",
		stream: sseBody(text1, final(`[]`, "SAFETY")),
		want: result{ID: "resp1", Model: "gemini-2.5-flash", Usage: usage, Finish: llmv1.FinishReason_FINISH_REASON_CONTENT_FILTER, RawFinish: "SAFETY",
			Blocks: []block{{Kind: llmv1.ContentBlockKind_CONTENT_BLOCK_KIND_TEXT, Text: "Hello", Ended: true}}},
	}, {
		name:   "blocked prompt",
		stream: sseBody(`{"promptFeedback":{"blockReason":"PROHIBITED_CONTENT"},"usageMetadata":{"promptTokenCount":7,"totalTokenCount":7},"modelVersion":"gemini-2.5-flash","responseId":"resp1"}`),
		want:   result{ID: "resp1", Model: "gemini-2.5-flash", Usage: codec.Usage{Input: 7}, Finish: llmv1.FinishReason_FINISH_REASON_CONTENT_FILTER, RawFinish: "PROHIBITED_CONTENT"},
	}, {
		name:    "truncated: no finishReason",
		stream:  sseBody(thought1, text1),
		wantErr: io.ErrUnexpectedEOF,
	}, {
		name:   "malformed chunk",
		stream: sseBody(text1) + "data: {\"this is not\": json\n\n",
		kind:   llmv1.ErrorKind_ERROR_KIND_STREAM_DECODE,
	}, {
		name:   "mid-stream error as a bare line",
		stream: sseBody(text1) + `{"error":{"code":503,"message":"The model is overloaded.","status":"UNAVAILABLE"}}` + "\n\n",
		kind:   llmv1.ErrorKind_ERROR_KIND_OVERLOADED,
	}, {
		name:   "mid-stream error as pretty-printed lines",
		stream: sseBody(text1) + "{\n  \"error\": {\n    \"code\": 429,\n    \"message\": \"quota\",\n    \"status\": \"RESOURCE_EXHAUSTED\"\n  }\n}\n",
		kind:   llmv1.ErrorKind_ERROR_KIND_RATE_LIMIT,
	}, {
		name:   "mid-stream error in a data line",
		stream: sseBody(text1, `{"error":{"code":500,"message":"internal","status":"INTERNAL"}}`),
		kind:   llmv1.ErrorKind_ERROR_KIND_SERVER,
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := drain(New().NewDecoder(strings.NewReader(tt.stream)))
			switch {
			case tt.wantErr != nil:
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("err = %v, want %v", err, tt.wantErr)
				}
				return
			case tt.kind != 0:
				var ce *codec.Error
				if !errors.As(err, &ce) || ce.Kind != tt.kind {
					t.Fatalf("err = %#v, want kind %v", err, tt.kind)
				}
				return
			case err != nil:
				t.Fatalf("err = %v", err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("result (-want +got):\n%s", diff)
			}
		})
	}
}

func TestDecodeResponse(t *testing.T) {
	body := `{"candidates":[{"content":{"role":"model","parts":[
     {"text":"thinking...","thought":true},
     {"text":"Sure."},
     {"functionCall":{"name":"get_weather","args":{"city":"Paris"}},"thoughtSignature":"dG9vbA=="},
     {"executableCode":{"language":"PYTHON","code":"print(1)"}}]},
   "finishReason":"STOP","index":0,"safetyRatings":[]}],
 "usageMetadata":{"promptTokenCount":10,"candidatesTokenCount":8,"thoughtsTokenCount":15,"cachedContentTokenCount":4,"toolUsePromptTokenCount":3,"totalTokenCount":36},
 "modelVersion":"gemini-3-pro","responseId":"r9"}`
	var c collector
	if err := New().DecodeResponse(strings.NewReader(body), c.Add); err != nil {
		t.Fatal(err)
	}
	want := result{ID: "r9", Model: "gemini-3-pro", Finish: llmv1.FinishReason_FINISH_REASON_TOOL_CALLS, RawFinish: "STOP",
		Usage: codec.Usage{Input: 9, CacheRead: 4, Output: 23, Reasoning: 15},
		Blocks: []block{
			{Kind: llmv1.ContentBlockKind_CONTENT_BLOCK_KIND_REASONING, Text: "thinking...", Ended: true},
			{Kind: llmv1.ContentBlockKind_CONTENT_BLOCK_KIND_TEXT, Text: "Sure.", Ended: true},
			{Kind: llmv1.ContentBlockKind_CONTENT_BLOCK_KIND_TOOL_CALL, ID: "gc_r9_0", Name: "get_weather", Text: `{"city":"Paris"}`, Signature: "dG9vbA==", Ended: true},
			{Kind: llmv1.ContentBlockKind_CONTENT_BLOCK_KIND_OPAQUE, OpaqueKind: "gemini.part", Opaque: `{"executableCode":{"language":"PYTHON","code":"print(1)"}}`, Ended: true},
		}}
	if diff := cmp.Diff(want, c.Res); diff != "" {
		t.Errorf("result (-want +got):\n%s", diff)
	}
}

func TestParseError(t *testing.T) {
	tests := []struct {
		name   string
		status int
		header http.Header
		body   string
		want   codec.Error
	}{{
		name: "429 with RetryInfo", status: 429,
		body: `{"error":{"code":429,"message":"You exceeded your current quota","status":"RESOURCE_EXHAUSTED","details":[{"@type":"type.googleapis.com/google.rpc.QuotaFailure","violations":[{"quotaId":"GenerateRequestsPerMinutePerProjectPerModel-FreeTier"}]},{"@type":"type.googleapis.com/google.rpc.RetryInfo","retryDelay":"17s"}]}}`,
		want: codec.Error{Kind: llmv1.ErrorKind_ERROR_KIND_RATE_LIMIT, Message: "gemini: You exceeded your current quota", StatusCode: 429, Code: "RESOURCE_EXHAUSTED", RetryAfter: 17 * time.Second},
	}, {
		name: "context length", status: 400,
		body: `{"error":{"code":400,"message":"The input token count (1200293) exceeds the maximum number of tokens allowed (1048576).","status":"INVALID_ARGUMENT"}}`,
		want: codec.Error{Kind: llmv1.ErrorKind_ERROR_KIND_CONTEXT_LENGTH, Message: "gemini: The input token count (1200293) exceeds the maximum number of tokens allowed (1048576).", StatusCode: 400, Code: "INVALID_ARGUMENT"},
	}, {
		name: "bad API key is a 400", status: 400,
		body: `[{"error":{"code":400,"message":"API key not valid. Please pass a valid API key.","status":"INVALID_ARGUMENT","details":[{"@type":"type.googleapis.com/google.rpc.ErrorInfo","reason":"API_KEY_INVALID","domain":"googleapis.com"}]}}]`,
		want: codec.Error{Kind: llmv1.ErrorKind_ERROR_KIND_AUTHENTICATION, Message: "gemini: API key not valid. Please pass a valid API key.", StatusCode: 400, Code: "API_KEY_INVALID"},
	}, {
		name: "503 overloaded with Retry-After", status: 503, header: http.Header{"Retry-After": {"2"}},
		body: `{"error":{"code":503,"message":"The model is overloaded.","status":"UNAVAILABLE"}}`,
		want: codec.Error{Kind: llmv1.ErrorKind_ERROR_KIND_OVERLOADED, Message: "gemini: The model is overloaded.", StatusCode: 503, Code: "UNAVAILABLE", RetryAfter: 2 * time.Second},
	}, {
		name: "404 model", status: 404, body: `{"error":{"code":404,"message":"models/nope is not found","status":"NOT_FOUND"}}`,
		want: codec.Error{Kind: llmv1.ErrorKind_ERROR_KIND_NOT_FOUND, Message: "gemini: models/nope is not found", StatusCode: 404, Code: "NOT_FOUND"},
	}, {
		name: "not JSON", status: 504, body: `upstream timeout`,
		want: codec.Error{Kind: llmv1.ErrorKind_ERROR_KIND_TIMEOUT, Message: "gemini: " + codec.UnreadableBody(504), StatusCode: 504},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := tt.header
			if h == nil {
				h = http.Header{}
			}
			got := New().ParseError(&http.Response{StatusCode: tt.status, Header: h}, []byte(tt.body))
			if diff := cmp.Diff(&tt.want, got); diff != "" {
				t.Errorf("ParseError (-want +got):\n%s", diff)
			}
		})
	}
}

func text(s string) *llmv1.ContentPart {
	return &llmv1.ContentPart{Part: &llmv1.ContentPart_Text{Text: &llmv1.TextPart{Text: s}}}
}

func TestRequestBody(t *testing.T) {
	weather := &llmv1.ToolDefinition{Name: "get_weather", Description: "Weather", Parameters: `{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}`}
	hi := []*llmv1.Message{{Role: llmv1.Role_ROLE_USER, Parts: []*llmv1.ContentPart{text("hi")}}}
	tests := []struct {
		name    string
		model   string
		req     *llmv1.Request
		want    string
		wantErr llmv1.ErrorKind
	}{{
		name: "minimal",
		req:  &llmv1.Request{Messages: hi},
		want: `{"contents":[{"role":"user","parts":[{"text":"hi"}]}]}`,
	}, {
		name:  "conversation with signatures, tool results and tools",
		model: "gemini-2.5-flash",
		req: &llmv1.Request{System: "You are terse.", Tools: []*llmv1.ToolDefinition{weather},
			ToolChoice:      &llmv1.ToolChoice{Mode: llmv1.ToolChoiceMode_TOOL_CHOICE_MODE_REQUIRED},
			MaxOutputTokens: proto.Int32(1024), Temperature: proto.Float64(0.2), ReasoningEffort: llmv1.ReasoningEffort_REASONING_EFFORT_MEDIUM,
			Messages: []*llmv1.Message{
				{Role: llmv1.Role_ROLE_SYSTEM, Parts: []*llmv1.ContentPart{text("Metric units.")}},
				{Role: llmv1.Role_ROLE_USER, Parts: []*llmv1.ContentPart{text("Weather?"),
					{Part: &llmv1.ContentPart_Image{Image: &llmv1.ImagePart{Source: &llmv1.ImagePart_Data{Data: []byte("png")}, MediaType: "image/png"}}},
					{Part: &llmv1.ContentPart_Image{Image: &llmv1.ImagePart{Source: &llmv1.ImagePart_Url{Url: "data:image/jpeg;base64,anBn"}}}}}},
				{Role: llmv1.Role_ROLE_ASSISTANT, Parts: []*llmv1.ContentPart{
					{Part: &llmv1.ContentPart_Reasoning{Reasoning: &llmv1.ReasoningPart{Text: "thinking"}}},
					{Part: &llmv1.ContentPart_Reasoning{Reasoning: &llmv1.ReasoningPart{Signature: "cmVk", Redacted: true}}},
					{Part: &llmv1.ContentPart_Text{Text: &llmv1.TextPart{Text: "Checking.", Signature: "dGV4dA=="}}},
					{Part: &llmv1.ContentPart_ToolCall{ToolCall: &llmv1.ToolCall{Id: "gc_r1_0", Name: "get_weather", Arguments: `{"city":"Paris"}`, Signature: "c2ln"}}},
					{Part: &llmv1.ContentPart_ToolCall{ToolCall: &llmv1.ToolCall{Id: "real-id", Name: "get_weather", Arguments: `{"city":"Rome"}`}}},
				}},
				{Role: llmv1.Role_ROLE_TOOL, Parts: []*llmv1.ContentPart{
					{Part: &llmv1.ContentPart_ToolResult{ToolResult: &llmv1.ToolResult{ToolCallId: "gc_r1_0", Content: []*llmv1.ContentPart{text(`{"temp_c":21}`)}}}},
					{Part: &llmv1.ContentPart_ToolResult{ToolResult: &llmv1.ToolResult{ToolCallId: "real-id", Name: "get_weather", IsError: true, Content: []*llmv1.ContentPart{text("boom")}}}},
				}},
			}},
		want: `{"systemInstruction":{"parts":[{"text":"You are terse.\n\nMetric units."}]},
		  "contents":[
		    {"role":"user","parts":[{"text":"Weather?"},{"inlineData":{"mimeType":"image/png","data":"cG5n"}},{"inlineData":{"mimeType":"image/jpeg","data":"anBn"}}]},
		    {"role":"model","parts":[
		      {"text":"thinking","thought":true},
		      {"text":"","thought":true,"thoughtSignature":"cmVk"},
		      {"text":"Checking.","thoughtSignature":"dGV4dA=="},
		      {"functionCall":{"name":"get_weather","args":{"city":"Paris"}},"thoughtSignature":"c2ln"},
		      {"functionCall":{"id":"real-id","name":"get_weather","args":{"city":"Rome"}}}]},
		    {"role":"user","parts":[
		      {"functionResponse":{"name":"get_weather","response":{"output":"{\"temp_c\":21}"}}},
		      {"functionResponse":{"id":"real-id","name":"get_weather","response":{"error":"boom"}}}]}],
		  "tools":[{"functionDeclarations":[{"name":"get_weather","description":"Weather","parametersJsonSchema":{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}}]}],
		  "toolConfig":{"functionCallingConfig":{"mode":"ANY"}},
		  "generationConfig":{"maxOutputTokens":1024,"temperature":0.2,"thinkingConfig":{"includeThoughts":true,"thinkingBudget":8192}}}`,
	}, {
		name:  "gemini 3: thinking level, forced tool, json schema",
		model: "gemini-3-pro-preview",
		req: &llmv1.Request{Messages: hi, Tools: []*llmv1.ToolDefinition{weather}, ReasoningEffort: llmv1.ReasoningEffort_REASONING_EFFORT_HIGH,
			ToolChoice:     &llmv1.ToolChoice{Mode: llmv1.ToolChoiceMode_TOOL_CHOICE_MODE_TOOL, ToolName: "get_weather"},
			ResponseFormat: &llmv1.ResponseFormat{Type: llmv1.ResponseFormatType_RESPONSE_FORMAT_TYPE_JSON_SCHEMA, Schema: `{"type":"object","properties":{"a":{"type":"string"}}}`}},
		want: `{"contents":[{"role":"user","parts":[{"text":"hi"}]}],
		  "tools":[{"functionDeclarations":[{"name":"get_weather","description":"Weather","parametersJsonSchema":{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}}]}],
		  "toolConfig":{"functionCallingConfig":{"mode":"ANY","allowedFunctionNames":["get_weather"]}},
		  "generationConfig":{"responseMimeType":"application/json","responseJsonSchema":{"type":"object","properties":{"a":{"type":"string"}}},"thinkingConfig":{"includeThoughts":true,"thinkingLevel":"HIGH"}}}`,
	}, {
		name: "json object, tool choice none",
		req: &llmv1.Request{Messages: hi, Tools: []*llmv1.ToolDefinition{weather}, ToolChoice: &llmv1.ToolChoice{Mode: llmv1.ToolChoiceMode_TOOL_CHOICE_MODE_NONE},
			ResponseFormat: &llmv1.ResponseFormat{Type: llmv1.ResponseFormatType_RESPONSE_FORMAT_TYPE_JSON_OBJECT}},
		want: `{"contents":[{"role":"user","parts":[{"text":"hi"}]}],
		  "tools":[{"functionDeclarations":[{"name":"get_weather","description":"Weather","parametersJsonSchema":{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}}]}],
		  "toolConfig":{"functionCallingConfig":{"mode":"NONE"}},
		  "generationConfig":{"responseMimeType":"application/json"}}`,
	}, {
		name:    "malformed tool schema",
		req:     &llmv1.Request{Messages: hi, Tools: []*llmv1.ToolDefinition{{Name: "t", Parameters: `[1]`}}},
		wantErr: llmv1.ErrorKind_ERROR_KIND_INVALID_REQUEST,
	}, {
		name: "tool result with no name to find",
		req: &llmv1.Request{Messages: []*llmv1.Message{{Role: llmv1.Role_ROLE_TOOL, Parts: []*llmv1.ContentPart{
			{Part: &llmv1.ContentPart_ToolResult{ToolResult: &llmv1.ToolResult{ToolCallId: "x"}}}}}}},
		wantErr: llmv1.ErrorKind_ERROR_KIND_INVALID_REQUEST,
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			model := tt.model
			if model == "" {
				model = "gemini-2.5-flash"
			}
			call := &codec.Call{Provider: &llmv1.Provider{BaseUrl: "https://generativelanguage.googleapis.com/v1beta"}, Model: model, Request: tt.req}
			req, err := New().NewRequest(t.Context(), call)
			if tt.wantErr != 0 {
				var ce *codec.Error
				if !errors.As(err, &ce) || ce.Kind != tt.wantErr {
					t.Fatalf("err = %v, want kind %v", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(req.Body)
			var got, want any
			if err := json.Unmarshal(body, &got); err != nil {
				t.Fatalf("body %s: %v", body, err)
			}
			if err := json.Unmarshal([]byte(tt.want), &want); err != nil {
				t.Fatalf("want: %v", err)
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("body (-want +got):\n%s", diff)
			}
		})
	}
}

func TestRequestURLAndHeaders(t *testing.T) {
	p := &llmv1.Provider{BaseUrl: "https://generativelanguage.googleapis.com/v1beta/", ExtraHeaders: map[string]string{"x-extra": "1"}}
	for _, stream := range []bool{false, true} {
		req, err := New().NewRequest(t.Context(), &codec.Call{Provider: p, Model: "models/gemini-2.5-flash", Request: &llmv1.Request{}, Stream: stream, Credentials: map[string]string{"GEMINI_API_KEY": "AIza"}})
		if err != nil {
			t.Fatal(err)
		}
		want := "https://generativelanguage.googleapis.com/v1beta/models/gemini-2.5-flash:generateContent"
		if stream {
			want = "https://generativelanguage.googleapis.com/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse"
		}
		if req.URL.String() != want || req.Header.Get("x-goog-api-key") != "AIza" || req.Header.Get("x-extra") != "1" {
			t.Errorf("url %s headers %v", req.URL, req.Header)
		}
	}
}
