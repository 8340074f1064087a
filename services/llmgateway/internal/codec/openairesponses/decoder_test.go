package openairesponses

import (
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	llmv1 "github.com/fabro-sh/fabro-go/gen/fabro/llm/v1"
	"github.com/fabro-sh/fabro-go/services/llmgateway/internal/codec"
	"github.com/fabro-sh/fabro-go/services/llmgateway/internal/codec/openaiwire/wiretest"
)

const (
	kText      = llmv1.ContentBlockKind_CONTENT_BLOCK_KIND_TEXT
	kReasoning = llmv1.ContentBlockKind_CONTENT_BLOCK_KIND_REASONING
	kTool      = llmv1.ContentBlockKind_CONTENT_BLOCK_KIND_TOOL_CALL
	kOpaque    = llmv1.ContentBlockKind_CONTENT_BLOCK_KIND_OPAQUE
)

// ev renders one typed SSE event; data must start with '{' and gets type
// and a sequence number.
func ev(typ, data string) string {
	body := `{"type":"` + typ + `","sequence_number":1`
	if data != "{}" {
		body += "," + data[1:]
	} else {
		body += "}"
	}
	return "event: " + typ + "\ndata: " + body + "\n\n"
}

const (
	created   = `{"response":{"id":"resp_1","object":"response","created_at":1,"status":"in_progress","model":"gpt-5-mini-2025","output":[],"usage":null}}`
	rsItem    = `{"type":"reasoning","id":"rs_1","summary":[{"type":"summary_text","text":"Need weather."}],"encrypted_content":"gAAAA\u002bxyz=="}`
	usageJSON = `"usage":{"input_tokens":120,"input_tokens_details":{"cached_tokens":100},"output_tokens":80,"output_tokens_details":{"reasoning_tokens":64},"total_tokens":200}`
)

func completed(status, extra string) string {
	return `{"response":{"id":"resp_1","object":"response","status":"` + status + `","model":"gpt-5-mini-2025","output":[]` + extra + `,` + usageJSON + `}}`
}

var fullStream = ev("response.created", created) +
	ev("response.in_progress", created) +
	ev("response.output_item.added", `{"output_index":0,"item":{"type":"reasoning","id":"rs_1","summary":[]}}`) +
	ev("response.reasoning_summary_part.added", `{"item_id":"rs_1","output_index":0,"summary_index":0,"part":{"type":"summary_text","text":""}}`) +
	ev("response.reasoning_summary_text.delta", `{"item_id":"rs_1","output_index":0,"summary_index":0,"delta":"Need "}`) +
	ev("response.reasoning_summary_text.delta", `{"item_id":"rs_1","output_index":0,"summary_index":0,"delta":"weather."}`) +
	ev("response.reasoning_summary_text.done", `{"item_id":"rs_1","output_index":0,"summary_index":0,"text":"Need weather."}`) +
	ev("response.output_item.done", `{"output_index":0,"item":`+rsItem+`}`) +
	ev("response.output_item.added", `{"output_index":1,"item":{"type":"message","id":"msg_1","role":"assistant","content":[]}}`) +
	ev("response.content_part.added", `{"item_id":"msg_1","output_index":1,"content_index":0,"part":{"type":"output_text","text":""}}`) +
	ev("response.output_text.delta", `{"item_id":"msg_1","output_index":1,"content_index":0,"delta":"Looking \u00e9","logprobs":[]}`) +
	ev("response.output_text.done", `{"item_id":"msg_1","output_index":1,"content_index":0,"text":"Looking é"}`) +
	ev("response.output_item.done", `{"output_index":1,"item":{"type":"message","id":"msg_1","role":"assistant","status":"completed","content":[{"type":"output_text","text":"Looking é","annotations":[]}]}}`) +
	ev("response.output_item.added", `{"output_index":2,"item":{"type":"function_call","id":"fc_1","call_id":"call_a","name":"get_weather","arguments":"","status":"in_progress"}}`) +
	ev("response.output_item.added", `{"output_index":3,"item":{"type":"function_call","id":"fc_2","call_id":"call_b","name":"get_time","arguments":"","status":"in_progress"}}`) +
	ev("response.function_call_arguments.delta", `{"item_id":"fc_1","output_index":2,"delta":"{\"city\":"}`) +
	ev("response.function_call_arguments.delta", `{"item_id":"fc_2","output_index":3,"delta":"{}"}`) +
	ev("response.function_call_arguments.delta", `{"item_id":"fc_1","output_index":2,"delta":"\"Paris\"}"}`) +
	ev("response.function_call_arguments.done", `{"item_id":"fc_1","output_index":2,"arguments":"{\"city\":\"Paris\"}"}`) +
	ev("response.output_item.done", `{"output_index":2,"item":{"type":"function_call","id":"fc_1","call_id":"call_a","name":"get_weather","arguments":"{\"city\":\"Paris\"}","status":"completed"}}`) +
	ev("response.function_call_arguments.done", `{"item_id":"fc_2","output_index":3,"arguments":"{}"}`) +
	ev("response.output_item.done", `{"output_index":3,"item":{"type":"function_call","id":"fc_2","call_id":"call_b","name":"get_time","arguments":"{}","status":"completed"}}`)

func TestDecoder(t *testing.T) {
	full := wiretest.Reply{ID: "resp_1", Model: "gpt-5-mini-2025",
		Blocks: []wiretest.Block{
			{Kind: kReasoning, Text: "Need weather."},
			{Kind: kOpaque, OpaqueKind: OpaqueReasoning, Opaque: rsItem},
			{Kind: kText, Text: "Looking é"},
			{Kind: kTool, ToolCallID: "call_a", ToolName: "get_weather", Text: `{"city":"Paris"}`},
			{Kind: kTool, ToolCallID: "call_b", ToolName: "get_time", Text: `{}`},
		},
		Usage:  codec.Usage{Input: 20, Output: 80, Reasoning: 64, CacheRead: 100},
		Finish: llmv1.FinishReason_FINISH_REASON_TOOL_CALLS, RawFinish: "completed"}
	length := full
	length.Finish, length.RawFinish = llmv1.FinishReason_FINISH_REASON_LENGTH, "max_output_tokens"
	other := full
	other.Finish, other.RawFinish = llmv1.FinishReason_FINISH_REASON_INCOMPLETE, "max_tool_calls"
	tests := []struct {
		name    string
		body    string
		want    wiretest.Reply
		wantErr func(error) bool
	}{{
		name: "reasoning with encrypted content, text, parallel tool calls, cached usage",
		body: fullStream + ev("response.completed", completed("completed", "")),
		want: full,
	}, {
		name: "incomplete for max_output_tokens is LENGTH",
		body: fullStream + ev("response.incomplete", completed("incomplete", `,"incomplete_details":{"reason":"max_output_tokens"}`)),
		want: length,
	}, {
		name: "incomplete for another reason is INCOMPLETE",
		body: fullStream + ev("response.incomplete", completed("incomplete", `,"incomplete_details":{"reason":"max_tool_calls"}`)),
		want: other,
	}, {
		name: "events without event lines and unknown events",
		body: strings.ReplaceAll(ev("response.created", created), "event: response.created\n", "") +
			ev("response.future.thing", `{"x":[1,{"y":null}]}`) +
			ev("response.output_text.delta", `{"output_index":0,"content_index":0,"delta":"hi"}`) +
			ev("response.completed", `{"response":{"id":"resp_1","status":"completed","model":"gpt-5-mini-2025"}}`),
		want: wiretest.Reply{ID: "resp_1", Model: "gpt-5-mini-2025", Blocks: []wiretest.Block{{Kind: kText, Text: "hi"}},
			Finish: llmv1.FinishReason_FINISH_REASON_STOP, RawFinish: "completed"},
	}, {
		name: "refusal is a content filter",
		body: ev("response.created", created) +
			ev("response.refusal.delta", `{"output_index":0,"content_index":0,"delta":"I can't help with that."}`) +
			ev("response.completed", `{"response":{"id":"resp_1","status":"completed","model":"gpt-5-mini-2025"}}`),
		want: wiretest.Reply{ID: "resp_1", Model: "gpt-5-mini-2025", Blocks: []wiretest.Block{{Kind: kText, Text: "I can't help with that."}},
			Finish: llmv1.FinishReason_FINISH_REASON_CONTENT_FILTER, RawFinish: "completed"},
	}, {
		name: "arguments only in done events",
		body: ev("response.created", created) +
			ev("response.output_item.added", `{"output_index":0,"item":{"type":"function_call","id":"fc_1","call_id":"call_a","name":"f","arguments":""}}`) +
			ev("response.output_item.done", `{"output_index":0,"item":{"type":"function_call","id":"fc_1","call_id":"call_a","name":"f","arguments":"{\"a\":1}"}}`) +
			ev("response.completed", `{"response":{"id":"resp_1","status":"completed","model":"gpt-5-mini-2025"}}`),
		want: wiretest.Reply{ID: "resp_1", Model: "gpt-5-mini-2025", Blocks: []wiretest.Block{{Kind: kTool, ToolCallID: "call_a", ToolName: "f", Text: `{"a":1}`}},
			Finish: llmv1.FinishReason_FINISH_REASON_TOOL_CALLS, RawFinish: "completed"},
	}, {
		name:    "truncated without a terminal event",
		body:    fullStream,
		wantErr: func(err error) bool { return errors.Is(err, io.ErrUnexpectedEOF) },
	}, {
		name:    "malformed chunk",
		body:    ev("response.created", created) + "data: {\"this is not\": json\n\n",
		wantErr: wiretest.KindIs(llmv1.ErrorKind_ERROR_KIND_STREAM_DECODE),
	}, {
		name:    "malformed delta",
		body:    ev("response.created", created) + "event: response.output_text.delta\ndata: {\"delta\":\"a\",}\n\n",
		wantErr: wiretest.KindIs(llmv1.ErrorKind_ERROR_KIND_STREAM_DECODE),
	}, {
		name: "error event after response.created: insufficient quota",
		body: ev("response.created", created) +
			ev("error", `{"code":"insufficient_quota","message":"You exceeded your current quota","param":null}`),
		wantErr: func(err error) bool {
			var ce *codec.Error
			return errors.As(err, &ce) && ce.Kind == llmv1.ErrorKind_ERROR_KIND_RATE_LIMIT && ce.Code == "insufficient_quota"
		},
	}, {
		name: "response.failed",
		body: ev("response.created", created) +
			ev("response.output_text.delta", `{"output_index":0,"content_index":0,"delta":"hi"}`) +
			ev("response.failed", `{"response":{"id":"resp_1","status":"failed","error":{"code":"server_error","message":"The model failed"}}}`),
		wantErr: func(err error) bool {
			var ce *codec.Error
			return errors.As(err, &ce) && ce.Kind == llmv1.ErrorKind_ERROR_KIND_SERVER && ce.Message == "The model failed"
		},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			wiretest.Decode(t, New(), tt.body, tt.want, tt.wantErr)
		})
	}
}

func TestDecodeResponse(t *testing.T) {
	body := `{"id":"resp_1","object":"response","status":"incomplete","model":"gpt-5-mini-2025","incomplete_details":{"reason":"max_output_tokens"},
	 "output":[` + rsItem + `,
	   {"type":"function_call","id":"fc_1","call_id":"call_abc","name":"get_weather","arguments":"{\"city\":\"Paris\"}","status":"completed"},
	   {"type":"message","id":"msg_1","role":"assistant","status":"completed","content":[{"type":"output_text","text":"Hi","annotations":[]}]}],
	 ` + usageJSON + `}`
	got, err := wiretest.CollectResponse(New(), strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	want := wiretest.Reply{ID: "resp_1", Model: "gpt-5-mini-2025",
		Blocks: []wiretest.Block{
			{Kind: kReasoning, Text: "Need weather."},
			{Kind: kOpaque, OpaqueKind: OpaqueReasoning, Opaque: rsItem},
			{Kind: kTool, ToolCallID: "call_abc", ToolName: "get_weather", Text: `{"city":"Paris"}`},
			{Kind: kText, Text: "Hi"},
		},
		Usage:  codec.Usage{Input: 20, Output: 80, Reasoning: 64, CacheRead: 100},
		Finish: llmv1.FinishReason_FINISH_REASON_LENGTH, RawFinish: "max_output_tokens"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("reply (-want +got):\n%s", diff)
	}
}
