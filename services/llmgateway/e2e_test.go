package llmgateway

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/testing/protocmp"

	llmv1 "github.com/fabro-sh/fabro-go/gen/fabro/llm/v1"
	"github.com/fabro-sh/fabro-go/services/llmgateway/fakeprovider"
)

var e2eEnv = map[string]string{
	"ANTHROPIC_API_KEY": "sk-ant", "OPENAI_API_KEY": "sk-oai", "GEMINI_API_KEY": "g-key",
	"AWS_BEARER_TOKEN_BEDROCK": "bedrock-key", "GROQ_API_KEY": "gsk",
}

// newE2E runs the gateway with the built-in codecs and catalog, every
// provider pointed at one fake provider.
func newE2E(t testing.TB, opts ...gwOpt) (*fakeprovider.Server, llmv1.LLMGatewayServiceClient, *Service) {
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
		LookupEnv: func(k string) (string, bool) {
			v, ok := e2eEnv[k]
			return v, ok
		},
	}
	for _, o := range opts {
		o(&cfg)
	}
	gw, err := New(context.Background(), cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = gw.Close() })
	return fp, dial(t, gw), gw
}

// TestEndToEndCodecs streams one scripted turn through each landed codec
// and its fake renderer.
func TestEndToEndCodecs(t *testing.T) {
	fp, client, _ := newE2E(t)
	turn := fakeprovider.Turn{
		Text:      "Hello, wörld",
		ToolCalls: []fakeprovider.ToolCall{{ID: "call_1", Name: "read", Arguments: `{"path":"a.go"}`}, {ID: "call_2", Name: "grep", Arguments: `{"q":"x"}`}},
		Usage:     fakeprovider.Usage{Input: 100, Output: 20},
	}
	for _, model := range []string{"groq/llama-3.3-70b-versatile", "openai/gpt-5", "anthropic/claude-sonnet-4.5", "gemini/gemini-2.5-flash", "bedrock/bedrock-claude-sonnet-4.5"} {
		for _, stream := range []bool{true, false} {
			name := model
			if stream {
				name += "/stream"
			}
			t.Run(name, func(t *testing.T) {
				fp.Enqueue(turn)
				req := userReq(model, "hi")
				req.DisableFallbacks = true
				var resp *llmv1.Response
				if stream {
					st, err := client.Stream(t.Context(), &llmv1.StreamRequest{Request: req})
					if err != nil {
						t.Fatal(err)
					}
					evs, err := collect(t, st)
					if err != nil {
						t.Fatal(err)
					}
					resp = evs[len(evs)-1].GetEnded().GetResponse()
				} else {
					r, err := client.Complete(t.Context(), &llmv1.CompleteRequest{Request: req})
					if err != nil {
						t.Fatal(err)
					}
					resp = r.GetResponse()
				}
				if resp == nil {
					t.Fatal("no ended response")
				}
				var text string
				var calls []string
				for _, p := range resp.GetParts() {
					text += p.GetText().GetText()
					if tc := p.GetToolCall(); tc != nil {
						calls = append(calls, tc.GetName()+tc.GetArguments())
					}
				}
				if text != turn.Text || !cmp.Equal(calls, []string{`read{"path":"a.go"}`, `grep{"q":"x"}`}) {
					t.Errorf("text %q calls %q", text, calls)
				}
				if resp.GetFinishReason() != llmv1.FinishReason_FINISH_REASON_TOOL_CALLS {
					t.Errorf("finish %v", resp.GetFinishReason())
				}
				if diff := cmp.Diff(&llmv1.Usage{InputTokens: 100, OutputTokens: 20}, resp.GetUsage(), protocmp.Transform(), protocmp.IgnoreFields(&llmv1.Usage{}, "cache_read_tokens", "cache_write_tokens")); diff != "" {
					t.Errorf("usage (-want +got):\n%s", diff)
				}
			})
		}
	}
}

// TestEndToEndFaults checks the fake's injected faults through a real codec.
func TestEndToEndFaults(t *testing.T) {
	fp, client, _ := newE2E(t)
	req := userReq("anthropic/claude-sonnet-4.5", "hi")
	req.DisableFallbacks = true

	// Overloaded (529) then success: retried.
	fp.Enqueue(fakeprovider.Turn{Fault: &fakeprovider.Fault{Kind: fakeprovider.FaultOverloaded}}, fakeprovider.Turn{Text: "ok"})
	gwResp, err := client.Complete(t.Context(), &llmv1.CompleteRequest{Request: req})
	if err != nil {
		t.Fatal(err)
	}
	if gwResp.GetResponse().GetAttempts() != 2 {
		t.Errorf("attempts %d", gwResp.GetResponse().GetAttempts())
	}

	// Mid-stream error and a reset after output: terminal error events.
	for _, kind := range []fakeprovider.FaultKind{fakeprovider.FaultMidStreamError, fakeprovider.FaultConnectionReset} {
		fp.Enqueue(fakeprovider.Turn{Text: "a long enough reply to be cut", ChunkRunes: 4, Fault: &fakeprovider.Fault{Kind: kind, AfterChunks: 5}})
		st, err := client.Stream(t.Context(), &llmv1.StreamRequest{Request: req})
		if err != nil {
			t.Fatal(err)
		}
		evs, err := collect(t, st)
		if err != nil {
			t.Fatalf("fault %d: status %v, want an error event", kind, err)
		}
		last := evs[len(evs)-1].GetError()
		if last == nil || last.GetPartialResponse() == nil {
			t.Errorf("fault %d: last event %v", kind, evs[len(evs)-1])
		}
	}
}

// TestIdleTimeout: an upstream that stops sending is cut after the idle
// timeout with a TIMEOUT error: retried, then the status, before visible
// output; an error event with the partial response after it. Slow chunks
// that each arrive within the timeout are not a stall.
func TestIdleTimeout(t *testing.T) {
	fast := func(c *Config) {
		c.IdleTimeout = 100 * time.Millisecond
		c.Backoff = func(int, time.Duration) time.Duration { return 0 }
	}
	// After output: openai-chat's first chunk carries text, so a long
	// ChunkDelay stalls after it; Anthropic's first chunks are
	// message_start and content_block_start, so the stall comes later.
	afterOutput := map[string]fakeprovider.Turn{
		"groq/llama-3.3-70b-versatile": {Text: "first chunk, then nothing", ChunkRunes: 6, ChunkDelay: time.Hour},
		"anthropic/claude-sonnet-4.5":  {Text: "first chunk, then nothing", ChunkRunes: 6, Fault: &fakeprovider.Fault{Kind: fakeprovider.FaultStall, AfterChunks: 3}},
	}
	for _, model := range []string{"anthropic/claude-sonnet-4.5", "groq/llama-3.3-70b-versatile"} {
		t.Run(model+"/before output", func(t *testing.T) {
			fp, client, _ := newE2E(t, fast)
			stall := fakeprovider.Turn{Text: "never sent", Fault: &fakeprovider.Fault{Kind: fakeprovider.FaultStall}}
			fp.Enqueue(stall, stall, stall)
			req := userReq(model, "hi")
			req.DisableFallbacks = true
			st, err := client.Stream(t.Context(), &llmv1.StreamRequest{Request: req})
			if err != nil {
				t.Fatal(err)
			}
			evs, err := collect(t, st)
			for _, ev := range evs {
				if ev.GetRetrying() == nil {
					t.Fatalf("event %v before the error, want only retrying events", ev)
				}
			}
			if status.Code(err) != codes.DeadlineExceeded || len(evs) != 2 {
				t.Fatalf("status %v after %d events, want DeadlineExceeded after 2 retrying events", err, len(evs))
			}
			d := detailOf(t, err)
			if d.GetKind() != llmv1.ErrorKind_ERROR_KIND_TIMEOUT || d.GetAttempts() != 3 || !d.GetRetryable() {
				t.Errorf("detail %v", d)
			}
		})
		t.Run(model+"/after output", func(t *testing.T) {
			fp, client, _ := newE2E(t, fast)
			fp.Enqueue(afterOutput[model])
			req := userReq(model, "hi")
			req.DisableFallbacks = true
			st, err := client.Stream(t.Context(), &llmv1.StreamRequest{Request: req})
			if err != nil {
				t.Fatal(err)
			}
			evs, err := collect(t, st)
			if err != nil {
				t.Fatalf("status %v, want a terminal error event", err)
			}
			last := evs[len(evs)-1].GetError()
			if last.GetError().GetKind() != llmv1.ErrorKind_ERROR_KIND_TIMEOUT || last.GetPartialResponse() == nil {
				t.Fatalf("last event %v", evs[len(evs)-1])
			}
			var text string
			for _, e := range evs {
				text += e.GetTextDelta().GetText()
			}
			if text != "first " || len(fp.Requests()) != 1 {
				t.Errorf("streamed %q in %d requests", text, len(fp.Requests()))
			}
		})
	}
	t.Run("slow chunks are not a stall", func(t *testing.T) {
		// 12 chunks 40 ms apart: the stream outlasts the 300 ms timeout,
		// no gap comes near it.
		fp, client, _ := newE2E(t, func(c *Config) { c.IdleTimeout = 300 * time.Millisecond })
		text := strings.Repeat("abcd", 12)
		fp.Enqueue(fakeprovider.Turn{Text: text, ChunkRunes: 4, ChunkDelay: 40 * time.Millisecond})
		req := userReq("anthropic/claude-sonnet-4.5", "hi")
		req.DisableFallbacks = true
		st, err := client.Stream(t.Context(), &llmv1.StreamRequest{Request: req})
		if err != nil {
			t.Fatal(err)
		}
		evs, err := collect(t, st)
		if err != nil {
			t.Fatal(err)
		}
		if got := jsonText(evs[len(evs)-1].GetEnded().GetResponse()); got != text {
			t.Errorf("ended with %q (last event %v)", got, evs[len(evs)-1])
		}
	})
}

// TestRateLimitEvents: the rate-limit headers of OpenAI (chat and
// responses) and Anthropic reach the stream as a rate_limits event right
// after started; providers without them send none.
func TestRateLimitEvents(t *testing.T) {
	fp, client, _ := newE2E(t)
	n := func(v int64) *int64 { return &v }
	want := &llmv1.RateLimits{
		RequestsLimit: n(fakeprovider.RateLimitRequests), RequestsRemaining: n(fakeprovider.RateLimitRequestsRemaining),
		TokensLimit: n(fakeprovider.RateLimitTokens), TokensRemaining: n(fakeprovider.RateLimitTokensRemaining),
	}
	for _, tt := range []struct {
		model string
		want  *llmv1.RateLimits
	}{
		{"groq/llama-3.3-70b-versatile", want},
		{"openai/gpt-5", want},
		{"anthropic/claude-sonnet-4.5", want},
		{"gemini/gemini-2.5-flash", nil},
	} {
		t.Run(tt.model, func(t *testing.T) {
			fp.Enqueue(fakeprovider.Turn{Text: "ok"})
			start := time.Now()
			req := userReq(tt.model, "hi")
			req.DisableFallbacks = true
			st, err := client.Stream(t.Context(), &llmv1.StreamRequest{Request: req})
			if err != nil {
				t.Fatal(err)
			}
			evs, err := collect(t, st)
			if err != nil {
				t.Fatal(err)
			}
			var got *llmv1.RateLimits
			if len(evs) > 1 {
				got = evs[1].GetRateLimits()
			}
			if diff := cmp.Diff(tt.want, got, protocmp.Transform(),
				protocmp.IgnoreFields(&llmv1.RateLimits{}, "requests_reset_time", "tokens_reset_time")); diff != "" {
				t.Errorf("rate limits (-want +got):\n%s", diff)
			}
			if got != nil && (!got.GetRequestsResetTime().AsTime().After(start) || !got.GetTokensResetTime().AsTime().After(start)) {
				t.Errorf("reset times %v %v not after the request", got.GetRequestsResetTime(), got.GetTokensResetTime())
			}
		})
	}
}
