package compat

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	llmv1 "github.com/fabro-sh/fabro-go/gen/fabro/llm/v1"
	"github.com/fabro-sh/fabro-go/services/llmgateway/internal/envelope"
)

var update = flag.Bool("update", false, "rewrite the golden files")

// scripted is a Backend that replays fixed events, so the wire output is
// deterministic.
type scripted struct {
	events []*llmv1.StreamResponse
	err    error
	got    *llmv1.Request
}

func (s *scripted) Generate(_ context.Context, req *llmv1.Request, emit func(*llmv1.StreamResponse) error) (*llmv1.Response, error) {
	s.got = req
	if s.err != nil {
		return nil, s.err
	}
	for _, ev := range s.events {
		if emit == nil {
			continue
		}
		if err := emit(ev); err != nil {
			return nil, err
		}
	}
	last := s.events[len(s.events)-1]
	return last.GetEnded().GetResponse(), nil
}

func (s *scripted) ListModels(context.Context, *llmv1.ListModelsRequest) (*llmv1.ListModelsResponse, error) {
	return &llmv1.ListModelsResponse{}, nil
}

func (s *scripted) ResolveModel(_ context.Context, req *llmv1.ResolveModelRequest) (*llmv1.ResolveModelResponse, error) {
	if strings.HasPrefix(req.GetSelector(), "nope") {
		return nil, status.Error(codes.NotFound, `unknown model "`+req.GetSelector()+`"`)
	}
	return &llmv1.ResolveModelResponse{Canonical: "anthropic/claude-x", Model: &llmv1.Model{ModelId: "claude-x", ProviderId: "anthropic",
		Capabilities: &llmv1.Capabilities{Tools: true, Vision: req.GetSelector() != "textonly"}}}, nil
}

// turnEvents is one turn as the gateway streams it: reasoning with a
// signature, text, a tool call, usage, the end.
func turnEvents() []*llmv1.StreamResponse {
	ev := func(e any) *llmv1.StreamResponse {
		switch x := e.(type) {
		case *llmv1.Started:
			return &llmv1.StreamResponse{Event: &llmv1.StreamResponse_Started{Started: x}}
		case *llmv1.ContentBlockStart:
			return &llmv1.StreamResponse{Event: &llmv1.StreamResponse_ContentBlockStart{ContentBlockStart: x}}
		case *llmv1.TextDelta:
			return &llmv1.StreamResponse{Event: &llmv1.StreamResponse_TextDelta{TextDelta: x}}
		case *llmv1.ReasoningDelta:
			return &llmv1.StreamResponse{Event: &llmv1.StreamResponse_ReasoningDelta{ReasoningDelta: x}}
		case *llmv1.ToolCallDelta:
			return &llmv1.StreamResponse{Event: &llmv1.StreamResponse_ToolCallDelta{ToolCallDelta: x}}
		case *llmv1.ContentBlockEnd:
			return &llmv1.StreamResponse{Event: &llmv1.StreamResponse_ContentBlockEnd{ContentBlockEnd: x}}
		case *llmv1.Usage:
			return &llmv1.StreamResponse{Event: &llmv1.StreamResponse_Usage{Usage: x}}
		case *llmv1.Ended:
			return &llmv1.StreamResponse{Event: &llmv1.StreamResponse_Ended{Ended: x}}
		}
		panic("unknown event")
	}
	reasoning := &llmv1.ContentPart{Part: &llmv1.ContentPart_Reasoning{Reasoning: &llmv1.ReasoningPart{Text: "Look first.", Signature: "sig-1", SignatureOrigin: "anthropic"}}}
	text := &llmv1.ContentPart{Part: &llmv1.ContentPart_Text{Text: &llmv1.TextPart{Text: "Hello, wörld"}}}
	call := &llmv1.ContentPart{Part: &llmv1.ContentPart_ToolCall{ToolCall: &llmv1.ToolCall{Id: "toolu_1", Name: "read", Arguments: `{"path":"a.go"}`}}}
	usage := &llmv1.Usage{InputTokens: 90, OutputTokens: 20, ReasoningTokens: 5, CacheReadTokens: 10}
	return []*llmv1.StreamResponse{
		ev(&llmv1.Started{Id: "abc", ModelId: "claude-x", ProviderId: "anthropic"}),
		ev(&llmv1.Usage{InputTokens: 90, CacheReadTokens: 10}),
		ev(&llmv1.ContentBlockStart{Index: 0, Kind: llmv1.ContentBlockKind_CONTENT_BLOCK_KIND_REASONING}),
		ev(&llmv1.ReasoningDelta{Index: 0, Text: "Look first."}),
		ev(&llmv1.ContentBlockEnd{Index: 0, Part: reasoning}),
		ev(&llmv1.ContentBlockStart{Index: 1, Kind: llmv1.ContentBlockKind_CONTENT_BLOCK_KIND_TEXT}),
		ev(&llmv1.TextDelta{Index: 1, Text: "Hello, "}),
		ev(&llmv1.TextDelta{Index: 1, Text: "wörld"}),
		ev(&llmv1.ContentBlockEnd{Index: 1, Part: text}),
		ev(&llmv1.ContentBlockStart{Index: 2, Kind: llmv1.ContentBlockKind_CONTENT_BLOCK_KIND_TOOL_CALL, ToolCallId: "toolu_1", ToolName: "read"}),
		ev(&llmv1.ToolCallDelta{Index: 2, Id: "toolu_1", Name: "read", ArgumentsDelta: `{"path":`}),
		ev(&llmv1.ToolCallDelta{Index: 2, Id: "toolu_1", Name: "read", ArgumentsDelta: `"a.go"}`}),
		ev(&llmv1.ContentBlockEnd{Index: 2, Part: call}),
		ev(usage),
		ev(&llmv1.Ended{Response: &llmv1.Response{Id: "abc", ModelId: "claude-x", ProviderId: "anthropic", Parts: []*llmv1.ContentPart{reasoning, text, call},
			FinishReason: llmv1.FinishReason_FINISH_REASON_TOOL_CALLS, Usage: usage}}),
	}
}

// testSealer seals the test handlers' envelopes.
var testSealer = func() *envelope.Sealer {
	s, err := envelope.New(bytes.Repeat([]byte{7}, envelope.KeySize))
	if err != nil {
		panic(err)
	}
	return s
}()

// sealedRE matches an envelope; its sealed box (random nonce) is replaced
// in golden files, its route kept.
var sealedRE = regexp.MustCompile(`(fabro2\.[A-Za-z0-9_-]+\.)[A-Za-z0-9_-]+`)

// seal is the envelope the test handlers would hand out for rt on route.
func seal(route string, rt roundTrip) string {
	b, _ := json.Marshal(rt)
	return testSealer.Seal(route, "", b)
}

func newTestHandler(b Backend) http.Handler {
	h := New(b, nil, testSealer, slog.New(slog.DiscardHandler))
	h.now = func() time.Time { return time.Unix(1767225600, 0) }
	mux := http.NewServeMux()
	h.Register(mux)
	return mux
}

func do(t *testing.T, h http.Handler, method, path, body string, header ...string) (int, http.Header, string) {
	t.Helper()
	r := httptest.NewRequest(method, path, strings.NewReader(body))
	if strings.HasPrefix(path, "/anthropic/") {
		r.Header.Set("anthropic-version", "2023-06-01") // as the SDKs send it; a test may override it
	}
	for i := 0; i+1 < len(header); i += 2 {
		r.Header.Set(header[i], header[i+1])
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	b, _ := io.ReadAll(w.Result().Body)
	return w.Code, w.Result().Header, string(b)
}

// TestGoldenWire compares each endpoint's bytes, streamed and not, with
// golden files written from the published formats (go test -update
// rewrites them; review the diff against the API references).
func TestGoldenWire(t *testing.T) {
	cases := []struct{ name, path, body string }{
		{"openai_chat_stream", "/openai/v1/chat/completions", `{"model":"anthropic/claude-x","messages":[{"role":"user","content":"hi"}],"stream":true,"stream_options":{"include_usage":true}}`},
		{"openai_chat", "/openai/v1/chat/completions", `{"model":"anthropic/claude-x","messages":[{"role":"user","content":"hi"}]}`},
		{"openai_responses_stream", "/openai/v1/responses", `{"model":"anthropic/claude-x","input":"hi","stream":true}`},
		{"openai_responses", "/openai/v1/responses", `{"model":"anthropic/claude-x","input":"hi"}`},
		{"anthropic_messages_stream", "/anthropic/v1/messages", `{"model":"anthropic/claude-x","max_tokens":100,"messages":[{"role":"user","content":"hi"}],"stream":true}`},
		{"anthropic_messages", "/anthropic/v1/messages", `{"model":"anthropic/claude-x","max_tokens":100,"messages":[{"role":"user","content":"hi"}]}`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			h := newTestHandler(&scripted{events: turnEvents()})
			code, hdr, got := do(t, h, http.MethodPost, c.path, c.body)
			if code != http.StatusOK {
				t.Fatalf("status %d: %s", code, got)
			}
			wantCT := "application/json"
			if strings.HasSuffix(c.name, "_stream") {
				wantCT = "text/event-stream; charset=utf-8"
			}
			if ct := hdr.Get("Content-Type"); ct != wantCT {
				t.Errorf("content type %q, want %q", ct, wantCT)
			}
			// Every envelope opens to the reasoning's signature, for the
			// route that made it; its sealed bytes differ on each run.
			for _, env := range sealedRE.FindAllString(got, -1) {
				route, plain, err := testSealer.Open(env, "")
				if err != nil || route != "anthropic/claude-x" || string(plain) != `{"s":"sig-1"}` {
					t.Errorf("envelope %s opens to %q %s %v", env, route, plain, err)
				}
			}
			got = sealedRE.ReplaceAllString(got, "${1}SEALED")
			path := filepath.Join("testdata", c.name+".golden")
			if *update {
				if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(string(want), got); diff != "" {
				t.Errorf("wire output (-want +got):\n%s", diff)
			}
		})
	}
}

// TestBadInput: each API's own error body and status, naming the field,
// the model or the feature.
func TestBadInput(t *testing.T) {
	cases := []struct {
		name, path, body string
		backendErr       error
		wantCode         int
		wantBody         string
	}{
		{"chat not json", "/openai/v1/chat/completions", `{`, nil, 400, `"type":"invalid_request_error"`},
		{"chat unknown field", "/openai/v1/chat/completions", `{"model":"m","messages":[{"role":"user","content":"x"}],"bogus":1}`, nil, 400, `"param":"bogus","code":"unsupported_parameter"`},
		{"chat no model", "/openai/v1/chat/completions", `{"messages":[{"role":"user","content":"x"}]}`, nil, 400, `"param":"model"`},
		{"chat audio input", "/openai/v1/chat/completions", `{"model":"m","messages":[{"role":"user","content":[{"type":"input_audio","input_audio":{"data":"AA==","format":"wav"}}]}]}`, nil, 400, `audio input is not supported`},
		{"chat n=2", "/openai/v1/chat/completions", `{"model":"m","n":2,"messages":[{"role":"user","content":"x"}]}`, nil, 400, `"param":"n"`},
		{"chat image to text-only model", "/openai/v1/chat/completions", `{"model":"textonly","messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"https://x/y.png"}}]}]}`, nil, 400, `image input is not supported by model`},
		{"chat unknown model", "/openai/v1/chat/completions", `{"model":"nope/x","messages":[{"role":"user","content":"x"}]}`, nil, 404, `"code":"model_not_found"`},
		{"chat wrong type", "/openai/v1/chat/completions", `{"model":"m","messages":"x"}`, nil, 400, `"param":"messages"`},
		{"chat rate limited upstream", "/openai/v1/chat/completions", `{"model":"m","messages":[{"role":"user","content":"x"}]}`,
			status.Error(codes.ResourceExhausted, "slow down"), 429, `"type":"rate_limit_error"`},
		{"responses stored conversation", "/openai/v1/responses", `{"model":"m","input":"x","previous_response_id":"resp_1"}`, nil, 400, `"param":"previous_response_id"`},
		{"responses web search", "/openai/v1/responses", `{"model":"m","input":"x","tools":[{"type":"web_search"}]}`, nil, 400, `tool type \"web_search\" is not supported`},
		{"responses unknown model", "/openai/v1/responses", `{"model":"nope","input":"x"}`, nil, 404, `"code":"model_not_found"`},
		{"messages no max_tokens", "/anthropic/v1/messages", `{"model":"m","messages":[{"role":"user","content":"x"}]}`, nil, 400, `{"type":"error","error":{"type":"invalid_request_error","message":"max_tokens: Field required"}}`},
		{"messages document", "/anthropic/v1/messages", `{"model":"m","max_tokens":5,"messages":[{"role":"user","content":[{"type":"document","source":{"type":"text","data":"x"}}]}]}`, nil, 400, `document blocks are not supported`},
		{"messages server tool", "/anthropic/v1/messages", `{"model":"m","max_tokens":5,"messages":[{"role":"user","content":"x"}],"tools":[{"type":"web_search_20250305","name":"web_search"}]}`, nil, 400, `server tool \"web_search_20250305\"`},
		{"messages unknown model", "/anthropic/v1/messages", `{"model":"nope","max_tokens":5,"messages":[{"role":"user","content":"x"}]}`, nil, 404, `"type":"not_found_error"`},
		{"messages overloaded", "/anthropic/v1/messages", `{"model":"m","max_tokens":5,"messages":[{"role":"user","content":"x"}]}`,
			status.Error(codes.Unavailable, "busy"), 529, `"type":"overloaded_error"`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			h := newTestHandler(&scripted{events: turnEvents(), err: c.backendErr})
			code, _, body := do(t, h, http.MethodPost, c.path, c.body)
			if code != c.wantCode || !strings.Contains(body, c.wantBody) {
				t.Errorf("got %d %s, want %d containing %s", code, body, c.wantCode, c.wantBody)
			}
		})
	}
}

// TestRequestTranslation checks what each front hands the gateway.
func TestRequestTranslation(t *testing.T) {
	b := &scripted{events: turnEvents()}
	h := newTestHandler(b)
	code, _, body := do(t, h, http.MethodPost, "/openai/v1/chat/completions", `{"model":"m","stop":"END","reasoning_effort":"high",
		"max_completion_tokens":50,"response_format":{"type":"json_schema","json_schema":{"name":"out","schema":{"type":"object"}}},
		"tool_choice":{"type":"function","function":{"name":"read"}},
		"tools":[{"type":"function","function":{"name":"read","parameters":{"type":"object"}}}],
		"messages":[{"role":"user","content":[{"type":"text","text":"look"},{"type":"image_url","image_url":{"url":"data:image/png;base64,iVBO"}}]},
		{"role":"assistant","tool_calls":[{"id":"c1","type":"function","function":{"name":"read","arguments":"{}"}}]},
		{"role":"tool","tool_call_id":"c1","content":"ok"}]}`)
	if code != 200 {
		t.Fatalf("%d %s", code, body)
	}
	r := b.got
	if !cmp.Equal(r.GetStopSequences(), []string{"END"}) || r.GetReasoningEffort() != llmv1.ReasoningEffort_REASONING_EFFORT_HIGH ||
		r.GetMaxOutputTokens() != 50 || r.GetResponseFormat().GetName() != "out" || r.GetToolChoice().GetToolName() != "read" {
		t.Errorf("request %v", r)
	}
	if img := r.GetMessages()[0].GetParts()[1].GetImage(); img.GetMediaType() != "image/png" || len(img.GetData()) == 0 {
		t.Errorf("image %v", img)
	}
	if tr := r.GetMessages()[2].GetParts()[0].GetToolResult(); tr.GetName() != "read" || tr.GetToolCallId() != "c1" {
		t.Errorf("tool result %v", tr)
	}

	code, _, body = do(t, h, http.MethodPost, "/anthropic/v1/messages", `{"model":"m","max_tokens":64,"stop_sequences":["X"],
		"thinking":{"type":"enabled","budget_tokens":20000},"messages":[{"role":"user","content":"q"},
		{"role":"assistant","content":[{"type":"thinking","thinking":"t","signature":"`+seal("anthropic/claude-x", roundTrip{Signature: "g"})+`"},
		{"type":"tool_use","id":"u1","name":"read","input":{}}]},
		{"role":"user","content":[{"type":"tool_result","tool_use_id":"u1","content":"r"},{"type":"text","text":"go on"}]}]}`)
	if code != 200 {
		t.Fatalf("%d %s", code, body)
	}
	r = b.got
	rp := r.GetMessages()[1].GetParts()[0].GetReasoning()
	if rp.GetSignatureOrigin() != "anthropic" || rp.GetSignature() != "g" || rp.GetText() != "t" || r.GetReasoningEffort() != llmv1.ReasoningEffort_REASONING_EFFORT_HIGH ||
		r.GetMessages()[2].GetRole() != llmv1.Role_ROLE_TOOL || r.GetMessages()[3].GetRole() != llmv1.Role_ROLE_USER {
		t.Errorf("request %v", r)
	}
}

// TestStreamErrorAfterOutput: a failure after visible output ends each
// stream with its API's own error event.
func TestStreamErrorAfterOutput(t *testing.T) {
	evs := turnEvents()[:8]
	evs = append(evs, &llmv1.StreamResponse{Event: &llmv1.StreamResponse_Error{Error: &llmv1.StreamError{
		Error: &llmv1.ErrorDetail{Kind: llmv1.ErrorKind_ERROR_KIND_OVERLOADED, Message: "anthropic/claude-x: overloaded"}}}})
	for _, c := range []struct{ path, body, want string }{
		{"/openai/v1/chat/completions", `{"model":"m","messages":[{"role":"user","content":"x"}],"stream":true}`,
			"data: {\"error\":{\"message\":\"anthropic/claude-x: overloaded\",\"type\":\"server_error\",\"param\":null,\"code\":\"overloaded\"}}\n\n"},
		{"/openai/v1/responses", `{"model":"m","input":"x","stream":true}`, "event: response.failed\n"},
		{"/anthropic/v1/messages", `{"model":"m","max_tokens":5,"messages":[{"role":"user","content":"x"}],"stream":true}`,
			"event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"anthropic/claude-x: overloaded\"}}\n\n"},
	} {
		h := newTestHandler(&scripted{events: evs})
		_, _, body := do(t, h, http.MethodPost, c.path, c.body)
		if !strings.Contains(body, c.want) || strings.Contains(body, "[DONE]") || strings.Contains(body, "message_stop") {
			t.Errorf("%s: %s", c.path, body)
		}
	}
}

// TestEmptyReplyStream: a reply with no visible output (the gateway sends
// Ended without Started) is still a well-formed stream in every API.
func TestEmptyReplyStream(t *testing.T) {
	evs := []*llmv1.StreamResponse{{Event: &llmv1.StreamResponse_Ended{Ended: &llmv1.Ended{Response: &llmv1.Response{
		Id: "e1", ModelId: "claude-x", ProviderId: "anthropic", FinishReason: llmv1.FinishReason_FINISH_REASON_STOP, Usage: &llmv1.Usage{InputTokens: 3}}}}}}
	for _, c := range []struct{ path, body, want string }{
		{"/openai/v1/chat/completions", `{"model":"m","messages":[{"role":"user","content":"x"}],"stream":true}`, `"finish_reason":"stop"`},
		{"/openai/v1/responses", `{"model":"m","input":"x","stream":true}`, "event: response.completed"},
		{"/anthropic/v1/messages", `{"model":"m","max_tokens":5,"messages":[{"role":"user","content":"x"}],"stream":true}`, "event: message_stop"},
	} {
		h := newTestHandler(&scripted{events: evs})
		code, _, body := do(t, h, http.MethodPost, c.path, c.body)
		if code != 200 || !strings.Contains(body, c.want) || !strings.Contains(body, "e1") {
			t.Errorf("%s: %d %s", c.path, code, body)
		}
	}
}
