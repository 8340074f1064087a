package gemini

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/genai"
	"google.golang.org/protobuf/proto"

	llmv1 "github.com/fabro-sh/fabro-go/gen/fabro/llm/v1"
	"github.com/fabro-sh/fabro-go/services/llmgateway/fakeprovider"
	"github.com/fabro-sh/fabro-go/services/llmgateway/internal/codec"
)

var scripted = fakeprovider.Turn{
	Reasoning: "Two cities, one tool — call it twice «parallel».",
	Text:      "Checking Paris 😀 and Rome…",
	ToolCalls: []fakeprovider.ToolCall{
		{Name: "get_weather", Arguments: `{"city":"Paris"}`},
		{Name: "get_weather", Arguments: `{"city":"Rome"}`},
	},
	Usage:      fakeprovider.Usage{Input: 120, Output: 80, Reasoning: 30, CacheRead: 1000},
	ChunkRunes: 5,
}

// sigOf is the fake's signature for a reasoning text, read off a unary reply.
func sigOf(t *testing.T, reasoning string) string {
	srv := httptest.NewServer(fakeprovider.New(fakeprovider.Turn{Reasoning: reasoning, Text: "x"}))
	defer srv.Close()
	resp, err := http.Post(srv.URL+"/v1beta/models/m:generateContent", "application/json", bytes.NewReader([]byte(`{}`)))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var r struct {
		Candidates []struct {
			Content struct {
				Parts []struct{ ThoughtSignature string }
			}
		}
	}
	json.NewDecoder(resp.Body).Decode(&r)
	return r.Candidates[0].Content.Parts[1].ThoughtSignature
}

func expected(t *testing.T, turn fakeprovider.Turn) result {
	r := result{ID: "resp_fake_01", Model: "gemini-test", Finish: llmv1.FinishReason_FINISH_REASON_TOOL_CALLS, RawFinish: "STOP",
		Usage: codec.Usage{Input: int64(turn.Usage.Input), Output: int64(turn.Usage.Output), Reasoning: int64(turn.Usage.Reasoning), CacheRead: int64(turn.Usage.CacheRead)},
		Blocks: []block{
			{Kind: llmv1.ContentBlockKind_CONTENT_BLOCK_KIND_REASONING, Text: turn.Reasoning, Ended: true},
			{Kind: llmv1.ContentBlockKind_CONTENT_BLOCK_KIND_TEXT, Text: turn.Text, Ended: true},
		}}
	for i, tc := range turn.ToolCalls {
		b := block{Kind: llmv1.ContentBlockKind_CONTENT_BLOCK_KIND_TOOL_CALL, ID: SyntheticIDPrefix + "resp_fake_01_" + string(rune('0'+i)), Name: tc.Name, Text: tc.Arguments, Ended: true}
		if i == 0 {
			b.Signature = sigOf(t, turn.Reasoning)
		}
		r.Blocks = append(r.Blocks, b)
	}
	return r
}

func call(t *testing.T, srv *httptest.Server, stream bool) (result, error) {
	t.Helper()
	c := New()
	req, err := c.NewRequest(t.Context(), &codec.Call{
		Provider: &llmv1.Provider{BaseUrl: srv.URL + "/v1beta"}, Model: "gemini-test", Stream: stream,
		Request:     &llmv1.Request{Messages: []*llmv1.Message{{Role: llmv1.Role_ROLE_USER, Parts: []*llmv1.ContentPart{text("hi")}}}, MaxOutputTokens: proto.Int32(1024)},
		Credentials: map[string]string{"GEMINI_API_KEY": "AIza-test"},
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
			if diff := cmp.Diff(expected(t, scripted), got); diff != "" {
				t.Errorf("result (-want +got):\n%s", diff)
			}
			reqs := fake.Requests()
			if len(reqs) != 1 || reqs[0].Protocol != "gemini-generate" || reqs[0].Header.Get("x-goog-api-key") != "AIza-test" {
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
		{name: "429 RetryInfo", fault: fakeprovider.Fault{Kind: fakeprovider.FaultRateLimit, RetryAfter: 17 * time.Second}, stream: true, kind: llmv1.ErrorKind_ERROR_KIND_RATE_LIMIT, status: 429, retryAfter: 17 * time.Second},
		{name: "503 overloaded", fault: fakeprovider.Fault{Kind: fakeprovider.FaultOverloaded}, kind: llmv1.ErrorKind_ERROR_KIND_OVERLOADED, status: 503},
		{name: "500", fault: fakeprovider.Fault{Kind: fakeprovider.FaultServerError}, kind: llmv1.ErrorKind_ERROR_KIND_SERVER, status: 500},
		{name: "401", fault: fakeprovider.Fault{Kind: fakeprovider.FaultAuth}, kind: llmv1.ErrorKind_ERROR_KIND_AUTHENTICATION, status: 401},
		{name: "mid-stream error", fault: fakeprovider.Fault{Kind: fakeprovider.FaultMidStreamError, AfterChunks: 3}, stream: true, kind: llmv1.ErrorKind_ERROR_KIND_OVERLOADED, status: 503},
		{name: "malformed chunk", fault: fakeprovider.Fault{Kind: fakeprovider.FaultMalformedChunk, AfterChunks: 3}, stream: true, kind: llmv1.ErrorKind_ERROR_KIND_STREAM_DECODE},
		{name: "connection reset", fault: fakeprovider.Fault{Kind: fakeprovider.FaultConnectionReset, AfterChunks: 3}, stream: true, wantErr: io.ErrUnexpectedEOF},
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

// sdkView is what the genai SDK parsed, accumulated over a stream's chunks.
type sdkView struct {
	Reasoning, Text string
	Calls           []string // name + args JSON
	Signatures      []string // base64, as on the wire
	Finish          genai.FinishReason
	Usage           genai.GenerateContentResponseUsageMetadata
	ResponseID      string
}

func (v *sdkView) add(t *testing.T, r *genai.GenerateContentResponse) {
	v.ResponseID = r.ResponseID
	if r.UsageMetadata != nil {
		v.Usage = *r.UsageMetadata
	}
	for _, c := range r.Candidates {
		if c.FinishReason != "" {
			v.Finish = c.FinishReason
		}
		if c.Content == nil {
			continue
		}
		for _, p := range c.Content.Parts {
			if p.ThoughtSignature != nil {
				v.Signatures = append(v.Signatures, base64.StdEncoding.EncodeToString(p.ThoughtSignature))
			}
			switch {
			case p.FunctionCall != nil:
				args, err := json.Marshal(p.FunctionCall.Args)
				if err != nil {
					t.Fatal(err)
				}
				v.Calls = append(v.Calls, p.FunctionCall.Name+string(args))
			case p.Thought:
				v.Reasoning += p.Text
			default:
				v.Text += p.Text
			}
		}
	}
}

// TestSDKOracle points google.golang.org/genai at the fake, unary and
// streaming: the SDK must parse the fake's bytes into the scripted turn.
func TestSDKOracle(t *testing.T) {
	fake := fakeprovider.New()
	fake.Script(func(fakeprovider.Request) fakeprovider.Turn { return scripted })
	srv := httptest.NewServer(fake)
	defer srv.Close()
	client, err := genai.NewClient(t.Context(), &genai.ClientConfig{APIKey: "AIza-test", Backend: genai.BackendGeminiAPI,
		HTTPClient: srv.Client(), HTTPOptions: genai.HTTPOptions{BaseURL: srv.URL, APIVersion: "v1beta"}})
	if err != nil {
		t.Fatal(err)
	}
	want := sdkView{Reasoning: scripted.Reasoning, Text: scripted.Text,
		Calls: []string{`get_weather{"city":"Paris"}`, `get_weather{"city":"Rome"}`}, Signatures: []string{sigOf(t, scripted.Reasoning)},
		Finish: genai.FinishReasonStop, ResponseID: "resp_fake_01",
		Usage: genai.GenerateContentResponseUsageMetadata{PromptTokenCount: 1120, CachedContentTokenCount: 1000, CandidatesTokenCount: 50, ThoughtsTokenCount: 30, TotalTokenCount: 1200}}
	t.Run("unary", func(t *testing.T) {
		r, err := client.Models.GenerateContent(t.Context(), "gemini-test", genai.Text("hi"), nil)
		if err != nil {
			t.Fatal(err)
		}
		var got sdkView
		got.add(t, r)
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("SDK view (-want +got):\n%s", diff)
		}
	})
	t.Run("stream", func(t *testing.T) {
		var got sdkView
		for r, err := range client.Models.GenerateContentStream(t.Context(), "gemini-test", genai.Text("hi"), nil) {
			if err != nil {
				t.Fatal(err)
			}
			got.add(t, r)
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("SDK view (-want +got):\n%s", diff)
		}
	})
	t.Run("mid-stream error reaches the SDK", func(t *testing.T) {
		turn := scripted
		turn.Fault = &fakeprovider.Fault{Kind: fakeprovider.FaultMidStreamError, AfterChunks: 2}
		fake.Script(func(fakeprovider.Request) fakeprovider.Turn { return turn })
		var last error
		for _, err := range client.Models.GenerateContentStream(t.Context(), "gemini-test", genai.Text("hi"), nil) {
			if err != nil {
				last = err
				break
			}
		}
		var apiErr genai.APIError
		if !errors.As(last, &apiErr) || apiErr.Code != 503 || apiErr.Status != "UNAVAILABLE" {
			t.Fatalf("err = %#v, want the UNAVAILABLE APIError", last)
		}
	})
	t.Run("429 is the SDK's APIError with RetryInfo", func(t *testing.T) {
		fake.Script(func(fakeprovider.Request) fakeprovider.Turn {
			return fakeprovider.Turn{Fault: &fakeprovider.Fault{Kind: fakeprovider.FaultRateLimit, RetryAfter: 5 * time.Second}}
		})
		_, err := client.Models.GenerateContent(t.Context(), "gemini-test", genai.Text("hi"), nil)
		var apiErr genai.APIError
		if !errors.As(err, &apiErr) || apiErr.Code != 429 || apiErr.Status != "RESOURCE_EXHAUSTED" || len(apiErr.Details) != 2 || apiErr.Details[1]["retryDelay"] != "5s" {
			t.Fatalf("err = %#v", err)
		}
	})
}

// sdkRequest is the REST request body in the SDK's types.
type sdkRequest struct {
	Contents          []*genai.Content        `json:"contents"`
	SystemInstruction *genai.Content          `json:"systemInstruction,omitempty"`
	Tools             []*genai.Tool           `json:"tools,omitempty"`
	ToolConfig        *genai.ToolConfig       `json:"toolConfig,omitempty"`
	GenerationConfig  *genai.GenerationConfig `json:"generationConfig,omitempty"`
}

// TestRequestAgainstSDKTypes decodes our request body strictly into the
// SDK's types (an unknown or misnamed field fails) and marshals it back,
// which must give the same JSON.
func TestRequestAgainstSDKTypes(t *testing.T) {
	req := &llmv1.Request{System: "sys", MaxOutputTokens: proto.Int32(2000), Temperature: proto.Float64(0.3), ReasoningEffort: llmv1.ReasoningEffort_REASONING_EFFORT_LOW,
		Tools:          []*llmv1.ToolDefinition{{Name: "get_weather", Description: "d", Parameters: `{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}`}},
		ToolChoice:     &llmv1.ToolChoice{Mode: llmv1.ToolChoiceMode_TOOL_CHOICE_MODE_TOOL, ToolName: "get_weather"},
		ResponseFormat: &llmv1.ResponseFormat{Type: llmv1.ResponseFormatType_RESPONSE_FORMAT_TYPE_JSON_SCHEMA, Schema: `{"type":"object","properties":{"a":{"type":"string"}}}`},
		Messages: []*llmv1.Message{
			{Role: llmv1.Role_ROLE_USER, Parts: []*llmv1.ContentPart{text("hi"), {Part: &llmv1.ContentPart_Image{Image: &llmv1.ImagePart{Source: &llmv1.ImagePart_Data{Data: []byte{1, 2}}, MediaType: "image/png"}}},
				{Part: &llmv1.ContentPart_Image{Image: &llmv1.ImagePart{Source: &llmv1.ImagePart_Url{Url: "https://x/y.png"}, MediaType: "image/png"}}}}},
			{Role: llmv1.Role_ROLE_ASSISTANT, Parts: []*llmv1.ContentPart{
				{Part: &llmv1.ContentPart_Reasoning{Reasoning: &llmv1.ReasoningPart{Text: "t", Signature: "c2lnMQ=="}}},
				{Part: &llmv1.ContentPart_Text{Text: &llmv1.TextPart{Text: "ok", Signature: "c2lnMg=="}}},
				{Part: &llmv1.ContentPart_ToolCall{ToolCall: &llmv1.ToolCall{Id: "fc-1", Name: "get_weather", Arguments: `{"city":"Paris"}`, Signature: "c2lnMw=="}}},
			}},
			{Role: llmv1.Role_ROLE_TOOL, Parts: []*llmv1.ContentPart{{Part: &llmv1.ContentPart_ToolResult{ToolResult: &llmv1.ToolResult{ToolCallId: "fc-1", Content: []*llmv1.ContentPart{text("21C")}}}}}},
		}}
	for _, model := range []string{"gemini-2.5-flash", "gemini-3-pro"} {
		httpReq, err := New().NewRequest(t.Context(), &codec.Call{Provider: &llmv1.Provider{BaseUrl: "http://x"}, Model: model, Request: req})
		if err != nil {
			t.Fatal(err)
		}
		ours, _ := io.ReadAll(httpReq.Body)
		dec := json.NewDecoder(bytes.NewReader(ours))
		dec.DisallowUnknownFields()
		var p sdkRequest
		if err := dec.Decode(&p); err != nil {
			t.Fatalf("%s: the SDK's types reject our request: %v\n%s", model, err, ours)
		}
		back, err := json.Marshal(p)
		if err != nil {
			t.Fatal(err)
		}
		var a, b any
		json.Unmarshal(ours, &a)
		json.Unmarshal(back, &b)
		if diff := cmp.Diff(a, b); diff != "" {
			t.Errorf("%s: request (-ours +sdk):\n%s", model, diff)
		}
	}
}
