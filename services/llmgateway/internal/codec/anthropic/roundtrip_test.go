package anthropic

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go"
	"github.com/anthropics/anthropic-sdk-go/option"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/proto"

	llmv1 "github.com/fabro-sh/fabro-go/gen/fabro/llm/v1"
	"github.com/fabro-sh/fabro-go/services/llmgateway/fakeprovider"
	"github.com/fabro-sh/fabro-go/services/llmgateway/internal/codec"
)

var scripted = fakeprovider.Turn{
	Reasoning: "The user wants weather; call both tools — «parallel» ✓.",
	Text:      "Checking Paris 😀 and the time…",
	ToolCalls: []fakeprovider.ToolCall{
		{ID: "toolu_1", Name: "get_weather", Arguments: `{"city":"Paris","units":"c"}`},
		{ID: "toolu_2", Name: "get_time", Arguments: `{"tz":"Europe/Paris"}`},
	},
	Usage:      fakeprovider.Usage{Input: 120, Output: 80, CacheRead: 1000, CacheWrite: 50},
	ChunkRunes: 5,
}

// expected is what decoding the scripted turn must give.
func expected(t fakeprovider.Turn, model string) result {
	r := result{ID: "msg_fake_01", Model: model, Finish: llmv1.FinishReason_FINISH_REASON_TOOL_CALLS, RawFinish: "tool_use",
		Usage: codec.Usage{Input: int64(t.Usage.Input), Output: int64(t.Usage.Output), CacheRead: int64(t.Usage.CacheRead), CacheWrite: int64(t.Usage.CacheWrite)}}
	if t.Reasoning != "" {
		r.Blocks = append(r.Blocks, block{Kind: llmv1.ContentBlockKind_CONTENT_BLOCK_KIND_REASONING, Text: t.Reasoning, Signature: signatureOf(t.Reasoning), Ended: true})
	}
	if t.Text != "" {
		r.Blocks = append(r.Blocks, block{Kind: llmv1.ContentBlockKind_CONTENT_BLOCK_KIND_TEXT, Text: t.Text, Ended: true})
	}
	for _, tc := range t.ToolCalls {
		r.Blocks = append(r.Blocks, block{Kind: llmv1.ContentBlockKind_CONTENT_BLOCK_KIND_TOOL_CALL, ID: tc.ID, Name: tc.Name, Text: tc.Arguments, Ended: true})
	}
	return r
}

// signatureOf learns the fake's signature for a reasoning text by asking it.
func signatureOf(reasoning string) string {
	srv := httptest.NewServer(fakeprovider.New(fakeprovider.Turn{Reasoning: reasoning}))
	defer srv.Close()
	resp, err := http.Post(srv.URL+"/v1/messages", "application/json", strings.NewReader(`{"model":"m"}`))
	if err != nil {
		return err.Error()
	}
	defer resp.Body.Close()
	var m struct{ Content []struct{ Signature string } }
	json.NewDecoder(resp.Body).Decode(&m)
	if len(m.Content) == 0 {
		return ""
	}
	return m.Content[0].Signature
}

func userHi() *llmv1.Request {
	return &llmv1.Request{Messages: []*llmv1.Message{{Role: llmv1.Role_ROLE_USER, Parts: []*llmv1.ContentPart{text("hi")}}}, MaxOutputTokens: proto.Int32(1024)}
}

// call runs one attempt through the codec against srv, as the core does.
func call(t *testing.T, srv *httptest.Server, stream bool) (result, error) {
	t.Helper()
	c := New()
	req, err := c.NewRequest(t.Context(), &codec.Call{
		Provider: &llmv1.Provider{BaseUrl: srv.URL}, Model: "claude-test", Request: userHi(),
		Credentials: map[string]string{"ANTHROPIC_API_KEY": "sk-test"}, Stream: stream,
	})
	if err != nil {
		t.Fatal(err)
	}
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(resp.Body)
		return result{}, c.ParseError(resp, body)
	}
	if stream {
		return drain(c.NewDecoder(resp.Body))
	}
	var col collector
	err = c.DecodeResponse(resp.Body, col.Add)
	return col.Res, err
}

func TestRoundTrip(t *testing.T) {
	for _, stream := range []bool{true, false} {
		t.Run(map[bool]string{true: "stream", false: "unary"}[stream], func(t *testing.T) {
			fake := fakeprovider.New(scripted)
			srv := httptest.NewServer(fake)
			defer srv.Close()
			got, err := call(t, srv, stream)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(expected(scripted, "claude-test"), got); diff != "" {
				t.Errorf("result (-want +got):\n%s", diff)
			}
			reqs := fake.Requests()
			if len(reqs) != 1 || reqs[0].Protocol != "anthropic-messages" || reqs[0].Header.Get("x-api-key") != "sk-test" || reqs[0].Header.Get("anthropic-version") != APIVersion {
				t.Errorf("requests = %+v", reqs)
			}
		})
	}
}

func TestRoundTripFaults(t *testing.T) {
	tests := []struct {
		name       string
		fault      fakeprovider.Fault
		stream     bool
		kind       llmv1.ErrorKind
		status     int
		retryAfter time.Duration
		wantErr    error
	}{
		{name: "529 overloaded", fault: fakeprovider.Fault{Kind: fakeprovider.FaultOverloaded}, stream: true, kind: llmv1.ErrorKind_ERROR_KIND_OVERLOADED, status: 529},
		{name: "429 retry-after", fault: fakeprovider.Fault{Kind: fakeprovider.FaultRateLimit, RetryAfter: 3 * time.Second}, kind: llmv1.ErrorKind_ERROR_KIND_RATE_LIMIT, status: 429, retryAfter: 3 * time.Second},
		{name: "500", fault: fakeprovider.Fault{Kind: fakeprovider.FaultServerError}, kind: llmv1.ErrorKind_ERROR_KIND_SERVER, status: 500},
		{name: "401", fault: fakeprovider.Fault{Kind: fakeprovider.FaultAuth}, kind: llmv1.ErrorKind_ERROR_KIND_AUTHENTICATION, status: 401},
		{name: "mid-stream error", fault: fakeprovider.Fault{Kind: fakeprovider.FaultMidStreamError, AfterChunks: 4}, stream: true, kind: llmv1.ErrorKind_ERROR_KIND_OVERLOADED},
		{name: "malformed chunk", fault: fakeprovider.Fault{Kind: fakeprovider.FaultMalformedChunk, AfterChunks: 4}, stream: true, kind: llmv1.ErrorKind_ERROR_KIND_STREAM_DECODE},
		{name: "connection reset", fault: fakeprovider.Fault{Kind: fakeprovider.FaultConnectionReset, AfterChunks: 4}, stream: true, wantErr: io.ErrUnexpectedEOF},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			turn := scripted
			turn.Fault = &tt.fault
			srv := httptest.NewServer(fakeprovider.New(turn))
			defer srv.Close()
			_, err := call(t, srv, tt.stream)
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("err = %v, want %v", err, tt.wantErr)
				}
				return
			}
			var ce *codec.Error
			if !errors.As(err, &ce) {
				t.Fatalf("err = %v, want a *codec.Error", err)
			}
			if ce.Kind != tt.kind || ce.StatusCode != tt.status || ce.RetryAfter != tt.retryAfter {
				t.Errorf("error = %+v, want kind %v status %d retry %v", ce, tt.kind, tt.status, tt.retryAfter)
			}
		})
	}
}

// fromSDK converts the SDK's view of a message into a result, so the
// oracle and our decoder are compared on the same terms.
func fromSDK(m *anthropic.Message) result {
	r := result{ID: m.ID, Model: m.Model, RawFinish: string(m.StopReason), Finish: finishReason(string(m.StopReason)),
		Usage: codec.Usage{Input: m.Usage.InputTokens, Output: m.Usage.OutputTokens, CacheRead: m.Usage.CacheReadInputTokens, CacheWrite: m.Usage.CacheCreationInputTokens}}
	for _, c := range m.Content {
		switch c.Type {
		case "thinking":
			r.Blocks = append(r.Blocks, block{Kind: llmv1.ContentBlockKind_CONTENT_BLOCK_KIND_REASONING, Text: c.Thinking, Signature: c.Signature, Ended: true})
		case "text":
			r.Blocks = append(r.Blocks, block{Kind: llmv1.ContentBlockKind_CONTENT_BLOCK_KIND_TEXT, Text: c.Text, Ended: true})
		case "tool_use":
			r.Blocks = append(r.Blocks, block{Kind: llmv1.ContentBlockKind_CONTENT_BLOCK_KIND_TOOL_CALL, ID: c.ID, Name: c.Name, Text: string(c.Input), Ended: true})
		}
	}
	return r
}

// TestSDKOracle points anthropic-sdk-go at the fake: the SDK must parse
// what the fake sends (its stream accumulator included) into the scripted
// turn, and agree with our decoder.
func TestSDKOracle(t *testing.T) {
	fake := fakeprovider.New()
	fake.Script(func(fakeprovider.Request) fakeprovider.Turn { return scripted })
	srv := httptest.NewServer(fake)
	defer srv.Close()
	client := anthropic.NewClient(option.WithBaseURL(srv.URL), option.WithAPIKey("sk-test"), option.WithMaxRetries(0))
	params := anthropic.MessageNewParams{Model: "claude-test", MaxTokens: 1024,
		Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("hi"))}}
	want := expected(scripted, "claude-test")

	t.Run("unary", func(t *testing.T) {
		m, err := client.Messages.New(t.Context(), params)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(want, fromSDK(m)); diff != "" {
			t.Errorf("SDK message (-want +got):\n%s", diff)
		}
	})
	t.Run("stream", func(t *testing.T) {
		stream := client.Messages.NewStreaming(t.Context(), params)
		var m anthropic.Message
		for stream.Next() {
			if err := m.Accumulate(stream.Current()); err != nil {
				t.Fatal(err)
			}
		}
		if err := stream.Err(); err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(want, fromSDK(&m)); diff != "" {
			t.Errorf("SDK accumulated message (-want +got):\n%s", diff)
		}
	})
	t.Run("529 is the SDK's overloaded error", func(t *testing.T) {
		srv := httptest.NewServer(fakeprovider.New(fakeprovider.Turn{Fault: &fakeprovider.Fault{Kind: fakeprovider.FaultOverloaded}}))
		defer srv.Close()
		client := anthropic.NewClient(option.WithBaseURL(srv.URL), option.WithAPIKey("k"), option.WithMaxRetries(0))
		_, err := client.Messages.New(t.Context(), params)
		var apiErr *anthropic.Error
		if !errors.As(err, &apiErr) || apiErr.StatusCode != 529 || !strings.Contains(apiErr.RawJSON(), "overloaded_error") || apiErr.RequestID != "req_fake_01" {
			t.Fatalf("err = %v", err)
		}
	})
	t.Run("mid-stream error reaches the SDK", func(t *testing.T) {
		turn := scripted
		turn.Fault = &fakeprovider.Fault{Kind: fakeprovider.FaultMidStreamError, AfterChunks: 3}
		srv := httptest.NewServer(fakeprovider.New(turn))
		defer srv.Close()
		client := anthropic.NewClient(option.WithBaseURL(srv.URL), option.WithAPIKey("k"), option.WithMaxRetries(0))
		stream := client.Messages.NewStreaming(t.Context(), params)
		for stream.Next() {
		}
		if err := stream.Err(); err == nil || !strings.Contains(err.Error(), "overloaded_error") {
			t.Fatalf("stream err = %v, want the overloaded_error", err)
		}
	})
}

// TestRequestAgainstSDKParams decodes our request body into the SDK's
// MessageNewParams and marshals it back: the SDK drops keys it does not
// know, so any misnamed or misplaced field shows up as a difference.
func TestRequestAgainstSDKParams(t *testing.T) {
	req := &llmv1.Request{System: "sys", MaxOutputTokens: proto.Int32(20000), ReasoningEffort: llmv1.ReasoningEffort_REASONING_EFFORT_LOW,
		Tools:          []*llmv1.ToolDefinition{{Name: "get_weather", Description: "d", Parameters: `{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}`}},
		ToolChoice:     &llmv1.ToolChoice{Mode: llmv1.ToolChoiceMode_TOOL_CHOICE_MODE_AUTO},
		ResponseFormat: &llmv1.ResponseFormat{Type: llmv1.ResponseFormatType_RESPONSE_FORMAT_TYPE_JSON_SCHEMA, Schema: `{"type":"object","properties":{"a":{"type":"string"}},"required":["a"],"additionalProperties":false}`},
		Messages: []*llmv1.Message{
			{Role: llmv1.Role_ROLE_USER, Parts: []*llmv1.ContentPart{text("hi"), {Part: &llmv1.ContentPart_Image{Image: &llmv1.ImagePart{Source: &llmv1.ImagePart_Data{Data: []byte{1, 2}}, MediaType: "image/png"}}}}},
			{Role: llmv1.Role_ROLE_ASSISTANT, Parts: []*llmv1.ContentPart{
				{Part: &llmv1.ContentPart_Reasoning{Reasoning: &llmv1.ReasoningPart{Text: "t", Signature: "s"}}},
				{Part: &llmv1.ContentPart_Reasoning{Reasoning: &llmv1.ReasoningPart{Signature: "r", Redacted: true}}},
				text("ok"),
				{Part: &llmv1.ContentPart_ToolCall{ToolCall: &llmv1.ToolCall{Id: "toolu_1", Name: "get_weather", Arguments: `{"city":"Paris"}`}}},
			}},
			{Role: llmv1.Role_ROLE_TOOL, Parts: []*llmv1.ContentPart{{Part: &llmv1.ContentPart_ToolResult{ToolResult: &llmv1.ToolResult{ToolCallId: "toolu_1", IsError: true, Content: []*llmv1.ContentPart{text("boom")}}}}}},
		}}
	for _, stream := range []bool{false, true} {
		httpReq, err := New().NewRequest(t.Context(), &codec.Call{Provider: &llmv1.Provider{BaseUrl: "http://x"}, Model: "claude-test", Request: req, Stream: stream})
		if err != nil {
			t.Fatal(err)
		}
		ours, _ := io.ReadAll(httpReq.Body)
		var p anthropic.MessageNewParams
		if err := json.Unmarshal(ours, &p); err != nil {
			t.Fatalf("SDK cannot decode our request: %v\n%s", err, ours)
		}
		back, err := json.Marshal(p)
		if err != nil {
			t.Fatal(err)
		}
		var a, b map[string]any
		json.Unmarshal(ours, &a)
		json.Unmarshal(back, &b)
		delete(a, "stream") // a transport flag, not a MessageNewParams field
		if sys, ok := a["system"].(string); ok {
			// The API takes a string or text blocks; the SDK always writes blocks.
			a["system"] = []any{map[string]any{"type": "text", "text": sys}}
		}
		if diff := cmp.Diff(a, b); diff != "" {
			t.Errorf("request fields the SDK does not know (-ours +sdk):\n%s", diff)
		}
	}
}
