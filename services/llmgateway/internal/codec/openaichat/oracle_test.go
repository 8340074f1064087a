package openaichat

// SDK oracle tests: the official openai-go client, pointed at the fake
// provider, must parse exactly what our codec parses; and our request body
// must survive a decode into the SDK's param types and back.

import (
	"encoding/json"
	"errors"
	"net/http/httptest"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/fabro-sh/fabro-go/services/llmgateway/fakeprovider"
	"github.com/fabro-sh/fabro-go/services/llmgateway/internal/codec/openaiwire/wiretest"
)

// summary is what both parsers must agree on.
type summary struct {
	ID, Text, Finish                            string
	Calls                                       [][3]string
	Prompt, Cached, Completion, ReasoningTokens int64
}

func fromSDK(c openai.ChatCompletion) summary {
	s := summary{ID: c.ID, Prompt: c.Usage.PromptTokens, Cached: c.Usage.PromptTokensDetails.CachedTokens,
		Completion: c.Usage.CompletionTokens, ReasoningTokens: c.Usage.CompletionTokensDetails.ReasoningTokens}
	if len(c.Choices) > 0 {
		m := c.Choices[0].Message
		s.Text, s.Finish = m.Content, c.Choices[0].FinishReason
		for _, tc := range m.ToolCalls {
			s.Calls = append(s.Calls, [3]string{tc.ID, tc.Function.Name, tc.Function.Arguments})
		}
	}
	return s
}

func fromCodec(r wiretest.Reply) summary {
	s := summary{ID: r.ID, Finish: r.RawFinish, Prompt: r.Usage.Input + r.Usage.CacheRead, Cached: r.Usage.CacheRead,
		Completion: r.Usage.Output, ReasoningTokens: r.Usage.Reasoning}
	for _, b := range r.Blocks {
		switch b.Kind {
		case kText:
			s.Text += b.Text
		case kTool:
			s.Calls = append(s.Calls, [3]string{b.ToolCallID, b.ToolName, b.Text})
		}
	}
	return s
}

func sdkClient(url string) openai.Client {
	return openai.NewClient(option.WithBaseURL(url+"/v1"), option.WithAPIKey("sk-test"), option.WithMaxRetries(0))
}

func TestOracleSDKParsesFake(t *testing.T) {
	length := wiretest.RichTurn
	length.Finish = "length"
	for _, turn := range []fakeprovider.Turn{wiretest.RichTurn, length, {Text: "plain \"quoted\" <b>&</b> \\ text", ChunkRunes: 3}} {
		for _, stream := range []bool{true, false} {
			fake := fakeprovider.New(turn, turn)
			srv := httptest.NewServer(fake)
			client := sdkClient(srv.URL)
			params := openai.ChatCompletionNewParams{Model: "gpt-test", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")}}
			var sdk openai.ChatCompletion
			if stream {
				params.StreamOptions = openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)}
				st := client.Chat.Completions.NewStreaming(t.Context(), params)
				var acc openai.ChatCompletionAccumulator
				for st.Next() {
					if !acc.AddChunk(st.Current()) {
						t.Fatalf("accumulator rejected chunk %s", st.Current().RawJSON())
					}
				}
				if err := st.Err(); err != nil {
					t.Fatalf("SDK stream: %v", err)
				}
				sdk = acc.ChatCompletion
			} else {
				c, err := client.Chat.Completions.New(t.Context(), params)
				if err != nil {
					t.Fatalf("SDK: %v", err)
				}
				sdk = *c
			}
			ours, err := wiretest.Do(t.Context(), New(), wiretest.Call(srv.URL, stream))
			srv.Close()
			if err != nil {
				t.Fatalf("codec: %v", err)
			}
			if diff := cmp.Diff(fromSDK(sdk), fromCodec(ours)); diff != "" {
				t.Errorf("stream=%v: SDK vs codec (-sdk +codec):\n%s", stream, diff)
			}
			if fromSDK(sdk).Text != turn.Text {
				t.Errorf("SDK text %q, want %q", fromSDK(sdk).Text, turn.Text)
			}
		}
	}
}

func TestOracleSDKErrors(t *testing.T) {
	t.Run("429", func(t *testing.T) {
		srv := httptest.NewServer(fakeprovider.New(fakeprovider.Turn{Fault: &fakeprovider.Fault{Kind: fakeprovider.FaultRateLimit}}))
		defer srv.Close()
		client := sdkClient(srv.URL)
		_, err := client.Chat.Completions.New(t.Context(), openai.ChatCompletionNewParams{Model: "m", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")}})
		var apiErr *openai.Error
		if !errors.As(err, &apiErr) || apiErr.StatusCode != 429 || apiErr.Code != "rate_limit_exceeded" || apiErr.Type != "requests" {
			t.Fatalf("SDK error = %#v", err)
		}
	})
	t.Run("mid-stream", func(t *testing.T) {
		turn := wiretest.RichTurn
		turn.Fault = &fakeprovider.Fault{Kind: fakeprovider.FaultMidStreamError, AfterChunks: 1}
		srv := httptest.NewServer(fakeprovider.New(turn))
		defer srv.Close()
		client := sdkClient(srv.URL)
		st := client.Chat.Completions.NewStreaming(t.Context(), openai.ChatCompletionNewParams{Model: "m", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")}})
		for st.Next() {
		}
		if st.Err() == nil {
			t.Fatal("SDK saw no error in the stream")
		}
	})
}

// TestOracleRequestParams decodes our request into the SDK's params and
// encodes it back: a field the SDK does not know, or a value of the wrong
// shape, changes the JSON. Known, deliberate differences are removed first:
// "stream" (the SDK sets it outside the params), null values (the SDK
// omits them; both mean absent), reasoning_content (an extension of
// compatible hosts, sent only to them), and tool_choice, whose named form
// the SDK's union decoder drops; it is checked against the SDK's own
// encoding instead.
func TestOracleRequestParams(t *testing.T) {
	for _, tt := range requestCases() {
		if tt.wantErr {
			continue
		}
		t.Run(tt.name, func(t *testing.T) {
			body, err := buildBody(tt.call())
			if err != nil {
				t.Fatal(err)
			}
			var p openai.ChatCompletionNewParams
			if err := json.Unmarshal(body, &p); err != nil {
				t.Fatalf("SDK params: %v\n%s", err, body)
			}
			again, err := json.Marshal(p)
			if err != nil {
				t.Fatal(err)
			}
			ours := wiretest.JSONValue(t, body).(map[string]any)
			tc := ours["tool_choice"]
			for _, k := range []string{"stream", "tool_choice"} {
				delete(ours, k)
			}
			for _, m := range ours["messages"].([]any) {
				delete(m.(map[string]any), "reasoning_content")
			}
			sdk := wiretest.JSONValue(t, again).(map[string]any)
			delete(sdk, "tool_choice")
			if diff := cmp.Diff(dropNulls(ours), sdk); diff != "" {
				t.Errorf("request changed through SDK params (-ours +sdk):\n%s", diff)
			}
			if named, ok := tc.(map[string]any); ok {
				want, _ := json.Marshal(openai.ChatCompletionToolChoiceOptionUnionParam{OfFunctionToolChoice: &openai.ChatCompletionNamedToolChoiceParam{
					Function: openai.ChatCompletionNamedToolChoiceFunctionParam{Name: named["function"].(map[string]any)["name"].(string)}}})
				if diff := cmp.Diff(wiretest.JSONValue(t, want), any(named)); diff != "" {
					t.Errorf("tool_choice (-sdk +ours):\n%s", diff)
				}
			}
		})
	}
}

func dropNulls(v any) any {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			if e == nil {
				delete(x, k)
			} else {
				x[k] = dropNulls(e)
			}
		}
	case []any:
		for i, e := range x {
			x[i] = dropNulls(e)
		}
	}
	return v
}
