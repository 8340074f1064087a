package openairesponses

import (
	"encoding/base64"
	"net/http/httptest"
	"testing"

	"github.com/google/go-cmp/cmp"

	llmv1 "github.com/fabro-sh/fabro-go/gen/fabro/llm/v1"
	"github.com/fabro-sh/fabro-go/services/llmgateway/fakeprovider"
	"github.com/fabro-sh/fabro-go/services/llmgateway/internal/codec"
	"github.com/fabro-sh/fabro-go/services/llmgateway/internal/codec/openaiwire/wiretest"
)

func testCall(url string, stream bool) *codec.Call {
	return &codec.Call{
		Provider: &llmv1.Provider{Id: "openai", BaseUrl: url + "/v1",
			Auth:         &llmv1.Auth{Scheme: llmv1.AuthScheme_AUTH_SCHEME_BEARER, CredentialNames: []string{"OPENAI_API_KEY"}},
			ExtraHeaders: map[string]string{"OpenAI-Project": "proj_1"}},
		Model:       "gpt-test",
		Request:     &llmv1.Request{System: "Be terse.", Messages: []*llmv1.Message{userText("Weather in Paris and the time?")}},
		Credentials: map[string]string{"OPENAI_API_KEY": "sk-test"},
		Stream:      stream,
	}
}

func userText(s string) *llmv1.Message {
	return &llmv1.Message{Role: llmv1.Role_ROLE_USER, Parts: []*llmv1.ContentPart{{Part: &llmv1.ContentPart_Text{Text: &llmv1.TextPart{Text: s}}}}}
}

var richTurn = fakeprovider.Turn{
	Reasoning: "The user wants weather and time; call both tools.",
	Text:      "Let me check — 天気 😀.",
	ToolCalls: []fakeprovider.ToolCall{
		{ID: "call_1", Name: "get_weather", Arguments: `{"city":"Paris","unit":"c"}`},
		{ID: "call_2", Name: "get_time", Arguments: `{"tz":"Europe/Paris"}`},
	},
	Usage:      fakeprovider.Usage{Input: 20, Output: 90, Reasoning: 40, CacheRead: 1024},
	ChunkRunes: 5,
}

// wantReply is what the responses codec must make of a turn from the fake.
func wantReply(t fakeprovider.Turn, finish llmv1.FinishReason, raw string) wiretest.Reply {
	r := wiretest.Reply{ID: "resp_fake", Model: "gpt-test", Finish: finish, RawFinish: raw,
		Usage: codec.Usage{Input: int64(t.Usage.Input), Output: int64(t.Usage.Output), Reasoning: int64(t.Usage.Reasoning), CacheRead: int64(t.Usage.CacheRead)}}
	if t.Reasoning != "" {
		enc := "gAAAAB" + base64.StdEncoding.EncodeToString([]byte("enc:"+t.Reasoning))
		r.Blocks = append(r.Blocks,
			wiretest.Block{Kind: kReasoning, Text: t.Reasoning},
			wiretest.Block{Kind: kOpaque, OpaqueKind: OpaqueReasoning,
				Opaque: `{"encrypted_content":"` + enc + `","id":"rs_fake","summary":[{"text":"` + t.Reasoning + `","type":"summary_text"}],"type":"reasoning"}`})
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
	length := richTurn
	length.Finish = "length"
	filtered := fakeprovider.Turn{Text: "I can", Finish: "content_filter"}
	tests := []struct {
		name string
		turn fakeprovider.Turn
		want wiretest.Reply
	}{
		{"reasoning, text, parallel tool calls, cached usage", richTurn, wantReply(richTurn, llmv1.FinishReason_FINISH_REASON_TOOL_CALLS, "completed")},
		{"length", length, wantReply(length, llmv1.FinishReason_FINISH_REASON_LENGTH, "max_output_tokens")},
		{"content filter", filtered, wantReply(filtered, llmv1.FinishReason_FINISH_REASON_CONTENT_FILTER, "content_filter")},
		{"plain text, one rune per chunk", fakeprovider.Turn{Text: "héllo wörld", ChunkRunes: 1}, wantReply(fakeprovider.Turn{Text: "héllo wörld"}, llmv1.FinishReason_FINISH_REASON_STOP, "completed")},
	}
	for _, tt := range tests {
		for _, stream := range []bool{true, false} {
			t.Run(tt.name+map[bool]string{true: "/stream", false: "/unary"}[stream], func(t *testing.T) {
				fake := fakeprovider.New(tt.turn)
				srv := httptest.NewServer(fake)
				defer srv.Close()
				got, err := wiretest.Do(t.Context(), New(), testCall(srv.URL, stream))
				if err != nil {
					t.Fatalf("Do: %v", err)
				}
				if diff := cmp.Diff(tt.want, got); diff != "" {
					t.Errorf("reply (-want +got):\n%s", diff)
				}
				reqs := fake.Requests()
				if len(reqs) != 1 {
					t.Fatalf("fake got %d requests", len(reqs))
				}
				r := reqs[0]
				if r.Protocol != "openai-responses" || r.Path != "/v1/responses" || r.Header.Get("Authorization") != "Bearer sk-test" || r.Header.Get("OpenAI-Project") != "proj_1" {
					t.Errorf("request %s %s auth %q project %q", r.Protocol, r.Path, r.Header.Get("Authorization"), r.Header.Get("OpenAI-Project"))
				}
			})
		}
	}
}

func TestRoundTripFaults(t *testing.T) {
	for _, fc := range wiretest.OpenAIFaults {
		for _, stream := range []bool{true, false} {
			t.Run(fc.Name+map[bool]string{true: "/stream", false: "/unary"}[stream], func(t *testing.T) {
				turn := richTurn
				f := fc.Fault
				turn.Fault = &f
				srv := httptest.NewServer(fakeprovider.New(turn))
				defer srv.Close()
				_, err := wiretest.Do(t.Context(), New(), testCall(srv.URL, stream))
				if e := fc.Check(err, stream); e != nil {
					t.Error(e)
				}
			})
		}
	}
}
