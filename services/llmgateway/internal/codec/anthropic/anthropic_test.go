package anthropic

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

func sseBody(events ...string) string {
	var b strings.Builder
	for _, e := range events {
		var typ struct{ Type string }
		if err := json.Unmarshal([]byte(e), &typ); err != nil {
			typ.Type = "junk"
		}
		b.WriteString("event: " + typ.Type + "\ndata: " + e + "\n\n")
	}
	return b.String()
}

const (
	msgStart    = `{"type":"message_start","message":{"id":"msg_01","type":"message","role":"assistant","model":"claude-x","content":[],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":1284,"cache_creation_input_tokens":2048,"cache_read_input_tokens":18432,"cache_creation":{"ephemeral_5m_input_tokens":1536,"ephemeral_1h_input_tokens":512},"output_tokens":1,"service_tier":"standard"}}}`
	msgStop     = `{"type":"message_stop"}`
	ping        = `{"type": "ping"}`
	textStart1  = `{"type":"content_block_start","index":1,"content_block":{"type":"text","text":""}}`
	blockStop1  = `{"type":"content_block_stop","index":1}`
	maxTokDelta = `{"type":"message_delta","delta":{"stop_reason":"max_tokens","stop_sequence":null},"usage":{"output_tokens":50}}`
)

func TestDecodeStream(t *testing.T) {
	fullUsage := codec.Usage{Input: 1284, CacheWrite: 2048, CacheRead: 18432, Output: 120}
	tests := []struct {
		name    string
		stream  string
		want    result
		wantErr error
		kind    llmv1.ErrorKind
	}{{
		name: "thinking, text, parallel tools, cache usage",
		stream: sseBody(msgStart, ping,
			`{"type":"content_block_start","index":0,"content_block":{"type":"thinking","thinking":"","signature":""}}`,
			`{"type":"content_block_delta","index":0,"delta":{"type":"thinking_delta","thinking":"Let me "}}`,
			`{"type":"content_block_delta","index":0,"delta":{"type":"thinking_delta","thinking":"think…"}}`,
			`{"type":"content_block_delta","index":0,"delta":{"type":"signature_delta","signature":"EqQBCkYIBhgC"}}`,
			`{"type":"content_block_stop","index":0}`,
			textStart1,
			`{"type":"content_block_delta","index":1,"delta":{"type":"text_delta","text":"Checking \ud83d\ude00 C:\\path \"q\""}}`,
			blockStop1,
			`{"type":"content_block_start","index":2,"content_block":{"type":"tool_use","id":"toolu_A","name":"get_weather","input":{}}}`,
			`{"type":"content_block_delta","index":2,"delta":{"type":"input_json_delta","partial_json":""}}`,
			`{"type":"content_block_delta","index":2,"delta":{"type":"input_json_delta","partial_json":"{\"city\": \"Par"}}`,
			`{"type":"content_block_start","index":3,"content_block":{"type":"tool_use","id":"toolu_B","name":"get_time","input":{}}}`,
			`{"type":"content_block_delta","index":2,"delta":{"type":"input_json_delta","partial_json":"is\"}"}}`,
			`{"type":"content_block_delta","index":3,"delta":{"type":"input_json_delta","partial_json":""}}`,
			`{"type":"content_block_stop","index":2}`,
			`{"type":"content_block_stop","index":3}`,
			`{"type":"some_future_event","x":1}`,
			`{"type":"message_delta","delta":{"stop_reason":"tool_use","stop_sequence":null},"usage":{"output_tokens":120}}`,
			msgStop),
		want: result{ID: "msg_01", Model: "claude-x", Usage: fullUsage, Finish: llmv1.FinishReason_FINISH_REASON_TOOL_CALLS, RawFinish: "tool_use",
			Blocks: []block{
				{Kind: llmv1.ContentBlockKind_CONTENT_BLOCK_KIND_REASONING, Text: "Let me think…", Signature: "EqQBCkYIBhgC", Ended: true},
				{Kind: llmv1.ContentBlockKind_CONTENT_BLOCK_KIND_TEXT, Text: "Checking 😀 C:\\path \"q\"", Ended: true},
				{Kind: llmv1.ContentBlockKind_CONTENT_BLOCK_KIND_TOOL_CALL, ID: "toolu_A", Name: "get_weather", Text: `{"city": "Paris"}`, Ended: true},
				{Kind: llmv1.ContentBlockKind_CONTENT_BLOCK_KIND_TOOL_CALL, ID: "toolu_B", Name: "get_time", Text: `{}`, Ended: true},
			}},
	}, {
		name: "redacted thinking and an opaque server tool block",
		stream: sseBody(msgStart,
			`{"type":"content_block_start","index":0,"content_block":{"type":"redacted_thinking","data":"EmwKAhgB"}}`,
			`{"type":"content_block_stop","index":0}`,
			`{"type":"content_block_start","index":1,"content_block":{"type":"server_tool_use","id":"srvtoolu_1","name":"web_search","input":{}}}`,
			`{"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"{\"query\":\"go\"}"}}`,
			blockStop1,
			`{"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":120}}`,
			msgStop),
		want: result{ID: "msg_01", Model: "claude-x", Usage: fullUsage, Finish: llmv1.FinishReason_FINISH_REASON_STOP, RawFinish: "end_turn",
			Blocks: []block{
				{Kind: llmv1.ContentBlockKind_CONTENT_BLOCK_KIND_REASONING, Redacted: true, Signature: "EmwKAhgB", Ended: true},
				{Kind: llmv1.ContentBlockKind_CONTENT_BLOCK_KIND_OPAQUE, OpaqueKind: "anthropic.server_tool_use", Ended: true,
					Opaque: `{"id":"srvtoolu_1","input":{"query":"go"},"name":"web_search","type":"server_tool_use"}`},
			}},
	}, {
		// display "omitted": signed thinking without text is not redacted
		// and must replay as a thinking block, not redacted_thinking.
		name: "thinking with display omitted",
		stream: sseBody(msgStart,
			`{"type":"content_block_start","index":0,"content_block":{"type":"thinking","thinking":"","signature":""}}`,
			`{"type":"content_block_delta","index":0,"delta":{"type":"signature_delta","signature":"EqQBCkYIBhgC"}}`,
			`{"type":"content_block_stop","index":0}`,
			`{"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":120}}`,
			msgStop),
		want: result{ID: "msg_01", Model: "claude-x", Usage: fullUsage, Finish: llmv1.FinishReason_FINISH_REASON_STOP, RawFinish: "end_turn",
			Blocks: []block{{Kind: llmv1.ContentBlockKind_CONTENT_BLOCK_KIND_REASONING, Signature: "EqQBCkYIBhgC", Ended: true}}},
	}, {
		name: "max_tokens finish",
		stream: sseBody(msgStart, textStart1,
			`{"type":"content_block_delta","index":1,"delta":{"type":"text_delta","text":"cut"}}`,
			blockStop1, maxTokDelta, msgStop),
		want: result{ID: "msg_01", Model: "claude-x", Usage: codec.Usage{Input: 1284, CacheWrite: 2048, CacheRead: 18432, Output: 50},
			Finish: llmv1.FinishReason_FINISH_REASON_LENGTH, RawFinish: "max_tokens",
			Blocks: []block{{Kind: llmv1.ContentBlockKind_CONTENT_BLOCK_KIND_TEXT, Text: "cut", Ended: true}}},
	}, {
		name:    "truncated: no message_stop",
		stream:  sseBody(msgStart, textStart1, `{"type":"content_block_delta","index":1,"delta":{"type":"text_delta","text":"par"}}`),
		wantErr: io.ErrUnexpectedEOF,
	}, {
		name:    "truncated after message_delta",
		stream:  sseBody(msgStart, maxTokDelta),
		wantErr: io.ErrUnexpectedEOF,
	}, {
		name:   "malformed chunk",
		stream: sseBody(msgStart) + "data: {\"this is not\": json\n\n" + sseBody(msgStop),
		kind:   llmv1.ErrorKind_ERROR_KIND_STREAM_DECODE,
	}, {
		name:   "mid-stream overloaded error",
		stream: sseBody(msgStart, textStart1, `{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}`),
		kind:   llmv1.ErrorKind_ERROR_KIND_OVERLOADED,
	}, {
		name:   "mid-stream rate limit error",
		stream: sseBody(msgStart, `{"type":"error","error":{"type":"rate_limit_error","message":"slow down"}}`),
		kind:   llmv1.ErrorKind_ERROR_KIND_RATE_LIMIT,
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

func TestDecoderStickyError(t *testing.T) {
	d := New().NewDecoder(strings.NewReader(sseBody(msgStart)))
	var ev codec.Event
	for range 2 {
		d.Next(&ev)
	}
	for range 2 {
		if err := d.Next(&ev); !errors.Is(err, io.ErrUnexpectedEOF) {
			t.Fatalf("Next = %v, want io.ErrUnexpectedEOF every time", err)
		}
	}
}

func TestDecodeResponse(t *testing.T) {
	body := `{"id":"msg_01X","type":"message","role":"assistant","model":"claude-x",
 "content":[{"type":"thinking","thinking":"hmm","signature":"sig1"},
            {"type":"redacted_thinking","data":"REDACTED"},
            {"type":"text","text":"Checking."},
            {"type":"tool_use","id":"toolu_01A","name":"get_weather","input":{"city":"Paris"}},
            {"type":"tool_use","id":"toolu_01B","name":"now","input":{}},
            {"type":"web_search_tool_result","tool_use_id":"srv_1","content":[]}],
 "stop_reason":"tool_use","stop_sequence":null,
 "usage":{"input_tokens":10,"cache_creation_input_tokens":20,"cache_read_input_tokens":30,"output_tokens":40,"service_tier":"standard"}}`
	var c collector
	if err := New().DecodeResponse(strings.NewReader(body), c.Add); err != nil {
		t.Fatal(err)
	}
	want := result{ID: "msg_01X", Model: "claude-x", Finish: llmv1.FinishReason_FINISH_REASON_TOOL_CALLS, RawFinish: "tool_use",
		Usage: codec.Usage{Input: 10, CacheWrite: 20, CacheRead: 30, Output: 40},
		Blocks: []block{
			{Kind: llmv1.ContentBlockKind_CONTENT_BLOCK_KIND_REASONING, Text: "hmm", Signature: "sig1", Ended: true},
			{Kind: llmv1.ContentBlockKind_CONTENT_BLOCK_KIND_REASONING, Redacted: true, Signature: "REDACTED", Ended: true},
			{Kind: llmv1.ContentBlockKind_CONTENT_BLOCK_KIND_TEXT, Text: "Checking.", Ended: true},
			{Kind: llmv1.ContentBlockKind_CONTENT_BLOCK_KIND_TOOL_CALL, ID: "toolu_01A", Name: "get_weather", Text: `{"city":"Paris"}`, Ended: true},
			{Kind: llmv1.ContentBlockKind_CONTENT_BLOCK_KIND_TOOL_CALL, ID: "toolu_01B", Name: "now", Text: `{}`, Ended: true},
			{Kind: llmv1.ContentBlockKind_CONTENT_BLOCK_KIND_OPAQUE, OpaqueKind: "anthropic.web_search_tool_result", Ended: true,
				Opaque: `{"type":"web_search_tool_result","tool_use_id":"srv_1","content":[]}`},
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
		name: "529 overloaded", status: 529, header: http.Header{"Request-Id": {"req_h"}},
		body: `{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"},"request_id":"req_1"}`,
		want: codec.Error{Kind: llmv1.ErrorKind_ERROR_KIND_OVERLOADED, Message: "anthropic: Overloaded", StatusCode: 529, Code: "overloaded_error", RequestID: "req_1"},
	}, {
		name: "429 with retry-after", status: 429, header: http.Header{"Retry-After": {"7"}, "Request-Id": {"req_h"}},
		body: `{"type":"error","error":{"type":"rate_limit_error","message":"rate limited"}}`,
		want: codec.Error{Kind: llmv1.ErrorKind_ERROR_KIND_RATE_LIMIT, Message: "anthropic: rate limited", StatusCode: 429, Code: "rate_limit_error", RequestID: "req_h", RetryAfter: 7 * time.Second},
	}, {
		name: "context length", status: 400,
		body: `{"type":"error","error":{"type":"invalid_request_error","message":"prompt is too long: 207791 tokens > 200000 maximum"}}`,
		want: codec.Error{Kind: llmv1.ErrorKind_ERROR_KIND_CONTEXT_LENGTH, Message: "anthropic: prompt is too long: 207791 tokens > 200000 maximum", StatusCode: 400, Code: "invalid_request_error"},
	}, {
		name: "invalid request", status: 400,
		body: `{"type":"error","error":{"type":"invalid_request_error","message":"max_tokens: field required"}}`,
		want: codec.Error{Kind: llmv1.ErrorKind_ERROR_KIND_INVALID_REQUEST, Message: "anthropic: max_tokens: field required", StatusCode: 400, Code: "invalid_request_error"},
	}, {
		name: "401", status: 401, body: `{"type":"error","error":{"type":"authentication_error","message":"invalid x-api-key"}}`,
		want: codec.Error{Kind: llmv1.ErrorKind_ERROR_KIND_AUTHENTICATION, Message: "anthropic: invalid x-api-key", StatusCode: 401, Code: "authentication_error"},
	}, {
		name: "500 api_error", status: 500, body: `{"type":"error","error":{"type":"api_error","message":"Internal server error"}}`,
		want: codec.Error{Kind: llmv1.ErrorKind_ERROR_KIND_SERVER, Message: "anthropic: Internal server error", StatusCode: 500, Code: "api_error"},
	}, {
		name: "502 html from a proxy", status: 502, body: `<html>bad gateway</html>`,
		want: codec.Error{Kind: llmv1.ErrorKind_ERROR_KIND_SERVER, Message: "anthropic: " + codec.UnreadableBody(502), StatusCode: 502},
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
	conversation := []*llmv1.Message{
		{Role: llmv1.Role_ROLE_DEVELOPER, Parts: []*llmv1.ContentPart{text("Be brief.")}},
		{Role: llmv1.Role_ROLE_USER, Parts: []*llmv1.ContentPart{
			{Part: &llmv1.ContentPart_Image{Image: &llmv1.ImagePart{Source: &llmv1.ImagePart_Data{Data: []byte("png")}, MediaType: "image/png"}}},
			{Part: &llmv1.ContentPart_Image{Image: &llmv1.ImagePart{Source: &llmv1.ImagePart_Url{Url: "https://x/y.png"}}}},
			text("Weather in Paris?"),
		}},
		{Role: llmv1.Role_ROLE_ASSISTANT, Parts: []*llmv1.ContentPart{
			{Part: &llmv1.ContentPart_Reasoning{Reasoning: &llmv1.ReasoningPart{Text: "Need weather", Signature: "EqQB"}}},
			{Part: &llmv1.ContentPart_Reasoning{Reasoning: &llmv1.ReasoningPart{Signature: "REDACTED", Redacted: true}}},
			{Part: &llmv1.ContentPart_Reasoning{Reasoning: &llmv1.ReasoningPart{Signature: "OMITTED"}}}, // display omitted: still thinking
			{Part: &llmv1.ContentPart_Reasoning{Reasoning: &llmv1.ReasoningPart{Text: "unsigned, dropped"}}},
			{Part: &llmv1.ContentPart_ToolCall{ToolCall: &llmv1.ToolCall{Id: "toolu_A", Name: "get_weather", Arguments: `{"city": "Paris"}`}}},
			{Part: &llmv1.ContentPart_ToolCall{ToolCall: &llmv1.ToolCall{Id: "toolu_B", Name: "get_weather", Arguments: ``}}},
			{Part: &llmv1.ContentPart_Opaque{Opaque: &llmv1.OpaquePart{Kind: "anthropic.server_tool_use", Data: `{"type":"server_tool_use","id":"s1","name":"web_search","input":{"query":"q"}}`}}},
			{Part: &llmv1.ContentPart_Opaque{Opaque: &llmv1.OpaquePart{Kind: "openai.reasoning", Data: `{"x":1}`}}},
		}},
		{Role: llmv1.Role_ROLE_TOOL, Parts: []*llmv1.ContentPart{{Part: &llmv1.ContentPart_ToolResult{ToolResult: &llmv1.ToolResult{ToolCallId: "toolu_A", Content: []*llmv1.ContentPart{text(`{"temp_c":21}`)}}}}}},
		{Role: llmv1.Role_ROLE_TOOL, Parts: []*llmv1.ContentPart{{Part: &llmv1.ContentPart_ToolResult{ToolResult: &llmv1.ToolResult{ToolCallId: "toolu_B", IsError: true, Content: []*llmv1.ContentPart{text("boom")}}}}}},
		{Role: llmv1.Role_ROLE_USER, Parts: []*llmv1.ContentPart{text("And?")}},
	}
	tests := []struct {
		name    string
		req     *llmv1.Request
		stream  bool
		want    string
		wantErr llmv1.ErrorKind
	}{{
		name: "minimal, default max_tokens",
		req:  &llmv1.Request{Messages: []*llmv1.Message{{Role: llmv1.Role_ROLE_USER, Parts: []*llmv1.ContentPart{text("hi")}}}},
		want: `{"model":"claude-x","max_tokens":8192,"messages":[{"role":"user","content":[{"type":"text","text":"hi"}]}]}`,
	}, {
		name:   "conversation with tools, thinking, replay",
		stream: true,
		req: &llmv1.Request{System: "You are terse.", Messages: conversation, Tools: []*llmv1.ToolDefinition{weather},
			ToolChoice: &llmv1.ToolChoice{Mode: llmv1.ToolChoiceMode_TOOL_CHOICE_MODE_AUTO}, MaxOutputTokens: proto.Int32(32000),
			Temperature: proto.Float64(0.5), ReasoningEffort: llmv1.ReasoningEffort_REASONING_EFFORT_MEDIUM},
		want: `{"model":"claude-x","max_tokens":32000,"system":"You are terse.\n\nBe brief.","stream":true,
		  "thinking":{"type":"enabled","budget_tokens":4096},
		  "tools":[{"name":"get_weather","description":"Weather","input_schema":{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}}],
		  "messages":[
		   {"role":"user","content":[
		     {"type":"image","source":{"type":"base64","media_type":"image/png","data":"cG5n"}},
		     {"type":"image","source":{"type":"url","url":"https://x/y.png"}},
		     {"type":"text","text":"Weather in Paris?"}]},
		   {"role":"assistant","content":[
		     {"type":"thinking","thinking":"Need weather","signature":"EqQB"},
		     {"type":"redacted_thinking","data":"REDACTED"},
		     {"type":"thinking","thinking":"","signature":"OMITTED"},
		     {"type":"tool_use","id":"toolu_A","name":"get_weather","input":{"city": "Paris"}},
		     {"type":"tool_use","id":"toolu_B","name":"get_weather","input":{}},
		     {"type":"server_tool_use","id":"s1","name":"web_search","input":{"query":"q"}}]},
		   {"role":"user","content":[
		     {"type":"tool_result","tool_use_id":"toolu_A","content":[{"type":"text","text":"{\"temp_c\":21}"}]},
		     {"type":"tool_result","tool_use_id":"toolu_B","content":[{"type":"text","text":"boom"}],"is_error":true},
		     {"type":"text","text":"And?"}]}]}`,
	}, {
		name: "forced tool, temperature, json schema",
		req: &llmv1.Request{Messages: []*llmv1.Message{{Role: llmv1.Role_ROLE_USER, Parts: []*llmv1.ContentPart{text("hi")}}},
			Tools: []*llmv1.ToolDefinition{weather}, ToolChoice: &llmv1.ToolChoice{Mode: llmv1.ToolChoiceMode_TOOL_CHOICE_MODE_TOOL, ToolName: "get_weather"},
			Temperature: proto.Float64(0.2), MaxOutputTokens: proto.Int32(100),
			ResponseFormat: &llmv1.ResponseFormat{Type: llmv1.ResponseFormatType_RESPONSE_FORMAT_TYPE_JSON_SCHEMA, Name: "s", Schema: `{"type":"object","properties":{"a":{"type":"string"}},"additionalProperties":false}`}},
		want: `{"model":"claude-x","max_tokens":100,"temperature":0.2,
		  "tools":[{"name":"get_weather","description":"Weather","input_schema":{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}}],
		  "tool_choice":{"type":"tool","name":"get_weather"},
		  "output_config":{"format":{"type":"json_schema","schema":{"type":"object","properties":{"a":{"type":"string"}},"additionalProperties":false}}},
		  "messages":[{"role":"user","content":[{"type":"text","text":"hi"}]}]}`,
	}, {
		name: "required tool choice, json object, thinking off when max_tokens is small",
		req: &llmv1.Request{Messages: []*llmv1.Message{{Role: llmv1.Role_ROLE_USER, Parts: []*llmv1.ContentPart{text("hi")}}},
			Tools: []*llmv1.ToolDefinition{{Name: "t"}}, ToolChoice: &llmv1.ToolChoice{Mode: llmv1.ToolChoiceMode_TOOL_CHOICE_MODE_REQUIRED},
			MaxOutputTokens: proto.Int32(1000), ReasoningEffort: llmv1.ReasoningEffort_REASONING_EFFORT_HIGH,
			ResponseFormat: &llmv1.ResponseFormat{Type: llmv1.ResponseFormatType_RESPONSE_FORMAT_TYPE_JSON_OBJECT}},
		want: `{"model":"claude-x","max_tokens":1000,"system":"` + jsonObjectInstruction + `",
		  "tools":[{"name":"t","input_schema":{"type":"object"}}],"tool_choice":{"type":"any"},
		  "messages":[{"role":"user","content":[{"type":"text","text":"hi"}]}]}`,
	}, {
		name:    "malformed tool schema",
		req:     &llmv1.Request{Tools: []*llmv1.ToolDefinition{{Name: "t", Parameters: `{"type":`}}},
		wantErr: llmv1.ErrorKind_ERROR_KIND_INVALID_REQUEST,
	}, {
		name:    "tool arguments not JSON",
		req:     &llmv1.Request{Messages: []*llmv1.Message{{Role: llmv1.Role_ROLE_ASSISTANT, Parts: []*llmv1.ContentPart{{Part: &llmv1.ContentPart_ToolCall{ToolCall: &llmv1.ToolCall{Id: "a", Name: "t", Arguments: "{nope"}}}}}}},
		wantErr: llmv1.ErrorKind_ERROR_KIND_INVALID_REQUEST,
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			call := &codec.Call{Provider: &llmv1.Provider{BaseUrl: "https://api.anthropic.com/v1"}, Model: "claude-x", Request: tt.req, Stream: tt.stream}
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

func TestRequestHeaders(t *testing.T) {
	tests := []struct {
		name     string
		provider *llmv1.Provider
		creds    map[string]string
		want     map[string]string
		url      string
	}{{
		name:     "x-api-key and version; extra headers win",
		provider: &llmv1.Provider{BaseUrl: "https://api.anthropic.com", ExtraHeaders: map[string]string{"anthropic-beta": "a,b", "anthropic-version": "2099-01-01"}},
		creds:    map[string]string{"ANTHROPIC_API_KEY": "sk-ant"},
		want:     map[string]string{"x-api-key": "sk-ant", "anthropic-version": "2099-01-01", "anthropic-beta": "a,b", "Content-Type": "application/json"},
		url:      "https://api.anthropic.com/v1/messages",
	}, {
		name:     "bearer from the catalog's credential names",
		provider: &llmv1.Provider{BaseUrl: "http://proxy/v1/", Auth: &llmv1.Auth{Scheme: llmv1.AuthScheme_AUTH_SCHEME_BEARER, CredentialNames: []string{"A", "B"}}},
		creds:    map[string]string{"B": "tok"},
		want:     map[string]string{"Authorization": "Bearer tok", "anthropic-version": APIVersion, "x-api-key": ""},
		url:      "http://proxy/v1/messages",
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req, err := New().NewRequest(t.Context(), &codec.Call{Provider: tt.provider, Model: "m", Request: &llmv1.Request{}, Credentials: tt.creds})
			if err != nil {
				t.Fatal(err)
			}
			if req.URL.String() != tt.url {
				t.Errorf("url = %s, want %s", req.URL, tt.url)
			}
			for k, v := range tt.want {
				if got := req.Header.Get(k); got != v {
					t.Errorf("header %s = %q, want %q", k, got, v)
				}
			}
		})
	}
}
