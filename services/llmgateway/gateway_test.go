package llmgateway

import (
	"context"
	"errors"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/testing/protocmp"
	"google.golang.org/protobuf/types/known/durationpb"

	llmv1 "github.com/fabro-sh/fabro-go/gen/fabro/llm/v1"
	"github.com/fabro-sh/fabro-go/services/llmgateway/internal/codec"
)

const (
	kText   = llmv1.ContentBlockKind_CONTENT_BLOCK_KIND_TEXT
	kReason = llmv1.ContentBlockKind_CONTENT_BLOCK_KIND_REASONING
	kTool   = llmv1.ContentBlockKind_CONTENT_BLOCK_KIND_TOOL_CALL
	kOpaque = llmv1.ContentBlockKind_CONTENT_BLOCK_KIND_OPAQUE
)

func textPart(s string) *llmv1.ContentPart {
	return &llmv1.ContentPart{Part: &llmv1.ContentPart_Text{Text: &llmv1.TextPart{Text: s}}}
}
func toolPart(id, name, args string) *llmv1.ContentPart {
	return &llmv1.ContentPart{Part: &llmv1.ContentPart_ToolCall{ToolCall: &llmv1.ToolCall{Id: id, Name: name, Arguments: args}}}
}

// collect reads a stream to its end.
func collect(t *testing.T, st grpc.ServerStreamingClient[llmv1.StreamResponse]) ([]*llmv1.StreamResponse, error) {
	t.Helper()
	var evs []*llmv1.StreamResponse
	for {
		r, err := st.Recv()
		if errors.Is(err, io.EOF) {
			return evs, nil
		}
		if err != nil {
			return evs, err
		}
		evs = append(evs, r)
	}
}

func detailOf(t *testing.T, err error) *llmv1.ErrorDetail {
	t.Helper()
	for _, d := range status.Convert(err).Details() {
		if ed, ok := d.(*llmv1.ErrorDetail); ok {
			return ed
		}
	}
	t.Fatalf("status %v carries no ErrorDetail", err)
	return nil
}

func TestStreamAssembly(t *testing.T) {
	// Reasoning with a signature, text, then two parallel tool calls whose
	// argument fragments interleave; codec keys are sparse (7, 3, 10, 11).
	u := newUpstream(t, turn{
		header: map[string][]string{"X-Ratelimit-Limit-Requests": {"500"}, "X-Ratelimit-Remaining-Requests": {"499"}},
		events: []codec.Event{
			evStart("msg_1", "fake-1-wire"),
			evBlock(7, kReason), evReason(7, "think "), evReason(7, "hard"), evSig(7, "sig=="), evEnd(7),
			evBlock(3, kText), evText(3, "héllo "), evText(3, "😀"), evEnd(3),
			evTool(10, "call_a", "read"), evTool(11, "call_b", "grep"),
			evArgs(10, `{"path":`), evArgs(11, `{"q":"x"}`), evArgs(10, `"a.go"}`),
			evEnd(11), evEnd(10),
			evUsage(codec.Usage{Input: 1000, CacheRead: 2000, CacheWrite: 100}),
			evUsage(codec.Usage{Output: 500, Reasoning: 200}),
			evFinish(llmv1.FinishReason_FINISH_REASON_TOOL_CALLS, "tool_use"),
		},
	})
	client := dial(t, newGateway(t, u))
	st, err := client.Stream(t.Context(), &llmv1.StreamRequest{Request: userReq("f1", "hi")})
	if err != nil {
		t.Fatal(err)
	}
	evs, err := collect(t, st)
	if err != nil {
		t.Fatal(err)
	}

	reasoning := &llmv1.ContentPart{Part: &llmv1.ContentPart_Reasoning{Reasoning: &llmv1.ReasoningPart{Text: "think hard", Signature: "sig==", SignatureOrigin: "fake"}}}
	wantResp := &llmv1.Response{
		Id: "msg_1", ModelId: "fake-1", ProviderId: "fake",
		Parts: []*llmv1.ContentPart{
			reasoning, textPart("héllo 😀"),
			toolPart("call_a", "read", `{"path":"a.go"}`), toolPart("call_b", "grep", `{"q":"x"}`),
		},
		FinishReason: llmv1.FinishReason_FINISH_REASON_TOOL_CALLS, RawFinishReason: "tool_use",
		Usage: &llmv1.Usage{InputTokens: 1000, OutputTokens: 500, ReasoningTokens: 200, CacheReadTokens: 2000, CacheWriteTokens: 100},
		// 1000*3 + 500*15 + 2000*0.3 + 100*3.75 micros.
		Cost:     &llmv1.Cost{InputUsdMicros: 3000, OutputUsdMicros: 7500, CacheReadUsdMicros: 600, CacheWriteUsdMicros: 375, TotalUsdMicros: 11475, Source: llmv1.CostSource_COST_SOURCE_CATALOG},
		Attempts: 1,
	}
	ev := func(e any) *llmv1.StreamResponse {
		switch e := e.(type) {
		case *llmv1.Started:
			return &llmv1.StreamResponse{Event: &llmv1.StreamResponse_Started{Started: e}}
		case *llmv1.RateLimits:
			return &llmv1.StreamResponse{Event: &llmv1.StreamResponse_RateLimits{RateLimits: e}}
		case *llmv1.ContentBlockStart:
			return &llmv1.StreamResponse{Event: &llmv1.StreamResponse_ContentBlockStart{ContentBlockStart: e}}
		case *llmv1.ReasoningDelta:
			return &llmv1.StreamResponse{Event: &llmv1.StreamResponse_ReasoningDelta{ReasoningDelta: e}}
		case *llmv1.TextDelta:
			return &llmv1.StreamResponse{Event: &llmv1.StreamResponse_TextDelta{TextDelta: e}}
		case *llmv1.ToolCallDelta:
			return &llmv1.StreamResponse{Event: &llmv1.StreamResponse_ToolCallDelta{ToolCallDelta: e}}
		case *llmv1.ContentBlockEnd:
			return &llmv1.StreamResponse{Event: &llmv1.StreamResponse_ContentBlockEnd{ContentBlockEnd: e}}
		case *llmv1.Usage:
			return &llmv1.StreamResponse{Event: &llmv1.StreamResponse_Usage{Usage: e}}
		case *llmv1.Ended:
			return &llmv1.StreamResponse{Event: &llmv1.StreamResponse_Ended{Ended: e}}
		}
		panic("unknown event")
	}
	n := func(v int64) *int64 { return &v }
	want := []*llmv1.StreamResponse{
		ev(&llmv1.Started{Id: "msg_1", ModelId: "fake-1", ProviderId: "fake"}),
		ev(&llmv1.RateLimits{RequestsLimit: n(500), RequestsRemaining: n(499)}),
		ev(&llmv1.ContentBlockStart{Index: 0, Kind: kReason}),
		ev(&llmv1.ReasoningDelta{Index: 0, Text: "think "}),
		ev(&llmv1.ReasoningDelta{Index: 0, Text: "hard"}),
		ev(&llmv1.ContentBlockEnd{Index: 0, Part: reasoning}),
		ev(&llmv1.ContentBlockStart{Index: 1, Kind: kText}),
		ev(&llmv1.TextDelta{Index: 1, Text: "héllo "}),
		ev(&llmv1.TextDelta{Index: 1, Text: "😀"}),
		ev(&llmv1.ContentBlockEnd{Index: 1, Part: textPart("héllo 😀")}),
		ev(&llmv1.ContentBlockStart{Index: 2, Kind: kTool, ToolCallId: "call_a", ToolName: "read", ToolCallIndex: 0}),
		ev(&llmv1.ContentBlockStart{Index: 3, Kind: kTool, ToolCallId: "call_b", ToolName: "grep", ToolCallIndex: 1}),
		ev(&llmv1.ToolCallDelta{Index: 2, ToolCallIndex: 0, Id: "call_a", Name: "read", ArgumentsDelta: `{"path":`}),
		ev(&llmv1.ToolCallDelta{Index: 3, ToolCallIndex: 1, Id: "call_b", Name: "grep", ArgumentsDelta: `{"q":"x"}`}),
		ev(&llmv1.ToolCallDelta{Index: 2, ToolCallIndex: 0, Id: "call_a", Name: "read", ArgumentsDelta: `"a.go"}`}),
		ev(&llmv1.ContentBlockEnd{Index: 3, Part: toolPart("call_b", "grep", `{"q":"x"}`)}),
		ev(&llmv1.ContentBlockEnd{Index: 2, Part: toolPart("call_a", "read", `{"path":"a.go"}`)}),
		ev(&llmv1.Usage{InputTokens: 1000, CacheReadTokens: 2000, CacheWriteTokens: 100}),
		ev(&llmv1.Usage{InputTokens: 1000, OutputTokens: 500, ReasoningTokens: 200, CacheReadTokens: 2000, CacheWriteTokens: 100}),
		ev(&llmv1.Ended{Response: wantResp}),
	}
	if diff := cmp.Diff(want, evs, protocmp.Transform()); diff != "" {
		t.Errorf("events (-want +got):\n%s", diff)
	}
	reqs := u.requests()
	if len(reqs) != 1 || reqs[0].Model != "fake-1-wire" || !reqs[0].Stream || reqs[0].Auth != "Bearer sk-fake" {
		t.Errorf("upstream requests = %+v", reqs)
	}

	// Complete gives the same response from a non-streamed upstream call.
	u.enqueue(turn{events: u2events(wantResp)})
	got, err := client.Complete(t.Context(), &llmv1.CompleteRequest{Request: userReq("fake/fake-1", "hi")})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(textPart("ok"), got.GetResponse().GetParts()[0], protocmp.Transform()); diff != "" {
		t.Errorf("complete parts (-want +got):\n%s", diff)
	}
	if r := u.requests(); r[len(r)-1].Stream {
		t.Error("Complete asked the upstream for a stream")
	}
}

func u2events(*llmv1.Response) []codec.Event { return textTurn("ok").events }

func TestSuppressedToolCalls(t *testing.T) {
	for _, finish := range []llmv1.FinishReason{llmv1.FinishReason_FINISH_REASON_LENGTH, llmv1.FinishReason_FINISH_REASON_INCOMPLETE} {
		t.Run(finish.String(), func(t *testing.T) {
			u := newUpstream(t, turn{events: []codec.Event{
				evBlock(0, kText), evText(0, "let me"), evEnd(0),
				evTool(1, "call_1", "write"), evArgs(1, `{"path":"x`), // cut by the token limit, never closed
				evFinish(finish, "max_tokens"),
			}})
			resp, err := dial(t, newGateway(t, u)).Complete(t.Context(), &llmv1.CompleteRequest{Request: userReq("f1", "hi")})
			if err != nil {
				t.Fatal(err)
			}
			r := resp.GetResponse()
			if diff := cmp.Diff([]*llmv1.ContentPart{textPart("let me")}, r.GetParts(), protocmp.Transform()); diff != "" {
				t.Errorf("parts (-want +got):\n%s", diff)
			}
			want := []*llmv1.ToolCall{{Id: "call_1", Name: "write", Arguments: `{"path":"x`}}
			if diff := cmp.Diff(want, r.GetSuppressedToolCalls(), protocmp.Transform()); diff != "" {
				t.Errorf("suppressed (-want +got):\n%s", diff)
			}
			if r.GetFinishReason() != finish || len(r.GetWarnings()) != 1 {
				t.Errorf("finish %v warnings %q", r.GetFinishReason(), r.GetWarnings())
			}
		})
	}
}

func TestRetryAndFailover(t *testing.T) {
	type want struct {
		Code      codes.Code
		Provider  string // answering provider on success
		Attempts  int32
		Requests  []string // upstream models, in order
		Kind      llmv1.ErrorKind
		Failover  bool
		Retryable bool
	}
	tests := []struct {
		name    string
		req     *llmv1.Request
		turns   []turn
		want    want
		backoff []time.Duration // retryAfter seen by the backoff
	}{
		{
			name:    "429 then success honours Retry-After",
			turns:   []turn{{status: 429, retryAfter: "2"}, textTurn("ok")},
			want:    want{Code: codes.OK, Provider: "fake", Attempts: 2, Requests: []string{"fake-1-wire", "fake-1-wire"}},
			backoff: []time.Duration{2 * time.Second},
		},
		{
			name:    "three 503 then the configured fallback",
			turns:   []turn{{status: 503}, {status: 503}, {status: 529}, textTurn("ok")},
			want:    want{Code: codes.OK, Provider: "backup", Attempts: 1, Requests: []string{"fake-1-wire", "fake-1-wire", "fake-1-wire", "backup-1"}},
			backoff: []time.Duration{0, 0},
		},
		{
			name:  "request fallbacks replace the configured ones",
			req:   &llmv1.Request{Model: "f1", Fallbacks: []string{"nosuch/model", "fake/fake-2"}, Messages: []*llmv1.Message{userText("x")}},
			turns: []turn{{status: 401}, textTurn("ok")},
			want:  want{Code: codes.OK, Provider: "fake", Attempts: 1, Requests: []string{"fake-1-wire", "fake-2"}},
		},
		{
			name:  "disable_fallbacks",
			req:   &llmv1.Request{Model: "f1", DisableFallbacks: true, Messages: []*llmv1.Message{userText("x")}},
			turns: []turn{{status: 401}},
			want:  want{Code: codes.FailedPrecondition, Attempts: 1, Requests: []string{"fake-1-wire"}, Kind: llmv1.ErrorKind_ERROR_KIND_AUTHENTICATION, Failover: true},
		},
		{
			name:  "400 is neither retried nor failed over",
			turns: []turn{{status: 400}},
			want:  want{Code: codes.InvalidArgument, Attempts: 1, Requests: []string{"fake-1-wire"}, Kind: llmv1.ErrorKind_ERROR_KIND_INVALID_REQUEST},
		},
		{
			name:  "insufficient quota fails over without retrying",
			turns: []turn{{status: 429, code: "insufficient_quota"}, {status: 429, code: "insufficient_quota"}},
			want:  want{Code: codes.ResourceExhausted, Attempts: 2, Requests: []string{"fake-1-wire", "backup-1"}, Kind: llmv1.ErrorKind_ERROR_KIND_RATE_LIMIT, Failover: true},
		},
		{
			name:  "Retry-After beyond the cap skips to the fallback",
			turns: []turn{{status: 429, retryAfter: "3600"}, textTurn("ok")},
			want:  want{Code: codes.OK, Provider: "backup", Attempts: 1, Requests: []string{"fake-1-wire", "backup-1"}},
		},
		{
			name: "an error before visible output is retried",
			turns: []turn{
				{events: []codec.Event{evStart("r", "m"), evBlock(0, kText)}, midError: &codec.Error{Kind: llmv1.ErrorKind_ERROR_KIND_OVERLOADED, Message: "overloaded"}},
				{events: []codec.Event{evBlock(0, kText)}, cut: true},
				textTurn("ok"),
			},
			want:    want{Code: codes.OK, Provider: "fake", Attempts: 3, Requests: []string{"fake-1-wire", "fake-1-wire", "fake-1-wire"}},
			backoff: []time.Duration{0, 0},
		},
		{
			name:  "all routes exhausted",
			turns: []turn{{status: 500}, {status: 500}, {status: 500}, {status: 502}, {status: 502}, {status: 502}},
			want: want{Code: codes.Unavailable, Attempts: 6, Kind: llmv1.ErrorKind_ERROR_KIND_SERVER, Failover: true, Retryable: true,
				Requests: []string{"fake-1-wire", "fake-1-wire", "fake-1-wire", "backup-1", "backup-1", "backup-1"}},
			backoff: []time.Duration{0, 0, 0, 0},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			u := newUpstream(t, tt.turns...)
			var mu sync.Mutex
			var waits []time.Duration
			gw := newGateway(t, u, func(c *Config) {
				c.Backoff = func(_ int, ra time.Duration) time.Duration {
					mu.Lock()
					defer mu.Unlock()
					waits = append(waits, ra)
					return 0
				}
			})
			req := tt.req
			if req == nil {
				req = userReq("f1", "hi")
			}
			// Stream, so the pre-output retry rule is exercised.
			var got want
			st, err := dial(t, gw).Stream(t.Context(), &llmv1.StreamRequest{Request: req})
			if err != nil {
				t.Fatal(err)
			}
			all, err := collect(t, st)
			// A retry before visible output is reported as a Retrying event.
			var evs []*llmv1.StreamResponse
			retries := 0
			for _, ev := range all {
				if r := ev.GetRetrying(); r != nil {
					retries++
					if r.GetError() == nil || r.GetNextRoute() == "" || int(r.GetAttempt()) != retries {
						t.Errorf("retrying event %v", r)
					}
					continue
				}
				evs = append(evs, ev)
			}
			if n := len(u.requests()); retries != max(0, n-1) {
				t.Errorf("%d retrying events for %d upstream requests", retries, n)
			}
			got.Code = status.Code(err)
			if err != nil {
				d := detailOf(t, err)
				got.Attempts, got.Kind, got.Failover, got.Retryable = d.GetAttempts(), d.GetKind(), d.GetFailoverEligible(), d.GetRetryable()
			} else {
				end := evs[len(evs)-1].GetEnded().GetResponse()
				got.Provider, got.Attempts = end.GetProviderId(), end.GetAttempts()
				if s := evs[0].GetStarted(); s.GetProviderId() != end.GetProviderId() {
					t.Errorf("started names %s, ended %s", s.GetProviderId(), end.GetProviderId())
				}
			}
			for _, r := range u.requests() {
				got.Requests = append(got.Requests, r.Model)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tt.backoff, waits, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("backoff retry-after (-want +got):\n%s", diff)
			}
		})
	}
}

// TestFallbackWithoutCredentials checks that a fallback route whose
// provider has no credential is skipped: the caller gets the error of the
// route that was really tried, not a hint to configure another provider.
func TestFallbackWithoutCredentials(t *testing.T) {
	u := newUpstream(t, turn{status: 500}, turn{status: 500}, turn{status: 500})
	gw := newGateway(t, u, func(c *Config) {
		c.LookupEnv = func(k string) (string, bool) {
			if k == "FAKE_API_KEY" {
				return "sk-fake", true
			}
			return "", false
		}
	})
	_, err := dial(t, gw).Complete(t.Context(), &llmv1.CompleteRequest{Request: userReq("f1", "hi")})
	d := detailOf(t, err)
	if status.Code(err) != codes.Unavailable || d.GetKind() != llmv1.ErrorKind_ERROR_KIND_SERVER || len(d.GetMissingCredentials()) != 0 {
		t.Errorf("error = %v (kind %v, missing %v); want the primary route's Unavailable server error", err, d.GetKind(), d.GetMissingCredentials())
	}
	if n := len(u.requests()); n != 3 {
		t.Errorf("upstream saw %d requests, want the primary's 3", n)
	}
}

func TestFailureAfterOutput(t *testing.T) {
	base := []codec.Event{evStart("r9", "m"), evBlock(0, kText), evText(0, "par"), evText(0, "tial"), evEnd(0),
		evBlock(1, kText), evText(1, "more"), evUsage(codec.Usage{Input: 7, Output: 3})}
	tests := []struct {
		name string
		turn turn
		kind llmv1.ErrorKind
	}{
		{"in-stream error", turn{events: base, midError: &codec.Error{Kind: llmv1.ErrorKind_ERROR_KIND_OVERLOADED, Message: "overloaded_error", Code: "overloaded_error"}}, llmv1.ErrorKind_ERROR_KIND_OVERLOADED},
		{"connection cut", turn{events: base, cut: true}, llmv1.ErrorKind_ERROR_KIND_STREAM_DECODE},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			u := newUpstream(t, tt.turn, textTurn("must not be used"))
			st, err := dial(t, newGateway(t, u)).Stream(t.Context(), &llmv1.StreamRequest{Request: userReq("f1", "hi")})
			if err != nil {
				t.Fatal(err)
			}
			evs, err := collect(t, st)
			if err != nil {
				t.Fatalf("stream status %v; want a terminal error event", err)
			}
			last := evs[len(evs)-1].GetError()
			if last == nil {
				t.Fatalf("last event %v is not an error event", evs[len(evs)-1])
			}
			for _, e := range evs {
				if e.GetEnded() != nil {
					t.Error("a failed stream has an ended event")
				}
			}
			if last.GetError().GetKind() != tt.kind || last.GetError().GetProviderId() != "fake" {
				t.Errorf("error detail %v", last.GetError())
			}
			wantPartial := &llmv1.Response{Id: "r9", ModelId: "fake-1", ProviderId: "fake", Parts: []*llmv1.ContentPart{textPart("partial")},
				Usage: &llmv1.Usage{InputTokens: 7, OutputTokens: 3},
				Cost:  &llmv1.Cost{InputUsdMicros: 21, OutputUsdMicros: 45, TotalUsdMicros: 66, Source: llmv1.CostSource_COST_SOURCE_CATALOG}, Attempts: 1}
			if diff := cmp.Diff(wantPartial, last.GetPartialResponse(), protocmp.Transform()); diff != "" {
				t.Errorf("partial response (-want +got):\n%s", diff)
			}
			if n := len(u.requests()); n != 1 {
				t.Errorf("%d upstream requests; a failure after output must not be retried", n)
			}
		})
	}
}

func TestBadInput(t *testing.T) {
	u := newUpstream(t)
	client := dial(t, newGateway(t, u, func(c *Config) {
		c.LookupEnv = func(string) (string, bool) { return "", false }
	}))
	tool := func(params string) *llmv1.Request {
		r := userReq("f1", "x")
		r.Tools = []*llmv1.ToolDefinition{{Name: "read", Parameters: params}}
		return r
	}
	tests := []struct {
		name    string
		req     *llmv1.Request
		code    codes.Code
		check   func(*llmv1.ErrorDetail) bool
		message string // substring
	}{
		{"unknown model", userReq("fake/fake-l", "x"), codes.NotFound,
			func(d *llmv1.ErrorDetail) bool { return len(d.GetHints()) > 0 && d.GetHints()[0] == "fake/fake-1" }, "did you mean"},
		{"disabled provider", userReq("off/off-1", "x"), codes.FailedPrecondition, nil, "disabled"},
		{"empty model", userReq("", "x"), codes.InvalidArgument, nil, "model"},
		{"tool schema not JSON", tool(`{"type":`), codes.InvalidArgument, nil, "malformed parameters schema"},
		{"tool schema not an object", tool(`{"type":"string"}`), codes.InvalidArgument, nil, "object"},
		{"tool schema bad properties", tool(`{"type":"object","properties":[]}`), codes.InvalidArgument, nil, "properties"},
		{"missing credential", userReq("f1", "x"), codes.FailedPrecondition,
			func(d *llmv1.ErrorDetail) bool { return cmp.Equal(d.GetMissingCredentials(), []string{"FAKE_API_KEY"}) },
			"fabro secret set FAKE_API_KEY"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := client.Complete(t.Context(), &llmv1.CompleteRequest{Request: tt.req})
			if status.Code(err) != tt.code {
				t.Fatalf("code = %v (%v), want %v", status.Code(err), err, tt.code)
			}
			if !strings.Contains(status.Convert(err).Message(), tt.message) {
				t.Errorf("message %q lacks %q", status.Convert(err).Message(), tt.message)
			}
			if d := detailOf(t, err); tt.check != nil && !tt.check(d) {
				t.Errorf("detail %v", d)
			}
		})
	}
	if n := len(u.requests()); n != 0 {
		t.Errorf("bad input reached the upstream %d times", n)
	}
}

func TestCancelClosesUpstream(t *testing.T) {
	u := newUpstream(t, turn{events: []codec.Event{evBlock(0, kText), evText(0, "streaming...")}, hold: true})
	client := dial(t, newGateway(t, u))
	ctx, cancel := context.WithCancel(t.Context())
	st, err := client.Stream(ctx, &llmv1.StreamRequest{Request: userReq("f1", "hi")})
	if err != nil {
		t.Fatal(err)
	}
	for { // wait for the first delta: the upstream request is open
		r, err := st.Recv()
		if err != nil {
			t.Fatal(err)
		}
		if r.GetTextDelta() != nil {
			break
		}
	}
	cancel()
	select {
	case <-u.hangup:
	case <-time.After(10 * time.Second):
		t.Fatal("the upstream never saw the connection close")
	}
	if _, err := st.Recv(); status.Code(err) != codes.Canceled {
		t.Errorf("after cancel: %v", err)
	}
}

func TestCompleteObject(t *testing.T) {
	schema := `{"type":"object","properties":{"name":{"type":"string"},"n":{"type":"integer"},"tags":{"type":"array","items":{"enum":["a","b"]}}},"required":["name","n"],"additionalProperties":false}`
	tests := []struct {
		name  string
		reply string
		code  codes.Code
	}{
		{"valid", `{"name":"x","n":3,"tags":["a"]}`, codes.OK},
		{"fenced", "```json\n{\"name\":\"x\",\"n\":3}\n```", codes.OK},
		{"not json", `name: x`, codes.Unavailable},
		{"missing required", `{"name":"x"}`, codes.Unavailable},
		{"wrong type", `{"name":"x","n":1.5}`, codes.Unavailable},
		{"extra property", `{"name":"x","n":1,"z":0}`, codes.Unavailable},
		{"enum", `{"name":"x","n":1,"tags":["c"]}`, codes.Unavailable},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			u := newUpstream(t, textTurn(tt.reply))
			resp, err := dial(t, newGateway(t, u)).CompleteObject(t.Context(), &llmv1.CompleteObjectRequest{
				Request: userReq("f1", "give"), SchemaName: "thing", Schema: schema,
			})
			if status.Code(err) != tt.code {
				t.Fatalf("code %v (%v), want %v", status.Code(err), err, tt.code)
			}
			if err != nil {
				if d := detailOf(t, err); d.GetKind() != llmv1.ErrorKind_ERROR_KIND_RESPONSE_DECODE {
					t.Errorf("kind %v", d.GetKind())
				}
				return
			}
			if !strings.HasPrefix(resp.GetObject(), "{") || resp.GetResponse().GetCost() == nil {
				t.Errorf("response %v", resp)
			}
			if !strings.Contains(string(u.requests()[0].Request), `"JSON_SCHEMA"`) && !strings.Contains(string(u.requests()[0].Request), `RESPONSE_FORMAT_TYPE_JSON_SCHEMA`) {
				t.Errorf("upstream request lacks the schema format: %s", u.requests()[0].Request)
			}
		})
	}
	_, err := dial(t, newGateway(t, newUpstream(t))).CompleteObject(t.Context(), &llmv1.CompleteObjectRequest{
		Request: userReq("f1", "give"), SchemaName: "thing", Schema: `{"type":"object","required":"name"}`})
	if status.Code(err) != codes.InvalidArgument {
		t.Errorf("malformed schema: %v", err)
	}
}

// TestCompleteObjectComposedSchema: a reply is held to $ref, oneOf and
// allOf too (platform/jsonschema), and the error says where and why.
func TestCompleteObjectComposedSchema(t *testing.T) {
	schema := `{"type":"object","$defs":{"id":{"type":"string","pattern":"^[a-z]+$"}},
	  "properties":{"id":{"$ref":"#/$defs/id"},
	    "size":{"oneOf":[{"type":"integer","maximum":9},{"enum":["big"]}]},
	    "note":{"allOf":[{"type":"string"},{"maxLength":5}]}},
	  "required":["id"]}`
	tests := []struct {
		name, reply, want string // want: "" valid, else in the error
	}{
		{"valid", `{"id":"abc","size":3,"note":"hi"}`, ""},
		{"$ref", `{"id":"ABC"}`, `reply.id: "ABC" does not match the pattern ^[a-z]+$`},
		{"oneOf", `{"id":"a","size":"small"}`, "reply.size: matches none of oneOf"},
		{"allOf", `{"id":"a","note":"too long"}`, "reply.note: must be at most 5 characters long, got 8"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := dial(t, newGateway(t, newUpstream(t, textTurn(tt.reply)))).CompleteObject(t.Context(), &llmv1.CompleteObjectRequest{
				Request: userReq("f1", "give"), SchemaName: "thing", Schema: schema,
			})
			if tt.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if status.Code(err) != codes.Unavailable || !strings.Contains(status.Convert(err).Message(), tt.want) {
				t.Errorf("CompleteObject = %v, want UNAVAILABLE containing %q", err, tt.want)
			}
		})
	}
}

func TestProbe(t *testing.T) {
	t.Run("basic", func(t *testing.T) {
		u := newUpstream(t, textTurn("ready"))
		resp, err := dial(t, newGateway(t, u)).Probe(t.Context(), &llmv1.ProbeRequest{Model: "f1"})
		if err != nil {
			t.Fatal(err)
		}
		if !resp.GetOk() || resp.GetReply() != "ready" || resp.GetModelId() != "fake-1" || resp.GetLatency() == nil {
			t.Errorf("probe %v", resp)
		}
	})
	t.Run("deep", func(t *testing.T) {
		u := newUpstream(t)
		u.script = func(rec recorded) turn {
			var req llmv1.Request
			if err := protojson.Unmarshal(rec.Request, &req); err != nil {
				t.Error(err)
			}
			for _, m := range req.GetMessages() {
				for _, p := range m.GetParts() {
					if tr := p.GetToolResult(); tr != nil && tr.GetToolCallId() == "call_p" {
						return textTurn("The word is " + tr.GetContent()[0].GetText().GetText())
					}
				}
			}
			if req.GetToolChoice().GetMode() != llmv1.ToolChoiceMode_TOOL_CHOICE_MODE_REQUIRED || len(req.GetTools()) != 1 {
				t.Errorf("step one asks for no tool call: %v", &req)
			}
			return turn{events: []codec.Event{
				evTool(0, "call_p", "probe_lookup"), evArgs(0, `{"key":"word"}`), evEnd(0),
				evFinish(llmv1.FinishReason_FINISH_REASON_TOOL_CALLS, "tool_use"),
			}}
		}
		resp, err := dial(t, newGateway(t, u)).Probe(t.Context(), &llmv1.ProbeRequest{Model: "f1", Mode: llmv1.ProbeMode_PROBE_MODE_DEEP, Timeout: durationpb.New(20 * time.Second)})
		if err != nil {
			t.Fatal(err)
		}
		if !resp.GetOk() || !strings.HasPrefix(resp.GetReply(), "The word is kestrel") || len(u.requests()) != 2 {
			t.Errorf("probe %v after %d requests", resp, len(u.requests()))
		}
	})
	t.Run("deep without a tool call fails", func(t *testing.T) {
		u := newUpstream(t, textTurn("I will not"))
		resp, err := dial(t, newGateway(t, u)).Probe(t.Context(), &llmv1.ProbeRequest{Model: "f1", Mode: llmv1.ProbeMode_PROBE_MODE_DEEP})
		if err != nil {
			t.Fatal(err)
		}
		if resp.GetOk() || resp.GetError() == nil {
			t.Errorf("probe %v", resp)
		}
	})
	t.Run("upstream failure is reported, not returned", func(t *testing.T) {
		u := newUpstream(t, turn{status: 400})
		resp, err := dial(t, newGateway(t, u)).Probe(t.Context(), &llmv1.ProbeRequest{Model: "f1"})
		if err != nil {
			t.Fatal(err)
		}
		if resp.GetOk() || resp.GetError().GetKind() != llmv1.ErrorKind_ERROR_KIND_INVALID_REQUEST {
			t.Errorf("probe %v", resp)
		}
	})
	t.Run("unknown model is the status", func(t *testing.T) {
		_, err := dial(t, newGateway(t, newUpstream(t))).Probe(t.Context(), &llmv1.ProbeRequest{Model: "nope"})
		if status.Code(err) != codes.NotFound {
			t.Errorf("err %v", err)
		}
	})
}

// TestReasoningRedaction: only the codec's Redacted flag makes a reasoning
// part redacted; signed reasoning with no text (Anthropic thinking with
// display omitted, Gemini signature-only thoughts) stays signed reasoning,
// or it would replay as redacted_thinking and be rejected.
func TestReasoningRedaction(t *testing.T) {
	reasoning := func(text, sig string, redacted bool) *llmv1.ContentPart {
		return &llmv1.ContentPart{Part: &llmv1.ContentPart_Reasoning{Reasoning: &llmv1.ReasoningPart{Text: text, Signature: sig, SignatureOrigin: "fake", Redacted: redacted}}}
	}
	redactedStart := evBlock(0, kReason)
	redactedStart.Redacted = true
	redactedSig := evSig(0, "ENC==")
	redactedSig.Redacted = true
	tests := []struct {
		name   string
		events []codec.Event
		want   *llmv1.ContentPart
	}{
		{"signed, display omitted", []codec.Event{evBlock(0, kReason), evSig(0, "SIG=="), evEnd(0)}, reasoning("", "SIG==", false)},
		{"signed with text", []codec.Event{evBlock(0, kReason), evReason(0, "hm"), evSig(0, "SIG=="), evEnd(0)}, reasoning("hm", "SIG==", false)},
		{"redacted on block start", []codec.Event{redactedStart, evSig(0, "ENC=="), evEnd(0)}, reasoning("", "ENC==", true)},
		{"redacted on signature", []codec.Event{evBlock(0, kReason), redactedSig, evEnd(0)}, reasoning("", "ENC==", true)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			events := append(tt.events, evBlock(1, kText), evText(1, "ok"), evEnd(1), evFinish(llmv1.FinishReason_FINISH_REASON_STOP, "stop"))
			u := newUpstream(t, turn{events: events}, turn{events: events})
			client := dial(t, newGateway(t, u))
			st, err := client.Stream(t.Context(), &llmv1.StreamRequest{Request: userReq("f1", "hi")})
			if err != nil {
				t.Fatal(err)
			}
			evs, err := collect(t, st)
			if err != nil {
				t.Fatal(err)
			}
			var streamed *llmv1.ContentPart
			for _, e := range evs {
				if ce := e.GetContentBlockEnd(); ce != nil && ce.GetIndex() == 0 {
					streamed = ce.GetPart()
				}
			}
			unary, err := client.Complete(t.Context(), &llmv1.CompleteRequest{Request: userReq("f1", "hi")})
			if err != nil {
				t.Fatal(err)
			}
			for name, got := range map[string]*llmv1.ContentPart{
				"content_block_end": streamed,
				"ended":             evs[len(evs)-1].GetEnded().GetResponse().GetParts()[0],
				"complete":          unary.GetResponse().GetParts()[0],
			} {
				if diff := cmp.Diff(tt.want, got, protocmp.Transform()); diff != "" {
					t.Errorf("%s part (-want +got):\n%s", name, diff)
				}
			}
		})
	}
}

// TestSuppressedIndexes pins the stream's index rule for a LENGTH turn:
// indexes number the streamed blocks; Response.parts is the streamed parts
// in index order without the tool calls, which go, in index order, to
// suppressed_tool_calls.
func TestSuppressedIndexes(t *testing.T) {
	u := newUpstream(t, turn{events: []codec.Event{
		evBlock(0, kReason), evReason(0, "plan"), evEnd(0),
		evTool(1, "call_a", "read"), evArgs(1, `{"path":"a"}`), evEnd(1),
		evBlock(2, kText), evText(2, "and"), evEnd(2),
		evTool(3, "call_b", "write"), evArgs(3, `{"path":"b`), // cut by the limit
		evFinish(llmv1.FinishReason_FINISH_REASON_LENGTH, "max_tokens"),
	}})
	st, err := dial(t, newGateway(t, u)).Stream(t.Context(), &llmv1.StreamRequest{Request: userReq("f1", "hi")})
	if err != nil {
		t.Fatal(err)
	}
	evs, err := collect(t, st)
	if err != nil {
		t.Fatal(err)
	}
	byIndex := map[int32]*llmv1.ContentPart{}
	var starts []int32
	for _, e := range evs {
		if s := e.GetContentBlockStart(); s != nil {
			starts = append(starts, s.GetIndex())
		}
		if ce := e.GetContentBlockEnd(); ce != nil {
			byIndex[ce.GetIndex()] = ce.GetPart()
		}
	}
	if diff := cmp.Diff([]int32{0, 1, 2, 3}, starts); diff != "" {
		t.Fatalf("streamed indexes (-want +got):\n%s", diff)
	}
	var wantParts []*llmv1.ContentPart
	var wantSuppressed []*llmv1.ToolCall
	for i := range int32(len(byIndex)) {
		if tc := byIndex[i].GetToolCall(); tc != nil {
			wantSuppressed = append(wantSuppressed, tc)
			continue
		}
		wantParts = append(wantParts, byIndex[i])
	}
	resp := evs[len(evs)-1].GetEnded().GetResponse()
	if diff := cmp.Diff(wantParts, resp.GetParts(), protocmp.Transform()); diff != "" {
		t.Errorf("parts (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(wantSuppressed, resp.GetSuppressedToolCalls(), protocmp.Transform()); diff != "" {
		t.Errorf("suppressed (-want +got):\n%s", diff)
	}
	if len(wantParts) != 2 || len(wantSuppressed) != 2 {
		t.Errorf("streamed %d parts and %d tool calls, want 2 and 2", len(wantParts), len(wantSuppressed))
	}
}
