package openairesponses

import (
	"testing"

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
	name    string
	stream  bool
	req     *llmv1.Request
	want    string
	wantErr bool
}

func (tt requestCase) call() *codec.Call {
	return &codec.Call{Provider: &llmv1.Provider{ProviderId: "openai", BaseUrl: "https://example.test/v1"}, Model: "m", Request: tt.req, Stream: tt.stream}
}

// The reasoning item as a previous reply returned it: replayed byte for byte.
const replayItem = `{"type":"reasoning","id":"rs_1","summary":[{"type":"summary_text","text":"Need weather."}],"encrypted_content":"gAAAA+xyz=="}`

func requestCases() []requestCase {
	tools := []*llmv1.ToolDefinition{{Name: "get_weather", Description: "Current weather", Parameters: weatherSchema}}
	return []requestCase{{
		name:   "instructions, user text, stream",
		stream: true,
		req:    &llmv1.Request{System: "You are terse.", Messages: []*llmv1.Message{msg(llmv1.Role_ROLE_USER, text("Hi <b>&</b>"))}},
		want: `{"model":"m","instructions":"You are terse.","input":[{"type":"message","role":"user","content":[{"type":"input_text","text":"Hi <b>&</b>"}]}],
			"include":["reasoning.encrypted_content"],"store":false,"stream":true}`,
	}, {
		name: "tool loop with replayed reasoning item, image, tools, named choice, effort, json_schema",
		req: &llmv1.Request{
			Messages: []*llmv1.Message{
				msg(llmv1.Role_ROLE_DEVELOPER, text("Use tools.")),
				msg(llmv1.Role_ROLE_USER, text("Weather?"), &llmv1.ContentPart{Part: &llmv1.ContentPart_Image{Image: &llmv1.ImagePart{Source: &llmv1.ImagePart_Data{Data: []byte("PNG")}, MediaType: "image/png"}}}),
				msg(llmv1.Role_ROLE_ASSISTANT,
					&llmv1.ContentPart{Part: &llmv1.ContentPart_Reasoning{Reasoning: &llmv1.ReasoningPart{Text: "Need weather."}}},
					&llmv1.ContentPart{Part: &llmv1.ContentPart_Opaque{Opaque: &llmv1.OpaquePart{Kind: OpaqueReasoning, Data: replayItem}}},
					&llmv1.ContentPart{Part: &llmv1.ContentPart_Opaque{Opaque: &llmv1.OpaquePart{Kind: "anthropic.server_tool", Data: `{}`}}},
					text("Checking."),
					&llmv1.ContentPart{Part: &llmv1.ContentPart_ToolCall{ToolCall: &llmv1.ToolCall{Id: "call_abc", Name: "get_weather", Arguments: `{"city":"Paris"}`}}}),
				msg(llmv1.Role_ROLE_TOOL, &llmv1.ContentPart{Part: &llmv1.ContentPart_ToolResult{ToolResult: &llmv1.ToolResult{ToolCallId: "call_abc", Content: []*llmv1.ContentPart{text(`{"temp_c":21}`)}}}}),
			},
			Tools:           tools,
			ToolChoice:      &llmv1.ToolChoice{Mode: llmv1.ToolChoiceMode_TOOL_CHOICE_MODE_TOOL, ToolName: "get_weather"},
			MaxOutputTokens: proto.Int32(1024),
			Temperature:     proto.Float64(1),
			ReasoningEffort: llmv1.ReasoningEffort_REASONING_EFFORT_HIGH,
			ResponseFormat:  &llmv1.ResponseFormat{Type: llmv1.ResponseFormatType_RESPONSE_FORMAT_TYPE_JSON_SCHEMA, Name: "answer", Schema: `{"type":"object"}`},
		},
		want: `{"model":"m","input":[
			{"type":"message","role":"developer","content":"Use tools."},
			{"type":"message","role":"user","content":[{"type":"input_text","text":"Weather?"},{"type":"input_image","image_url":"data:image/png;base64,UE5H","detail":"auto"}]},
			` + replayItem + `,
			{"type":"message","role":"assistant","content":"Checking."},
			{"type":"function_call","call_id":"call_abc","name":"get_weather","arguments":"{\"city\":\"Paris\"}"},
			{"type":"function_call_output","call_id":"call_abc","output":"{\"temp_c\":21}"}],
			"tools":[{"type":"function","name":"get_weather","description":"Current weather","parameters":` + weatherSchema + `,"strict":false}],
			"tool_choice":{"type":"function","name":"get_weather"},
			"reasoning":{"effort":"high","summary":"auto"},
			"include":["reasoning.encrypted_content"],"store":false,
			"text":{"format":{"type":"json_schema","name":"answer","schema":{"type":"object"},"strict":false}},
			"max_output_tokens":1024,"temperature":1}`,
	}, {
		name: "tool result with image, json_object, required",
		req: &llmv1.Request{
			Messages: []*llmv1.Message{msg(llmv1.Role_ROLE_TOOL, &llmv1.ContentPart{Part: &llmv1.ContentPart_ToolResult{ToolResult: &llmv1.ToolResult{ToolCallId: "c1",
				Content: []*llmv1.ContentPart{text("see"), {Part: &llmv1.ContentPart_Image{Image: &llmv1.ImagePart{Source: &llmv1.ImagePart_Url{Url: "https://x.test/a.png"}}}}}}}})},
			Tools:          tools,
			ToolChoice:     &llmv1.ToolChoice{Mode: llmv1.ToolChoiceMode_TOOL_CHOICE_MODE_REQUIRED},
			ResponseFormat: &llmv1.ResponseFormat{Type: llmv1.ResponseFormatType_RESPONSE_FORMAT_TYPE_JSON_OBJECT},
		},
		want: `{"model":"m","input":[{"type":"function_call_output","call_id":"c1","output":[{"type":"input_text","text":"see"},{"type":"input_image","image_url":"https://x.test/a.png","detail":"auto"}]}],
			"tools":[{"type":"function","name":"get_weather","description":"Current weather","parameters":` + weatherSchema + `,"strict":false}],
			"tool_choice":"required","include":["reasoning.encrypted_content"],"store":false,"text":{"format":{"type":"json_object"}}}`,
	}, {
		name:    "malformed tool schema",
		req:     &llmv1.Request{Tools: []*llmv1.ToolDefinition{{Name: "t", Parameters: `[]`}}},
		wantErr: true,
	}, {
		name:    "malformed opaque item",
		req:     &llmv1.Request{Messages: []*llmv1.Message{msg(llmv1.Role_ROLE_ASSISTANT, &llmv1.ContentPart{Part: &llmv1.ContentPart_Opaque{Opaque: &llmv1.OpaquePart{Kind: OpaqueReasoning, Data: `{"type":`}}})}},
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
