package openaichat

import (
	"errors"
	"io"
	"strings"
	"testing"

	llmv1 "github.com/fabro-sh/fabro-go/gen/fabro/llm/v1"
	"github.com/fabro-sh/fabro-go/services/llmgateway/internal/codec"
	"github.com/fabro-sh/fabro-go/services/llmgateway/internal/codec/openaiwire/wiretest"
)

const (
	kText      = llmv1.ContentBlockKind_CONTENT_BLOCK_KIND_TEXT
	kReasoning = llmv1.ContentBlockKind_CONTENT_BLOCK_KIND_REASONING
	kTool      = llmv1.ContentBlockKind_CONTENT_BLOCK_KIND_TOOL_CALL
)

// stream joins data payloads into an SSE body.
func stream(datas ...string) string {
	var b strings.Builder
	for _, d := range datas {
		b.WriteString("data: " + d + "\n\n")
	}
	return b.String()
}

const head = `"id":"chatcmpl-1","object":"chat.completion.chunk","created":1755137933,"model":"gpt-5-nano-2025-08-07","service_tier":"default","system_fingerprint":null`

func delta(d string) string {
	return `{` + head + `,"choices":[{"index":0,"delta":` + d + `,"logprobs":null,"finish_reason":null}],"usage":null,"obfuscation":"nX"}`
}

func finishChunk(reason string) string {
	return `{` + head + `,"choices":[{"index":0,"delta":{},"logprobs":null,"finish_reason":"` + reason + `"}],"usage":null}`
}

func usageChunk(u string) string { return `{` + head + `,"choices":[],"usage":` + u + `}` }

var roleChunk = delta(`{"role":"assistant","content":"","refusal":null}`)

func TestDecoder(t *testing.T) {
	tests := []struct {
		name    string
		body    string
		want    wiretest.Reply
		wantErr func(error) bool
	}{{
		name: "text with escapes and surrogate pairs",
		body: stream(roleChunk, delta(`{"content":"Hi \u00e9 \ud83d\ude00 C:\\path "}`), delta(`{"content":"日本語"}`), finishChunk("stop"),
			usageChunk(`{"prompt_tokens":12,"completion_tokens":5,"total_tokens":17}`), "[DONE]"),
		want: wiretest.Reply{ID: "chatcmpl-1", Model: "gpt-5-nano-2025-08-07",
			Blocks: []wiretest.Block{{Kind: kText, Text: "Hi é 😀 C:\\path 日本語"}},
			Usage:  codec.Usage{Input: 12, Output: 5}, Finish: llmv1.FinishReason_FINISH_REASON_STOP, RawFinish: "stop"},
	}, {
		name: "text then interleaved parallel tool calls",
		body: stream(roleChunk, delta(`{"content":"Checking."}`),
			delta(`{"tool_calls":[{"index":0,"id":"call_1","type":"function","function":{"name":"cosine","arguments":""}}]}`),
			delta(`{"tool_calls":[{"index":1,"id":"call_2","type":"function","function":{"name":"sine","arguments":""}}]}`),
			delta(`{"tool_calls":[{"index":0,"id":null,"function":{"name":"","arguments":"{\"x\": "}}]}`),
			delta(`{"tool_calls":[{"index":1,"function":{"arguments":"{\"x\": \"18\"}"}}]}`),
			delta(`{"tool_calls":[{"index":0,"function":{"arguments":"\"17\"}"}}]}`),
			finishChunk("tool_calls"), "[DONE]"),
		want: wiretest.Reply{ID: "chatcmpl-1", Model: "gpt-5-nano-2025-08-07",
			Blocks: []wiretest.Block{
				{Kind: kText, Text: "Checking."},
				{Kind: kTool, ToolCallID: "call_1", ToolName: "cosine", Text: `{"x": "17"}`},
				{Kind: kTool, ToolCallID: "call_2", ToolName: "sine", Text: `{"x": "18"}`},
			},
			Finish: llmv1.FinishReason_FINISH_REASON_TOOL_CALLS, RawFinish: "tool_calls"},
	}, {
		name: "ollama sends index 0 for every call: split by id",
		body: stream(
			delta(`{"tool_calls":[{"index":0,"id":"call_a","type":"function","function":{"name":"ls","arguments":"{}"}}]}`),
			delta(`{"tool_calls":[{"index":0,"id":"call_b","type":"function","function":{"name":"pwd","arguments":"{}"}}]}`),
			finishChunk("stop"), "[DONE]"),
		want: wiretest.Reply{ID: "chatcmpl-1", Model: "gpt-5-nano-2025-08-07",
			Blocks: []wiretest.Block{
				{Kind: kTool, ToolCallID: "call_a", ToolName: "ls", Text: `{}`},
				{Kind: kTool, ToolCallID: "call_b", ToolName: "pwd", Text: `{}`},
			},
			Finish: llmv1.FinishReason_FINISH_REASON_TOOL_CALLS, RawFinish: "stop"},
	}, {
		name: "reasoning_content and reasoning, usage with cache and reasoning tokens",
		body: stream(roleChunk, delta(`{"reasoning_content":"Think "}`), delta(`{"reasoning":"more."}`), delta(`{"content":"Answer"}`), finishChunk("stop"),
			usageChunk(`{"prompt_tokens":100,"completion_tokens":40,"total_tokens":140,"prompt_tokens_details":{"cached_tokens":64,"audio_tokens":0},"completion_tokens_details":{"reasoning_tokens":30,"audio_tokens":0,"accepted_prediction_tokens":0,"rejected_prediction_tokens":0}}`), "[DONE]"),
		want: wiretest.Reply{ID: "chatcmpl-1", Model: "gpt-5-nano-2025-08-07",
			Blocks: []wiretest.Block{{Kind: kReasoning, Text: "Think more."}, {Kind: kText, Text: "Answer"}},
			Usage:  codec.Usage{Input: 36, Output: 40, Reasoning: 30, CacheRead: 64},
			Finish: llmv1.FinishReason_FINISH_REASON_STOP, RawFinish: "stop"},
	}, {
		name: "deepseek cache hit tokens",
		body: stream(delta(`{"content":"x"}`), finishChunk("stop"),
			usageChunk(`{"prompt_tokens":50,"completion_tokens":2,"prompt_cache_hit_tokens":20,"prompt_cache_miss_tokens":30}`), "[DONE]"),
		want: wiretest.Reply{ID: "chatcmpl-1", Model: "gpt-5-nano-2025-08-07",
			Blocks: []wiretest.Block{{Kind: kText, Text: "x"}},
			Usage:  codec.Usage{Input: 30, Output: 2, CacheRead: 20},
			Finish: llmv1.FinishReason_FINISH_REASON_STOP, RawFinish: "stop"},
	}, {
		name: "length finish keeps the partial tool call",
		body: stream(delta(`{"tool_calls":[{"index":0,"id":"call_1","type":"function","function":{"name":"write","arguments":"{\"a\":"}}]}`), finishChunk("length"), "[DONE]"),
		want: wiretest.Reply{ID: "chatcmpl-1", Model: "gpt-5-nano-2025-08-07",
			Blocks: []wiretest.Block{{Kind: kTool, ToolCallID: "call_1", ToolName: "write", Text: `{"a":`}},
			Finish: llmv1.FinishReason_FINISH_REASON_LENGTH, RawFinish: "length"},
	}, {
		name: "content filter",
		body: stream(delta(`{"content":"I"}`), finishChunk("content_filter"), "[DONE]"),
		want: wiretest.Reply{ID: "chatcmpl-1", Model: "gpt-5-nano-2025-08-07",
			Blocks: []wiretest.Block{{Kind: kText, Text: "I"}},
			Finish: llmv1.FinishReason_FINISH_REASON_CONTENT_FILTER, RawFinish: "content_filter"},
	}, {
		name: "comments, CRLF and unknown fields are ignored",
		body: ": OPENROUTER PROCESSING\r\n\r\n" + strings.ReplaceAll(stream(delta(`{"content":"a","future":{"x":[1,2.5e3,true]}}`), finishChunk("stop"), "[DONE]"), "\n", "\r\n"),
		want: wiretest.Reply{ID: "chatcmpl-1", Model: "gpt-5-nano-2025-08-07",
			Blocks: []wiretest.Block{{Kind: kText, Text: "a"}},
			Finish: llmv1.FinishReason_FINISH_REASON_STOP, RawFinish: "stop"},
	}, {
		name:    "truncated stream without [DONE]",
		body:    stream(roleChunk, delta(`{"content":"Hel"}`)),
		wantErr: func(err error) bool { return errors.Is(err, io.ErrUnexpectedEOF) },
	}, {
		name:    "truncated after finish, before [DONE]",
		body:    stream(delta(`{"content":"Hel"}`), finishChunk("stop")),
		wantErr: func(err error) bool { return errors.Is(err, io.ErrUnexpectedEOF) },
	}, {
		name:    "malformed chunk",
		body:    stream(roleChunk, delta(`{"content":"Hel"}`)) + "data: {\"this is not\": json\n\n",
		wantErr: wiretest.KindIs(llmv1.ErrorKind_ERROR_KIND_STREAM_DECODE),
	}, {
		name:    "malformed: missing comma",
		body:    stream(`{"id":"x" "choices":[]}`),
		wantErr: wiretest.KindIs(llmv1.ErrorKind_ERROR_KIND_STREAM_DECODE),
	}, {
		name:    "malformed: bad escape",
		body:    stream(delta(`{"content":"\q"}`)),
		wantErr: wiretest.KindIs(llmv1.ErrorKind_ERROR_KIND_STREAM_DECODE),
	}, {
		name:    "mid-stream error",
		body:    stream(roleChunk, delta(`{"content":"Hel"}`), `{"error":{"message":"The server had an error","type":"server_error","param":null,"code":null}}`),
		wantErr: wiretest.KindIs(llmv1.ErrorKind_ERROR_KIND_SERVER),
	}, {
		name:    "mid-stream rate limit",
		body:    stream(delta(`{"content":"Hel"}`), `{"error":{"message":"Rate limit reached","type":"tokens","param":null,"code":"rate_limit_exceeded"}}`),
		wantErr: wiretest.KindIs(llmv1.ErrorKind_ERROR_KIND_RATE_LIMIT),
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			wiretest.Decode(t, New(), tt.body, tt.want, tt.wantErr)
		})
	}
}

func TestDecoderErrorIsSticky(t *testing.T) {
	d := New().NewDecoder(strings.NewReader(stream(`{"error":{"message":"boom","type":"server_error"}}`)))
	var ev codec.Event
	err1 := d.Next(&ev)
	err2 := d.Next(&ev)
	if err1 == nil || err1 != err2 {
		t.Fatalf("errors = %v, %v; want the same error twice", err1, err2)
	}
}
