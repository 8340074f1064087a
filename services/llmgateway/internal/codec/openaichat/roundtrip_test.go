package openaichat

import (
	"testing"

	llmv1 "github.com/fabro-sh/fabro-go/gen/fabro/llm/v1"
	"github.com/fabro-sh/fabro-go/services/llmgateway/fakeprovider"
	"github.com/fabro-sh/fabro-go/services/llmgateway/internal/codec"
	"github.com/fabro-sh/fabro-go/services/llmgateway/internal/codec/openaiwire/wiretest"
)

// wantReply is what the chat codec must make of a turn from the fake.
func wantReply(t fakeprovider.Turn, finish llmv1.FinishReason, raw string) wiretest.Reply {
	r := wiretest.Reply{ID: "chatcmpl-fake", Model: "gpt-test", Finish: finish, RawFinish: raw,
		Usage: codec.Usage{Input: int64(t.Usage.Input), Output: int64(t.Usage.Output), Reasoning: int64(t.Usage.Reasoning), CacheRead: int64(t.Usage.CacheRead)}}
	if t.Reasoning != "" {
		r.Blocks = append(r.Blocks, wiretest.Block{Kind: kReasoning, Text: t.Reasoning})
	}
	if t.Text != "" {
		r.Blocks = append(r.Blocks, wiretest.Block{Kind: kText, Text: t.Text})
	}
	for _, tc := range t.ToolCalls {
		r.Blocks = append(r.Blocks, wiretest.Block{Kind: kTool, ToolCallID: tc.ID, ToolName: tc.Name, Text: tc.Arguments})
	}
	return r
}

func TestRoundTrip(t *testing.T) {
	length := wiretest.RichTurn
	length.Finish = "length"
	filtered := fakeprovider.Turn{Text: "I can", Finish: "content_filter"}
	tests := []wiretest.RoundTripCase{
		{Name: "reasoning, text, parallel tool calls, cached usage", Turn: wiretest.RichTurn, Want: wantReply(wiretest.RichTurn, llmv1.FinishReason_FINISH_REASON_TOOL_CALLS, "tool_calls")},
		{Name: "length", Turn: length, Want: wantReply(length, llmv1.FinishReason_FINISH_REASON_LENGTH, "length")},
		{Name: "content filter", Turn: filtered, Want: wantReply(filtered, llmv1.FinishReason_FINISH_REASON_CONTENT_FILTER, "content_filter")},
		{Name: "plain text, one rune per chunk", Turn: fakeprovider.Turn{Text: "héllo wörld", ChunkRunes: 1}, Want: wantReply(fakeprovider.Turn{Text: "héllo wörld"}, llmv1.FinishReason_FINISH_REASON_STOP, "stop")},
	}
	wiretest.RoundTrip(t, New(), "openai-chat", "/v1/chat/completions", tests)
}

func TestRoundTripFaults(t *testing.T) { wiretest.RoundTripFaults(t, New()) }
