package openairesponses

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
	"github.com/openai/openai-go/v3/responses"

	"github.com/fabro-sh/fabro-go/services/llmgateway/fakeprovider"
	"github.com/fabro-sh/fabro-go/services/llmgateway/internal/codec/openaiwire/wiretest"
)

type summary struct {
	ID, Status, Text, Reasoning, Encrypted string
	Calls                                  [][3]string
	Input, Cached, Output, ReasoningTokens int64
}

func fromSDK(r responses.Response) summary {
	s := summary{ID: r.ID, Status: string(r.Status), Text: r.OutputText(),
		Input: r.Usage.InputTokens, Cached: r.Usage.InputTokensDetails.CachedTokens,
		Output: r.Usage.OutputTokens, ReasoningTokens: r.Usage.OutputTokensDetails.ReasoningTokens}
	if r.Status == "incomplete" {
		s.Status = r.IncompleteDetails.Reason
	}
	for _, o := range r.Output {
		switch o.Type {
		case "function_call":
			fc := o.AsFunctionCall()
			s.Calls = append(s.Calls, [3]string{fc.CallID, fc.Name, fc.Arguments})
		case "reasoning":
			rs := o.AsReasoning()
			s.Encrypted = rs.EncryptedContent
			for _, p := range rs.Summary {
				s.Reasoning += p.Text
			}
		}
	}
	return s
}

func fromCodec(t *testing.T, r wiretest.Reply) summary {
	s := summary{ID: r.ID, Status: r.RawFinish, Input: r.Usage.Input + r.Usage.CacheRead, Cached: r.Usage.CacheRead,
		Output: r.Usage.Output, ReasoningTokens: r.Usage.Reasoning}
	for _, b := range r.Blocks {
		switch b.Kind {
		case kText:
			s.Text += b.Text
		case kReasoning:
			s.Reasoning += b.Text
		case kTool:
			s.Calls = append(s.Calls, [3]string{b.ToolCallID, b.ToolName, b.Text})
		case kOpaque:
			var it struct {
				EncryptedContent string `json:"encrypted_content"`
			}
			if err := json.Unmarshal([]byte(b.Opaque), &it); err != nil {
				t.Fatalf("opaque block: %v", err)
			}
			s.Encrypted = it.EncryptedContent
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
			srv := httptest.NewServer(fakeprovider.New(turn, turn))
			client := sdkClient(srv.URL)
			params := responses.ResponseNewParams{Model: "gpt-test", Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("hi")}}
			var sdk responses.Response
			if stream {
				st := client.Responses.NewStreaming(t.Context(), params)
				var text, reasoning string
				terminal := false
				for st.Next() {
					ev := st.Current()
					switch ev.Type {
					case "response.output_text.delta":
						text += ev.AsResponseOutputTextDelta().Delta
					case "response.reasoning_summary_text.delta":
						reasoning += ev.AsResponseReasoningSummaryTextDelta().Delta
					case "response.completed":
						sdk, terminal = ev.AsResponseCompleted().Response, true
					case "response.incomplete":
						sdk, terminal = ev.AsResponseIncomplete().Response, true
					}
				}
				if err := st.Err(); err != nil {
					t.Fatalf("SDK stream: %v", err)
				}
				if !terminal || text != turn.Text || reasoning != turn.Reasoning {
					t.Fatalf("SDK stream: terminal %v, deltas %q / %q", terminal, text, reasoning)
				}
			} else {
				r, err := client.Responses.New(t.Context(), params)
				if err != nil {
					t.Fatalf("SDK: %v", err)
				}
				sdk = *r
			}
			ours, err := wiretest.Do(t.Context(), New(), wiretest.Call(srv.URL, stream))
			srv.Close()
			if err != nil {
				t.Fatalf("codec: %v", err)
			}
			if diff := cmp.Diff(fromSDK(sdk), fromCodec(t, ours)); diff != "" {
				t.Errorf("stream=%v: SDK vs codec (-sdk +codec):\n%s", stream, diff)
			}
		}
	}
}

func TestOracleSDKErrors(t *testing.T) {
	t.Run("429", func(t *testing.T) {
		srv := httptest.NewServer(fakeprovider.New(fakeprovider.Turn{Fault: &fakeprovider.Fault{Kind: fakeprovider.FaultRateLimit}}))
		defer srv.Close()
		client := sdkClient(srv.URL)
		_, err := client.Responses.New(t.Context(), responses.ResponseNewParams{Model: "m", Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("hi")}})
		var apiErr *openai.Error
		if !errors.As(err, &apiErr) || apiErr.StatusCode != 429 || apiErr.Code != "rate_limit_exceeded" {
			t.Fatalf("SDK error = %#v", err)
		}
	})
	t.Run("mid-stream", func(t *testing.T) {
		turn := wiretest.RichTurn
		turn.Fault = &fakeprovider.Fault{Kind: fakeprovider.FaultMidStreamError, AfterChunks: 1}
		srv := httptest.NewServer(fakeprovider.New(turn))
		defer srv.Close()
		client := sdkClient(srv.URL)
		st := client.Responses.NewStreaming(t.Context(), responses.ResponseNewParams{Model: "m", Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("hi")}})
		var sawError bool
		for st.Next() {
			if ev := st.Current(); ev.Type == "error" {
				e := ev.AsError()
				sawError = e.Code == "server_error" && e.Message != ""
			}
		}
		if !sawError && st.Err() == nil {
			t.Fatal("SDK saw no error event in the stream")
		}
	})
}

// TestOracleRequestParams decodes our request into the SDK's params and
// encodes it back: a field the SDK does not know, or a value of the wrong
// shape, changes the JSON. "stream" is set by the SDK outside the params;
// the named tool_choice is dropped by the SDK's union decoder, so it is
// checked against the SDK's own encoding instead.
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
			var p responses.ResponseNewParams
			if err := json.Unmarshal(body, &p); err != nil {
				t.Fatalf("SDK params: %v\n%s", err, body)
			}
			again, err := json.Marshal(p)
			if err != nil {
				t.Fatal(err)
			}
			ours := wiretest.JSONValue(t, body).(map[string]any)
			tc := ours["tool_choice"]
			delete(ours, "stream")
			delete(ours, "tool_choice")
			sdk := wiretest.JSONValue(t, again).(map[string]any)
			delete(sdk, "tool_choice")
			if diff := cmp.Diff(ours, sdk); diff != "" {
				t.Errorf("request changed through SDK params (-ours +sdk):\n%s", diff)
			}
			if named, ok := tc.(map[string]any); ok {
				want, _ := json.Marshal(responses.ResponseNewParamsToolChoiceUnion{OfFunctionTool: &responses.ToolChoiceFunctionParam{Name: named["name"].(string)}})
				if diff := cmp.Diff(wiretest.JSONValue(t, want), any(named)); diff != "" {
					t.Errorf("tool_choice (-sdk +ours):\n%s", diff)
				}
			}
		})
	}
}
