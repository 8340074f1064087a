package llmgateway

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go"
	anthropicoption "github.com/anthropics/anthropic-sdk-go/option"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"
	"github.com/openai/openai-go/v3/shared"

	"github.com/fabro-sh/fabro-go/platform/server"
	"github.com/fabro-sh/fabro-go/services/llmgateway/fakeprovider"
)

const compatToken = "fabro-test-token"

// fixedToken accepts one token: the stand-in for the server's token check.
type fixedToken string

func (f fixedToken) Authenticate(ctx context.Context, token string) (context.Context, error) {
	if token != string(f) {
		return nil, errors.New("unknown token")
	}
	return ctx, nil
}

// newCompatServer runs the shipped server stack (platform/server: gRPC with
// its interceptors, the REST gateway, the access log) with the gateway in
// front of one fake provider, and returns the REST base URL.
func newCompatServer(t testing.TB, opts ...gwOpt) (*fakeprovider.Server, string, *Service) {
	t.Helper()
	fp := fakeprovider.New()
	l, err := fakeprovider.Listen("127.0.0.1:0", fp)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	path := filepath.Join(t.TempDir(), "overlay.json")
	if err := os.WriteFile(path, fakeprovider.CatalogOverlay(l.URL), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := Config{
		CatalogOverlay: path,
		Backoff:        func(int, time.Duration) time.Duration { return 0 },
		LookupEnv: func(k string) (string, bool) {
			v, ok := e2eEnv[k]
			return v, ok
		},
	}
	for _, o := range opts {
		o(&cfg)
	}
	logger := slog.New(slog.DiscardHandler)
	gw, err := New(context.Background(), cfg, logger)
	if err != nil {
		t.Fatal(err)
	}
	return fp, serveCompat(t, gw, logger), gw
}

// serveCompat serves gw, its compatible endpoints taking compatToken, on
// the shipped server stack, and returns the REST base URL.
func serveCompat(t testing.TB, gw *Service, logger *slog.Logger) string {
	t.Helper()
	t.Cleanup(func() { _ = gw.Close() })
	gw.SetAuthenticator(fixedToken(compatToken))
	srv, err := server.Start(context.Background(), server.Config{GRPCAddr: "127.0.0.1:0", HTTPAddr: "127.0.0.1:0", NoAuth: true}, logger, gw)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Shutdown(context.Background()) })
	return "http://" + srv.HTTPAddr()
}

// The five codecs, one model each.
var codecModels = []string{
	"groq/llama-3.3-70b-versatile",      // openai-chat
	"openai/gpt-5",                      // openai-responses
	"anthropic/claude-sonnet-4.5",       // anthropic-messages
	"gemini/gemini-2.5-flash",           // gemini-generate
	"bedrock/bedrock-claude-sonnet-4.5", // bedrock-converse
}

var toolTurn = fakeprovider.Turn{
	Text:      "Let me look.",
	ToolCalls: []fakeprovider.ToolCall{{ID: "call_1", Name: "read_file", Arguments: `{"path":"a.go"}`}},
	Usage:     fakeprovider.Usage{Input: 100, Output: 20},
}

var answerTurn = fakeprovider.Turn{Text: "The file says hello.", Usage: fakeprovider.Usage{Input: 150, Output: 7}}

const toolOutput = "RESULT-42: package a"

// secondTurnCarried checks that the fake's last request carried the tool
// result and the model's tool call back.
func secondTurnCarried(t *testing.T, fp *fakeprovider.Server) {
	t.Helper()
	reqs := fp.Requests()
	body := string(reqs[len(reqs)-1].Body)
	if !strings.Contains(body, "RESULT-42") || !strings.Contains(body, "read_file") {
		t.Errorf("second turn did not carry the tool call and result: %s", body)
	}
}

var readFileParams = map[string]any{
	"type":       "object",
	"properties": map[string]any{"path": map[string]any{"type": "string"}},
	"required":   []string{"path"},
}

func TestCompatOpenAIChatSDK(t *testing.T) {
	fp, base, _ := newCompatServer(t)
	client := openai.NewClient(option.WithBaseURL(base+"/openai/v1/"), option.WithAPIKey(compatToken), option.WithMaxRetries(0))
	for _, model := range codecModels {
		for _, stream := range []bool{true, false} {
			name := model
			if stream {
				name += "/stream"
			}
			t.Run(name, func(t *testing.T) {
				fp.Enqueue(toolTurn, answerTurn)
				params := openai.ChatCompletionNewParams{
					Model:    model,
					Messages: []openai.ChatCompletionMessageParamUnion{openai.SystemMessage("Be brief."), openai.UserMessage("What is in a.go?")},
					Tools: []openai.ChatCompletionToolUnionParam{openai.ChatCompletionFunctionTool(shared.FunctionDefinitionParam{
						Name: "read_file", Description: openai.String("Read a file"), Parameters: readFileParams,
					})},
					ToolChoice:    openai.ChatCompletionToolChoiceOptionUnionParam{OfAuto: openai.String("auto")},
					StreamOptions: openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)},
				}
				complete := func() *openai.ChatCompletion {
					t.Helper()
					if !stream {
						p := params
						p.StreamOptions = openai.ChatCompletionStreamOptionsParam{}
						c, err := client.Chat.Completions.New(t.Context(), p)
						if err != nil {
							t.Fatal(err)
						}
						return c
					}
					s := client.Chat.Completions.NewStreaming(t.Context(), params)
					var acc openai.ChatCompletionAccumulator
					for s.Next() {
						acc.AddChunk(s.Current())
					}
					if err := s.Err(); err != nil {
						t.Fatal(err)
					}
					return &acc.ChatCompletion
				}
				c := complete()
				if len(c.Choices) != 1 {
					t.Fatalf("choices %+v", c.Choices)
				}
				msg := c.Choices[0].Message
				if c.Choices[0].FinishReason != "tool_calls" || len(msg.ToolCalls) != 1 ||
					msg.ToolCalls[0].Function.Name != "read_file" || msg.ToolCalls[0].Function.Arguments != `{"path":"a.go"}` || msg.ToolCalls[0].ID == "" {
					t.Fatalf("first turn: finish %q message %+v", c.Choices[0].FinishReason, msg)
				}
				if msg.Content != "Let me look." {
					t.Errorf("first turn text %q", msg.Content)
				}
				if c.Usage.PromptTokens != 100 || c.Usage.CompletionTokens != 20 || c.Usage.TotalTokens != 120 {
					t.Errorf("usage %+v", c.Usage)
				}
				if c.Model != model {
					t.Errorf("model %q", c.Model)
				}
				params.Messages = append(params.Messages, msg.ToParam(), openai.ToolMessage(toolOutput, msg.ToolCalls[0].ID))
				c = complete()
				if got := c.Choices[0].Message.Content; got != answerTurn.Text || c.Choices[0].FinishReason != "stop" {
					t.Errorf("second turn: %q finish %q", got, c.Choices[0].FinishReason)
				}
				secondTurnCarried(t, fp)
			})
		}
	}
}

func TestCompatOpenAIResponsesSDK(t *testing.T) {
	fp, base, _ := newCompatServer(t)
	client := openai.NewClient(option.WithBaseURL(base+"/openai/v1/"), option.WithAPIKey(compatToken), option.WithMaxRetries(0))
	for _, model := range codecModels {
		for _, stream := range []bool{true, false} {
			name := model
			if stream {
				name += "/stream"
			}
			t.Run(name, func(t *testing.T) {
				fp.Enqueue(toolTurn, answerTurn)
				input := responses.ResponseInputParam{responses.ResponseInputItemParamOfMessage("What is in a.go?", responses.EasyInputMessageRoleUser)}
				params := responses.ResponseNewParams{
					Model:        model,
					Instructions: openai.String("Be brief."),
					Tools:        []responses.ToolUnionParam{responses.ToolParamOfFunction("read_file", readFileParams, false)},
				}
				run := func() *responses.Response {
					t.Helper()
					params.Input = responses.ResponseNewParamsInputUnion{OfInputItemList: input}
					if !stream {
						r, err := client.Responses.New(t.Context(), params)
						if err != nil {
							t.Fatal(err)
						}
						return r
					}
					s := client.Responses.NewStreaming(t.Context(), params)
					var done *responses.Response
					var deltas strings.Builder
					for s.Next() {
						ev := s.Current()
						switch ev.Type {
						case "response.output_text.delta":
							deltas.WriteString(ev.Delta)
						case "response.completed":
							r := ev.Response
							done = &r
						}
					}
					if err := s.Err(); err != nil {
						t.Fatal(err)
					}
					if done == nil {
						t.Fatal("no response.completed event")
					}
					if deltas.String() != done.OutputText() {
						t.Errorf("deltas %q, completed text %q", deltas.String(), done.OutputText())
					}
					return done
				}
				r := run()
				var call *responses.ResponseFunctionToolCall
				for _, it := range r.Output {
					if it.Type == "function_call" {
						fc := it.AsFunctionCall()
						call = &fc
					}
				}
				if call == nil || call.Name != "read_file" || call.Arguments != `{"path":"a.go"}` || call.CallID == "" {
					t.Fatalf("first turn output %+v", r.Output)
				}
				if r.OutputText() != "Let me look." || r.Status != "completed" || r.Usage.InputTokens != 100 || r.Usage.OutputTokens != 20 {
					t.Errorf("first turn: text %q status %q usage %+v", r.OutputText(), r.Status, r.Usage)
				}
				for _, it := range r.Output {
					switch it.Type {
					case "function_call":
						fc := it.AsFunctionCall()
						input = append(input, responses.ResponseInputItemParamOfFunctionCall(fc.Arguments, fc.CallID, fc.Name))
					case "message":
						input = append(input, responses.ResponseInputItemParamOfOutputMessage(it.AsMessage().ToParam().Content, it.ID, responses.ResponseOutputMessageStatusCompleted))
					}
				}
				out := responses.ResponseInputItemParamOfFunctionCallOutput(toolOutput)
				out.OfFunctionCallOutput.CallID = openai.String(call.CallID)
				input = append(input, out)
				r = run()
				if r.OutputText() != answerTurn.Text {
					t.Errorf("second turn: %q", r.OutputText())
				}
				secondTurnCarried(t, fp)
			})
		}
	}
}

func TestCompatAnthropicSDK(t *testing.T) {
	fp, base, _ := newCompatServer(t)
	client := anthropic.NewClient(anthropicoption.WithBaseURL(base+"/anthropic/"), anthropicoption.WithAPIKey(compatToken), anthropicoption.WithMaxRetries(0))
	for _, model := range codecModels {
		for _, stream := range []bool{true, false} {
			name := model
			if stream {
				name += "/stream"
			}
			t.Run(name, func(t *testing.T) {
				fp.Enqueue(toolTurn, answerTurn)
				params := anthropic.MessageNewParams{
					Model:     model,
					MaxTokens: 1024,
					System:    []anthropic.TextBlockParam{{Text: "Be brief."}},
					Messages:  []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("What is in a.go?"))},
					Tools: []anthropic.ToolUnionParam{{OfTool: &anthropic.ToolParam{
						Name: "read_file", Description: anthropic.String("Read a file"),
						InputSchema: anthropic.ToolInputSchemaParam{Properties: readFileParams["properties"], Required: []string{"path"}},
					}}},
					ToolChoice: anthropic.ToolChoiceUnionParam{OfAuto: &anthropic.ToolChoiceAutoParam{}},
				}
				run := func() *anthropic.Message {
					t.Helper()
					if !stream {
						m, err := client.Messages.New(t.Context(), params)
						if err != nil {
							t.Fatal(err)
						}
						return m
					}
					s := client.Messages.NewStreaming(t.Context(), params)
					var m anthropic.Message
					for s.Next() {
						if err := m.Accumulate(s.Current()); err != nil {
							t.Fatal(err)
						}
					}
					if err := s.Err(); err != nil {
						t.Fatal(err)
					}
					return &m
				}
				m := run()
				var text string
				var use *anthropic.ToolUseBlock
				for _, b := range m.Content {
					switch v := b.AsAny().(type) {
					case anthropic.TextBlock:
						text += v.Text
					case anthropic.ToolUseBlock:
						use = &v
					}
				}
				if m.StopReason != anthropic.StopReasonToolUse || use == nil || use.Name != "read_file" || string(use.Input) != `{"path":"a.go"}` || use.ID == "" {
					t.Fatalf("first turn: stop %q content %+v", m.StopReason, m.Content)
				}
				if text != "Let me look." || m.Usage.InputTokens != 100 || m.Usage.OutputTokens != 20 || m.Model != model {
					t.Errorf("first turn: text %q usage %+v model %q", text, m.Usage, m.Model)
				}
				params.Messages = append(params.Messages, m.ToParam(),
					anthropic.NewUserMessage(anthropic.NewToolResultBlock(use.ID, toolOutput, false)))
				m = run()
				if len(m.Content) != 1 || m.Content[0].Text != answerTurn.Text || m.StopReason != anthropic.StopReasonEndTurn {
					t.Errorf("second turn: stop %q content %+v", m.StopReason, m.Content)
				}
				secondTurnCarried(t, fp)
			})
		}
	}
}

// TestCompatAuth: a missing or wrong key gets each API's own 401.
func TestCompatAuth(t *testing.T) {
	_, base, _ := newCompatServer(t)
	for _, key := range []string{"", "wrong"} {
		oc := openai.NewClient(option.WithBaseURL(base+"/openai/v1/"), option.WithAPIKey(key), option.WithMaxRetries(0))
		_, err := oc.Models.List(t.Context())
		var oerr *openai.Error
		if !errors.As(err, &oerr) || oerr.StatusCode != http.StatusUnauthorized || oerr.Type != "invalid_request_error" {
			t.Errorf("openai key %q: %v", key, err)
		}
		if key == "" { // the SDK refuses to send without a key: plain HTTP
			resp, err := http.Get(base + "/anthropic/v1/models")
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusUnauthorized || string(body) != `{"type":"error","error":{"type":"authentication_error","message":"x-api-key header is required"}}` {
				t.Errorf("anthropic without key: %d %s", resp.StatusCode, body)
			}
			continue
		}
		ac := anthropic.NewClient(anthropicoption.WithBaseURL(base+"/anthropic/"), anthropicoption.WithAPIKey(key), anthropicoption.WithMaxRetries(0))
		_, err = ac.Models.List(t.Context(), anthropic.ModelListParams{})
		var aerr *anthropic.Error
		if !errors.As(err, &aerr) || aerr.StatusCode != http.StatusUnauthorized || !strings.Contains(aerr.RawJSON(), `"authentication_error"`) {
			t.Errorf("anthropic key %q: %v", key, err)
		}
	}
}

// TestCompatModels: both lists in their API's shape, with every catalog
// model, paged for Anthropic.
func TestCompatModels(t *testing.T) {
	_, base, gw := newCompatServer(t)
	want, err := gw.ListModels(t.Context(), nil)
	if err != nil {
		t.Fatal(err)
	}
	oc := openai.NewClient(option.WithBaseURL(base+"/openai/v1/"), option.WithAPIKey(compatToken), option.WithMaxRetries(0))
	var ids []string
	iter := oc.Models.ListAutoPaging(t.Context())
	for iter.Next() {
		ids = append(ids, iter.Current().ID)
	}
	if err := iter.Err(); err != nil {
		t.Fatal(err)
	}
	if len(ids) != len(want.GetModels()) || ids[0] != want.GetModels()[0].GetProviderId()+"/"+want.GetModels()[0].GetModelId() {
		t.Errorf("openai models: %d, want %d (%v)", len(ids), len(want.GetModels()), ids)
	}
	m, err := oc.Models.Get(t.Context(), "sonnet")
	if err != nil || m.ID != "anthropic/claude-sonnet-4.5" || m.OwnedBy != "anthropic" {
		t.Errorf("openai get: %+v %v", m, err)
	}

	ac := anthropic.NewClient(anthropicoption.WithBaseURL(base+"/anthropic/"), anthropicoption.WithAPIKey(compatToken), anthropicoption.WithMaxRetries(0))
	var aids []string
	aiter := ac.Models.ListAutoPaging(t.Context(), anthropic.ModelListParams{Limit: anthropic.Int(7)})
	for aiter.Next() {
		aids = append(aids, aiter.Current().ID)
	}
	if err := aiter.Err(); err != nil {
		t.Fatal(err)
	}
	if strings.Join(aids, ",") != strings.Join(ids, ",") {
		t.Errorf("anthropic paged models %v, want %v", aids, ids)
	}
	info, err := ac.Models.Get(t.Context(), "gemini/gemini-2.5-flash", anthropic.ModelGetParams{})
	if err != nil || info.ID != "gemini/gemini-2.5-flash" || info.DisplayName == "" {
		t.Errorf("anthropic get: %+v %v", info, err)
	}
	_, err = ac.Models.Get(t.Context(), "nope/nope", anthropic.ModelGetParams{})
	var aerr *anthropic.Error
	if !errors.As(err, &aerr) || aerr.StatusCode != http.StatusNotFound {
		t.Errorf("anthropic unknown model: %v", err)
	}
}

// TestCompatWithoutAuthenticatorRefuses: an embedder that never sets an
// authenticator gets endpoints that refuse every key, not open ones.
func TestCompatWithoutAuthenticatorRefuses(t *testing.T) {
	gw, err := New(t.Context(), Config{LookupEnv: func(string) (string, bool) { return "", false }}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = gw.Close() })
	mux := http.NewServeMux()
	gw.MountHTTP(mux)
	for _, r := range []*http.Request{
		httptest.NewRequest(http.MethodGet, "/openai/v1/models", nil),
		httptest.NewRequest(http.MethodGet, "/anthropic/v1/models", nil),
	} {
		r.Header.Set("Authorization", "Bearer anything")
		r.Header.Set("X-Api-Key", "anything")
		w := httptest.NewRecorder()
		mux.ServeHTTP(w, r)
		if w.Code != http.StatusUnauthorized {
			t.Errorf("%s without an authenticator = %d %s; want 401", r.URL.Path, w.Code, w.Body)
		}
	}
}
