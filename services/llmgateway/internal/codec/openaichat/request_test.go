package openaichat

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/proto"

	llmv1 "github.com/fabro-sh/fabro-go/gen/fabro/llm/v1"
	"github.com/fabro-sh/fabro-go/services/llmgateway/internal/codec"
	"github.com/fabro-sh/fabro-go/services/llmgateway/internal/codec/openaiwire/wiretest"
)

func text(s string) *llmv1.ContentPart {
	return &llmv1.ContentPart{Part: &llmv1.ContentPart_Text{Text: &llmv1.TextPart{Text: s}}}
}

func msg(role llmv1.Role, parts ...*llmv1.ContentPart) *llmv1.Message {
	return &llmv1.Message{Role: role, Parts: parts}
}

const weatherSchema = `{"type":"object","properties":{"city":{"type":"string"}},"required":["city"],"additionalProperties":false}`

type requestCase struct {
	name     string
	provider string // provider id; "openai" when empty
	dialect  llmv1.ChatDialect
	stream   bool
	req      *llmv1.Request
	want     string
	wantErr  bool
}

func (tt requestCase) call() *codec.Call {
	id := tt.provider
	if id == "" {
		id = "openai"
	}
	return &codec.Call{Provider: &llmv1.Provider{ProviderId: id, BaseUrl: "https://example.test/v1", ChatDialect: tt.dialect}, Model: "m", Request: tt.req, Stream: tt.stream}
}

func requestCases() []requestCase {
	toolLoop := []*llmv1.Message{
		msg(llmv1.Role_ROLE_USER, text("What's in the image, and the weather in Paris?"),
			&llmv1.ContentPart{Part: &llmv1.ContentPart_Image{Image: &llmv1.ImagePart{Source: &llmv1.ImagePart_Data{Data: []byte("PNG")}, MediaType: "image/png"}}}),
		msg(llmv1.Role_ROLE_ASSISTANT,
			&llmv1.ContentPart{Part: &llmv1.ContentPart_Reasoning{Reasoning: &llmv1.ReasoningPart{Text: "Need the weather."}}},
			&llmv1.ContentPart{Part: &llmv1.ContentPart_ToolCall{ToolCall: &llmv1.ToolCall{Id: "call_abc", Name: "get_weather", Arguments: `{"city":"Paris"}`}}},
			&llmv1.ContentPart{Part: &llmv1.ContentPart_Opaque{Opaque: &llmv1.OpaquePart{Kind: "openai.reasoning", Data: `{}`}}}),
		msg(llmv1.Role_ROLE_TOOL, &llmv1.ContentPart{Part: &llmv1.ContentPart_ToolResult{ToolResult: &llmv1.ToolResult{ToolCallId: "call_abc", Name: "get_weather", Content: []*llmv1.ContentPart{text(`{"temp_c":21}`)}}}}),
	}
	tools := []*llmv1.ToolDefinition{{Name: "get_weather", Description: "Current weather", Parameters: weatherSchema}}
	limited := &llmv1.Request{MaxOutputTokens: proto.Int32(100), Messages: []*llmv1.Message{msg(llmv1.Role_ROLE_DEVELOPER, text("d")),
		msg(llmv1.Role_ROLE_ASSISTANT, &llmv1.ContentPart{Part: &llmv1.ContentPart_Reasoning{Reasoning: &llmv1.ReasoningPart{Text: "r"}}}, text("a"))}}
	return []requestCase{{
		name: "catalog dialect compatible wins over the id openai", dialect: llmv1.ChatDialect_CHAT_DIALECT_COMPATIBLE, req: limited,
		want: `{"model":"m","messages":[{"role":"system","content":"d"},{"role":"assistant","content":"a","reasoning_content":"r"}],"max_tokens":100}`,
	}, {
		name: "catalog dialect openai on a host the inference does not know", provider: "my-azure", dialect: llmv1.ChatDialect_CHAT_DIALECT_OPENAI, req: limited,
		want: `{"model":"m","messages":[{"role":"developer","content":"d"},{"role":"assistant","content":"a"}],"max_completion_tokens":100}`,
	}, {
		name: "unset dialect: a compatible host by its id", provider: "groq", req: limited,
		want: `{"model":"m","messages":[{"role":"system","content":"d"},{"role":"assistant","content":"a","reasoning_content":"r"}],"max_tokens":100}`,
	}, {
		name:   "system, text, streaming with usage",
		stream: true,
		req:    &llmv1.Request{System: "You are terse.", Messages: []*llmv1.Message{msg(llmv1.Role_ROLE_USER, text("Hi <b>&</b>"))}},
		want:   `{"model":"m","messages":[{"role":"system","content":"You are terse."},{"role":"user","content":"Hi <b>&</b>"}],"stream":true,"stream_options":{"include_usage":true}}`,
	}, {
		name: "openai: tool loop, tools, named tool choice, max_completion_tokens, effort, json_schema, developer",
		req: &llmv1.Request{
			Messages:        append([]*llmv1.Message{msg(llmv1.Role_ROLE_DEVELOPER, text("Use tools."))}, toolLoop...),
			Tools:           tools,
			ToolChoice:      &llmv1.ToolChoice{Mode: llmv1.ToolChoiceMode_TOOL_CHOICE_MODE_TOOL, ToolName: "get_weather"},
			MaxOutputTokens: proto.Int32(1024),
			Temperature:     proto.Float64(0.2),
			ReasoningEffort: llmv1.ReasoningEffort_REASONING_EFFORT_LOW,
			ResponseFormat:  &llmv1.ResponseFormat{Type: llmv1.ResponseFormatType_RESPONSE_FORMAT_TYPE_JSON_SCHEMA, Name: "answer", Schema: `{"type":"object"}`},
		},
		want: `{"model":"m","messages":[
			{"role":"developer","content":"Use tools."},
			{"role":"user","content":[{"type":"text","text":"What's in the image, and the weather in Paris?"},{"type":"image_url","image_url":{"url":"data:image/png;base64,UE5H"}}]},
			{"role":"assistant","content":null,"tool_calls":[{"id":"call_abc","type":"function","function":{"name":"get_weather","arguments":"{\"city\":\"Paris\"}"}}]},
			{"role":"tool","content":"{\"temp_c\":21}","tool_call_id":"call_abc"}],
			"tools":[{"type":"function","function":{"name":"get_weather","description":"Current weather","parameters":` + weatherSchema + `}}],
			"tool_choice":{"type":"function","function":{"name":"get_weather"}},
			"max_completion_tokens":1024,"temperature":0.2,"reasoning_effort":"low",
			"response_format":{"type":"json_schema","json_schema":{"name":"answer","schema":{"type":"object"},"strict":false}}}`,
	}, {
		name:     "compatible host: max_tokens, system for developer, reasoning_content replayed, json_object, required",
		provider: "deepseek",
		req: &llmv1.Request{
			Messages:        append([]*llmv1.Message{msg(llmv1.Role_ROLE_DEVELOPER, text("Use tools."))}, toolLoop[1:]...),
			Tools:           tools,
			ToolChoice:      &llmv1.ToolChoice{Mode: llmv1.ToolChoiceMode_TOOL_CHOICE_MODE_REQUIRED},
			MaxOutputTokens: proto.Int32(256),
			ResponseFormat:  &llmv1.ResponseFormat{Type: llmv1.ResponseFormatType_RESPONSE_FORMAT_TYPE_JSON_OBJECT},
		},
		want: `{"model":"m","messages":[
			{"role":"system","content":"Use tools."},
			{"role":"assistant","content":null,"reasoning_content":"Need the weather.","tool_calls":[{"id":"call_abc","type":"function","function":{"name":"get_weather","arguments":"{\"city\":\"Paris\"}"}}]},
			{"role":"tool","content":"{\"temp_c\":21}","tool_call_id":"call_abc"}],
			"tools":[{"type":"function","function":{"name":"get_weather","description":"Current weather","parameters":` + weatherSchema + `}}],
			"tool_choice":"required","max_tokens":256,"response_format":{"type":"json_object"}}`,
	}, {
		name: "tool result with an image adds a user message; none tool choice",
		req: &llmv1.Request{
			Messages: []*llmv1.Message{msg(llmv1.Role_ROLE_TOOL, &llmv1.ContentPart{Part: &llmv1.ContentPart_ToolResult{ToolResult: &llmv1.ToolResult{ToolCallId: "c1",
				Content: []*llmv1.ContentPart{text("see image"), {Part: &llmv1.ContentPart_Image{Image: &llmv1.ImagePart{Source: &llmv1.ImagePart_Url{Url: "https://x.test/a.png"}}}}}}}})},
			Tools:      tools,
			ToolChoice: &llmv1.ToolChoice{Mode: llmv1.ToolChoiceMode_TOOL_CHOICE_MODE_NONE},
		},
		want: `{"model":"m","messages":[{"role":"tool","content":"see image","tool_call_id":"c1"},{"role":"user","content":[{"type":"image_url","image_url":{"url":"https://x.test/a.png"}}]}],
			"tools":[{"type":"function","function":{"name":"get_weather","description":"Current weather","parameters":` + weatherSchema + `}}],"tool_choice":"none"}`,
	}, {
		name:    "malformed tool schema",
		req:     &llmv1.Request{Tools: []*llmv1.ToolDefinition{{Name: "t", Parameters: `{"type":`}}},
		wantErr: true,
	}, {
		name:    "tool choice names an unknown tool",
		req:     &llmv1.Request{Tools: tools, ToolChoice: &llmv1.ToolChoice{Mode: llmv1.ToolChoiceMode_TOOL_CHOICE_MODE_TOOL, ToolName: "nope"}},
		wantErr: true,
	}, {
		name:    "image data without media type",
		req:     &llmv1.Request{Messages: []*llmv1.Message{msg(llmv1.Role_ROLE_USER, text("a"), &llmv1.ContentPart{Part: &llmv1.ContentPart_Image{Image: &llmv1.ImagePart{Source: &llmv1.ImagePart_Data{Data: []byte("x")}}}})}},
		wantErr: true,
	}}
}

func TestRequestBody(t *testing.T) {
	for _, tt := range requestCases() {
		t.Run(tt.name, func(t *testing.T) {
			body, err := buildBody(tt.call())
			wiretest.Body(t, body, err, tt.want, tt.wantErr)
		})
	}
}

func TestNewRequestHeaders(t *testing.T) {
	call := &codec.Call{
		Provider: &llmv1.Provider{ProviderId: "groq", BaseUrl: "https://api.groq.test/openai/v1/",
			Auth:         &llmv1.Auth{Scheme: llmv1.AuthScheme_AUTH_SCHEME_BEARER, CredentialNames: []string{"GROQ_KEY_2", "GROQ_API_KEY"}},
			ExtraHeaders: map[string]string{"X-Title": "fabro", "Authorization": "must not win"}},
		Model: "m", Request: &llmv1.Request{}, Stream: true,
		Credentials: map[string]string{"GROQ_API_KEY": "gsk-1"},
	}
	req, err := New().NewRequest(t.Context(), call)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{"url": req.URL.String(), "auth": req.Header.Get("Authorization"), "title": req.Header.Get("X-Title"), "accept": req.Header.Get("Accept"), "ct": req.Header.Get("Content-Type")}
	want := map[string]string{"url": "https://api.groq.test/openai/v1/chat/completions", "auth": "Bearer gsk-1", "title": "fabro", "accept": "text/event-stream", "ct": "application/json"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}
