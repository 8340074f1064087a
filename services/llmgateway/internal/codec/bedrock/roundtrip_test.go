package bedrock

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	llmv1 "github.com/fabro-sh/fabro-go/gen/fabro/llm/v1"
	"github.com/fabro-sh/fabro-go/services/llmgateway/fakeprovider"
	"github.com/fabro-sh/fabro-go/services/llmgateway/internal/codec"
)

type toolCall struct{ ID, Name, Args string }

// result is a test-side assembly of a decoded reply.
type result struct {
	Text, Reasoning, Signature string
	Tools                      []toolCall
	Opaque                     []string
	Finish                     llmv1.FinishReason
	Raw                        string
	Usage                      codec.Usage
}

// assembler checks event order invariants while building a result.
type assembler struct {
	t      *testing.T
	res    result
	open   map[int]llmv1.ContentBlockKind
	tools  map[int]int
	closed map[int]bool
}

func newAssembler(t *testing.T) *assembler {
	return &assembler{t: t, open: map[int]llmv1.ContentBlockKind{}, tools: map[int]int{}, closed: map[int]bool{}}
}

func (a *assembler) add(ev *codec.Event) error {
	t := a.t
	if ev.Type != codec.EventBlockStart && ev.Type >= codec.EventTextDelta && ev.Type <= codec.EventBlockEnd {
		if _, ok := a.open[ev.Key]; !ok || a.closed[ev.Key] {
			t.Errorf("event %v for block %d that is not open", ev.Type, ev.Key)
		}
	}
	switch ev.Type {
	case codec.EventBlockStart:
		if _, ok := a.open[ev.Key]; ok {
			t.Errorf("block %d started twice", ev.Key)
		}
		a.open[ev.Key] = ev.Kind
		if ev.Kind == llmv1.ContentBlockKind_CONTENT_BLOCK_KIND_TOOL_CALL {
			a.tools[ev.Key] = len(a.res.Tools)
			a.res.Tools = append(a.res.Tools, toolCall{ID: ev.ToolCallID, Name: ev.ToolName})
		}
	case codec.EventTextDelta:
		a.res.Text += ev.Text
	case codec.EventReasoningDelta:
		a.res.Reasoning += ev.Text
	case codec.EventToolCallDelta:
		a.res.Tools[a.tools[ev.Key]].Args += ev.Text
	case codec.EventSignature:
		a.res.Signature = ev.Signature
	case codec.EventBlockEnd:
		a.closed[ev.Key] = true
		if ev.Opaque != "" {
			a.res.Opaque = append(a.res.Opaque, ev.Opaque)
		}
	case codec.EventFinish:
		for k := range a.open {
			if !a.closed[k] {
				t.Errorf("finish with block %d open", k)
			}
		}
		a.res.Finish, a.res.Raw = ev.Finish, ev.RawFinish
	case codec.EventUsage:
		a.res.Usage = ev.Usage
	}
	return nil
}

// roundTrip sends req through the codec to the fake and decodes the answer.
func roundTrip(t *testing.T, srvURL string, stream bool, creds map[string]string) (result, error) {
	t.Helper()
	c := New()
	req, err := c.NewRequest(t.Context(), &codec.Call{
		Provider: provider(srvURL), Model: "us.anthropic.claude-sonnet-4-5-20250929-v1:0", Request: richRequest(), Credentials: creds, Stream: stream,
	})
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return result{}, err
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		body, _ := io.ReadAll(resp.Body)
		return result{}, c.ParseError(resp, body)
	}
	a := newAssembler(t)
	if !stream {
		err := c.DecodeResponse(resp.Body, a.add)
		return a.res, err
	}
	if ct := resp.Header.Get("Content-Type"); ct != "application/vnd.amazon.eventstream" {
		t.Errorf("Content-Type = %q", ct)
	}
	d := c.NewDecoder(resp.Body)
	var ev codec.Event
	for {
		if err := d.Next(&ev); err != nil {
			if err == io.EOF {
				err = nil
			}
			return a.res, err
		}
		a.add(&ev)
	}
}

func TestRoundTripFakeProvider(t *testing.T) {
	full := fakeprovider.Turn{
		Reasoning: "Need the weather — 天気.",
		Text:      "Checking 😀 \"now\".",
		ToolCalls: []fakeprovider.ToolCall{
			{ID: "tooluse_a", Name: "get_weather", Arguments: `{"city":"Paris"}`},
			{ID: "tooluse_b", Name: "get_time", Arguments: `{"tz":"Europe/Paris"}`},
		},
		Usage:      fakeprovider.Usage{Input: 12, Output: 40, CacheRead: 2048, CacheWrite: 100},
		ChunkRunes: 3,
	}
	fullWant := result{
		Text: full.Text, Reasoning: full.Reasoning,
		Tools: []toolCall{
			{ID: "tooluse_a", Name: "get_weather", Args: `{"city":"Paris"}`},
			{ID: "tooluse_b", Name: "get_time", Args: `{"tz":"Europe/Paris"}`},
		},
		Finish: llmv1.FinishReason_FINISH_REASON_TOOL_CALLS, Raw: "tool_use",
		Usage: codec.Usage{Input: 12, Output: 40, CacheRead: 2048, CacheWrite: 100},
	}
	withFault := func(k fakeprovider.FaultKind) fakeprovider.Turn {
		t := full
		t.Fault = &fakeprovider.Fault{Kind: k, AfterChunks: 2, RetryAfter: 3 * time.Second}
		return t
	}
	tests := []struct {
		name   string
		turn   fakeprovider.Turn
		want   result // compared when no error is expected
		kind   llmv1.ErrorKind
		target error
	}{
		{name: "full turn", turn: full, want: fullWant},
		{name: "length", turn: fakeprovider.Turn{Text: "cut", Finish: "length"}, want: result{Text: "cut", Finish: llmv1.FinishReason_FINISH_REASON_LENGTH, Raw: "max_tokens"}},
		{name: "content filter", turn: fakeprovider.Turn{Finish: "content_filter"}, want: result{Finish: llmv1.FinishReason_FINISH_REASON_CONTENT_FILTER, Raw: "content_filtered"}},
		{name: "rate limit", turn: withFault(fakeprovider.FaultRateLimit), kind: llmv1.ErrorKind_ERROR_KIND_RATE_LIMIT},
		{name: "overloaded", turn: withFault(fakeprovider.FaultOverloaded), kind: llmv1.ErrorKind_ERROR_KIND_OVERLOADED},
		{name: "server error", turn: withFault(fakeprovider.FaultServerError), kind: llmv1.ErrorKind_ERROR_KIND_SERVER},
		{name: "auth", turn: withFault(fakeprovider.FaultAuth), kind: llmv1.ErrorKind_ERROR_KIND_AUTHENTICATION},
		{name: "mid-stream error", turn: withFault(fakeprovider.FaultMidStreamError), kind: llmv1.ErrorKind_ERROR_KIND_SERVER},
		{name: "malformed chunk", turn: withFault(fakeprovider.FaultMalformedChunk), kind: llmv1.ErrorKind_ERROR_KIND_STREAM_DECODE},
		{name: "connection reset", turn: withFault(fakeprovider.FaultConnectionReset), target: io.ErrUnexpectedEOF},
	}
	for _, stream := range []bool{true, false} {
		for _, tt := range tests {
			name := tt.name + map[bool]string{true: "/stream", false: "/converse"}[stream]
			t.Run(name, func(t *testing.T) {
				fake := fakeprovider.New(tt.turn)
				srv := httptest.NewServer(fake)
				defer srv.Close()
				got, err := roundTrip(t, srv.URL, stream, sigv4Creds())
				kind, target := tt.kind, tt.target
				if !stream {
					// Converse has no stream: a mid-stream error is an HTTP
					// error, a malformed chunk a truncated JSON body.
					switch tt.name {
					case "malformed chunk":
						kind = llmv1.ErrorKind_ERROR_KIND_RESPONSE_DECODE
					case "connection reset":
						target, kind = nil, 0
					}
				}
				switch {
				case target != nil:
					if !errors.Is(err, target) {
						t.Fatalf("err = %v, want %v", err, target)
					}
				case kind != 0:
					var ce *codec.Error
					if !errors.As(err, &ce) || ce.Kind != kind {
						t.Fatalf("err = %#v, want kind %v", err, kind)
					}
					if tt.name == "rate limit" && (ce.Code != "ThrottlingException" || ce.StatusCode != 429 || ce.RetryAfter != 3*time.Second || ce.RequestID == "") {
						t.Errorf("rate limit error = %+v", ce)
					}
				case tt.name == "connection reset":
					if err == nil {
						t.Fatal("connection reset decoded without error")
					}
				default:
					if err != nil {
						t.Fatal(err)
					}
					want := tt.want
					if want.Reasoning != "" && got.Signature == "" {
						t.Error("reasoning signature lost")
					}
					got.Signature = ""
					if diff := cmp.Diff(want, got); diff != "" {
						t.Errorf("result (-want +got):\n%s", diff)
					}
				}
				reqs := fake.Requests()
				if len(reqs) != 1 || reqs[0].Protocol != "bedrock-converse" {
					t.Fatalf("fake saw %+v", reqs)
				}
			})
		}
	}
}

func TestFakeRejectsUnsignedRequests(t *testing.T) {
	srv := httptest.NewServer(fakeprovider.New(fakeprovider.Turn{Text: "x"}))
	defer srv.Close()
	resp, err := http.Post(srv.URL+"/model/m/converse", "application/json", nil)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	e := New().ParseError(resp, body)
	if e.Kind != llmv1.ErrorKind_ERROR_KIND_AUTHENTICATION || e.StatusCode != 403 {
		t.Fatalf("error = %+v", e)
	}
}
