package wiretest

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	llmv1 "github.com/fabro-sh/fabro-go/gen/fabro/llm/v1"
	"github.com/fabro-sh/fabro-go/services/llmgateway/fakeprovider"
	"github.com/fabro-sh/fabro-go/services/llmgateway/internal/codec"
)

// Call is a call to the fake at url as the "openai" provider: bearer
// auth with sk-test and an OpenAI-Project extra header.
func Call(url string, stream bool) *codec.Call {
	return &codec.Call{
		Provider: &llmv1.Provider{ProviderId: "openai", BaseUrl: url + "/v1",
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

// RichTurn is a turn with reasoning, text, two parallel tool calls and
// cached usage.
var RichTurn = fakeprovider.Turn{
	Reasoning: "The user wants weather and time; call both tools.",
	Text:      "Let me check — 天気 😀.",
	ToolCalls: []fakeprovider.ToolCall{
		{ID: "call_1", Name: "get_weather", Arguments: `{"city":"Paris","unit":"c"}`},
		{ID: "call_2", Name: "get_time", Arguments: `{"tz":"Europe/Paris"}`},
	},
	Usage:      fakeprovider.Usage{Input: 20, Output: 90, Reasoning: 40, CacheRead: 1024},
	ChunkRunes: 5,
}

// RoundTripCase is a turn the fake plays and the reply the codec must make
// of it.
type RoundTripCase struct {
	Name string
	Turn fakeprovider.Turn
	Want Reply
}

var modes = map[bool]string{true: "/stream", false: "/unary"}

// RoundTrip runs each case through c against the fake, streaming and not,
// and checks the reply and the request the fake got: its protocol, path,
// credential and extra header.
func RoundTrip(t *testing.T, c codec.Codec, protocol, path string, cases []RoundTripCase) {
	t.Helper()
	for _, tt := range cases {
		for _, stream := range []bool{true, false} {
			t.Run(tt.Name+modes[stream], func(t *testing.T) {
				fake := fakeprovider.New(tt.Turn)
				srv := httptest.NewServer(fake)
				defer srv.Close()
				got, err := Do(t.Context(), c, Call(srv.URL, stream))
				if err != nil {
					t.Fatalf("Do: %v", err)
				}
				if diff := cmp.Diff(tt.Want, got); diff != "" {
					t.Errorf("reply (-want +got):\n%s", diff)
				}
				reqs := fake.Requests()
				if len(reqs) != 1 {
					t.Fatalf("fake got %d requests", len(reqs))
				}
				r := reqs[0]
				if r.Protocol != protocol || r.Path != path || r.Header.Get("Authorization") != "Bearer sk-test" || r.Header.Get("OpenAI-Project") != "proj_1" {
					t.Errorf("request %s %s auth %q project %q", r.Protocol, r.Path, r.Header.Get("Authorization"), r.Header.Get("OpenAI-Project"))
				}
			})
		}
	}
}

// RoundTripFaults plays RichTurn with each of OpenAIFaults through c,
// streaming and not, and runs the fault's check.
func RoundTripFaults(t *testing.T, c codec.Codec) {
	t.Helper()
	for _, fc := range OpenAIFaults {
		for _, stream := range []bool{true, false} {
			t.Run(fc.Name+modes[stream], func(t *testing.T) {
				turn := RichTurn
				f := fc.Fault
				turn.Fault = &f
				srv := httptest.NewServer(fakeprovider.New(turn))
				defer srv.Close()
				_, err := Do(t.Context(), c, Call(srv.URL, stream))
				if e := fc.Check(err, stream); e != nil {
					t.Error(e)
				}
			})
		}
	}
}

// Decode collects the stream body through c's decoder and checks the
// reply against want, or, with wantErr set, that it fails with a matching
// error.
func Decode(t *testing.T, c codec.Codec, body string, want Reply, wantErr func(error) bool) {
	t.Helper()
	got, err := Collect(c.NewDecoder(strings.NewReader(body)))
	if wantErr != nil {
		if err == nil || !wantErr(err) {
			t.Fatalf("err = %v (%T), want a matching error; reply %+v", err, err, got)
		}
		return
	}
	if err != nil {
		t.Fatalf("Collect: %v", err)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("reply (-want +got):\n%s", diff)
	}
}

// KindIs matches a *codec.Error of kind k.
func KindIs(k llmv1.ErrorKind) func(error) bool {
	return func(err error) bool {
		var ce *codec.Error
		return errors.As(err, &ce) && ce.Kind == k
	}
}

// Body checks a built request body against want, compared as JSON values,
// or, with wantErr, that building it failed with INVALID_REQUEST.
func Body(t *testing.T, body []byte, err error, want string, wantErr bool) {
	t.Helper()
	if wantErr {
		var ce *codec.Error
		if !errors.As(err, &ce) || ce.Kind != llmv1.ErrorKind_ERROR_KIND_INVALID_REQUEST {
			t.Fatalf("err = %v, want INVALID_REQUEST", err)
		}
		return
	}
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(JSONValue(t, []byte(want)), JSONValue(t, body)); diff != "" {
		t.Errorf("body (-want +got):\n%s\n%s", diff, body)
	}
}

// JSONValue decodes b into a generic JSON value.
func JSONValue(t *testing.T, b []byte) any {
	t.Helper()
	var v any
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatalf("%v: %s", err, b)
	}
	return v
}

// BenchmarkDecode decodes body, a stream of n text deltas, through c's
// decoder and reports allocations per delta.
func BenchmarkDecode(b *testing.B, c codec.Codec, body []byte, n int) {
	b.Helper()
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	r := bytes.NewReader(body)
	var ev codec.Event
	for b.Loop() {
		r.Reset(body)
		d := c.NewDecoder(r)
		deltas := 0
		for {
			err := d.Next(&ev)
			if err == io.EOF {
				break
			}
			if err != nil {
				b.Fatal(err)
			}
			if ev.Type == codec.EventTextDelta {
				deltas++
			}
		}
		if deltas != n {
			b.Fatalf("%d deltas, want %d", deltas, n)
		}
	}
	allocs := testing.AllocsPerRun(5, func() {
		r.Reset(body)
		d := c.NewDecoder(r)
		for d.Next(&ev) == nil {
		}
	})
	b.ReportMetric(allocs/float64(n), "allocs/delta")
}
