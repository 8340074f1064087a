package bedrock

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"hash/crc32"
	"io"
	"net/http"
	"testing"

	"github.com/google/go-cmp/cmp"

	llmv1 "github.com/fabro-sh/fabro-go/gen/fabro/llm/v1"
	"github.com/fabro-sh/fabro-go/services/llmgateway/internal/codec"
)

// frameBytes encodes one event-stream frame with string headers.
func frameBytes(headers [][2]string, payload string) []byte {
	var h []byte
	for _, kv := range headers {
		h = append(h, byte(len(kv[0])))
		h = append(h, kv[0]...)
		h = append(h, 7)
		h = binary.BigEndian.AppendUint16(h, uint16(len(kv[1])))
		h = append(h, kv[1]...)
	}
	total := 16 + len(h) + len(payload)
	b := binary.BigEndian.AppendUint32(nil, uint32(total))
	b = binary.BigEndian.AppendUint32(b, uint32(len(h)))
	b = binary.BigEndian.AppendUint32(b, crc32.ChecksumIEEE(b))
	b = append(b, h...)
	b = append(b, payload...)
	return binary.BigEndian.AppendUint32(b, crc32.ChecksumIEEE(b))
}

func evFrame(eventType, payload string) []byte {
	return frameBytes([][2]string{{":event-type", eventType}, {":content-type", "application/json"}, {":message-type", "event"}}, payload)
}

func excFrame(excType, payload string) []byte {
	return frameBytes([][2]string{{":exception-type", excType}, {":content-type", "application/json"}, {":message-type", "exception"}}, payload)
}

func stream(frames ...[]byte) []byte { return bytes.Join(frames, nil) }

var (
	fStart = evFrame("messageStart", `{"role":"assistant","p":"abcdefgh"}`)
	fMeta  = evFrame("metadata", `{"usage":{"inputTokens":12,"outputTokens":40,"totalTokens":2100,"cacheReadInputTokens":2048,"cacheWriteInputTokens":0},"metrics":{"latencyMs":812},"p":"abc"}`)
)

func fDelta(i, delta string) []byte {
	return evFrame("contentBlockDelta", `{"contentBlockIndex":`+i+`,"delta":`+delta+`,"p":"abcdef"}`)
}
func fStop(i string) []byte {
	return evFrame("contentBlockStop", `{"contentBlockIndex":`+i+`,"p":"ab"}`)
}
func fMsgStop(reason string) []byte {
	return evFrame("messageStop", `{"stopReason":"`+reason+`","additionalModelResponseFields":{"stop_sequence":null}}`)
}

// collect drains a decoder, returning the events and the terminal error.
func collect(d codec.Decoder) ([]codec.Event, error) {
	var out []codec.Event
	var ev codec.Event
	for {
		if err := d.Next(&ev); err != nil {
			return out, err
		}
		out = append(out, ev)
	}
}

const (
	kText   = llmv1.ContentBlockKind_CONTENT_BLOCK_KIND_TEXT
	kReason = llmv1.ContentBlockKind_CONTENT_BLOCK_KIND_REASONING
	kTool   = llmv1.ContentBlockKind_CONTENT_BLOCK_KIND_TOOL_CALL
	kOpaque = llmv1.ContentBlockKind_CONTENT_BLOCK_KIND_OPAQUE
)

var usage12 = codec.Usage{Input: 12, Output: 40, CacheRead: 2048}

func TestDecoder(t *testing.T) {
	tests := []struct {
		name   string
		body   []byte
		want   []codec.Event
		target error           // errors.Is target for the terminal error
		kind   llmv1.ErrorKind // or the *codec.Error kind
	}{{
		name: "text with escapes, surrogate pairs and padding",
		body: stream(fStart,
			fDelta("0", `{"text":"Hel"}`),
			fDelta("0", `{"text":"lo \ud83d\ude00 C:\\path \"q\"\n日本"}`),
			evFrame("someFutureEvent", `{"x":1}`),
			fStop("0"), fMsgStop("end_turn"), fMeta),
		want: []codec.Event{
			{Type: codec.EventStart},
			{Type: codec.EventBlockStart, Key: 0, Kind: kText},
			{Type: codec.EventTextDelta, Key: 0, Text: "Hel"},
			{Type: codec.EventTextDelta, Key: 0, Text: "lo 😀 C:\\path \"q\"\n日本"},
			{Type: codec.EventBlockEnd, Key: 0},
			{Type: codec.EventFinish, Finish: llmv1.FinishReason_FINISH_REASON_STOP, RawFinish: "end_turn"},
			{Type: codec.EventUsage, Usage: usage12},
		},
		target: io.EOF,
	}, {
		name: "text then parallel tool calls, interleaved input deltas",
		body: stream(fStart,
			fDelta("0", `{"text":"Checking."}`), fStop("0"),
			evFrame("contentBlockStart", `{"contentBlockIndex":1,"start":{"toolUse":{"toolUseId":"tooluse_1","name":"get_weather"}},"p":"a"}`),
			evFrame("contentBlockStart", `{"start":{"toolUse":{"name":"get_time","toolUseId":"tooluse_2"}},"contentBlockIndex":2}`),
			fDelta("1", `{"toolUse":{"input":"{\"city\":"}}`),
			fDelta("2", `{"toolUse":{"input":"{\"tz\":\"CET\"}"}}`),
			fDelta("1", `{"toolUse":{"input":"\"Paris\"}"}}`),
			fStop("1"), fStop("2"), fMsgStop("tool_use"), fMeta),
		want: []codec.Event{
			{Type: codec.EventStart},
			{Type: codec.EventBlockStart, Key: 0, Kind: kText},
			{Type: codec.EventTextDelta, Key: 0, Text: "Checking."},
			{Type: codec.EventBlockEnd, Key: 0},
			{Type: codec.EventBlockStart, Key: 1, Kind: kTool, ToolCallID: "tooluse_1", ToolName: "get_weather"},
			{Type: codec.EventBlockStart, Key: 2, Kind: kTool, ToolCallID: "tooluse_2", ToolName: "get_time"},
			{Type: codec.EventToolCallDelta, Key: 1, Text: `{"city":`},
			{Type: codec.EventToolCallDelta, Key: 2, Text: `{"tz":"CET"}`},
			{Type: codec.EventToolCallDelta, Key: 1, Text: `"Paris"}`},
			{Type: codec.EventBlockEnd, Key: 1},
			{Type: codec.EventBlockEnd, Key: 2},
			{Type: codec.EventFinish, Finish: llmv1.FinishReason_FINISH_REASON_TOOL_CALLS, RawFinish: "tool_use"},
			{Type: codec.EventUsage, Usage: usage12},
		},
		target: io.EOF,
	}, {
		name: "reasoning with signature, redacted reasoning, then tool call",
		body: stream(fStart,
			fDelta("0", `{"reasoningContent":{"text":"Need "}}`),
			fDelta("0", `{"reasoningContent":{"text":"weather."}}`),
			fDelta("0", `{"reasoningContent":{"signature":"EqQBCkYIBxgCKkA="}}`),
			fStop("0"),
			fDelta("1", `{"reasoningContent":{"redactedContent":"AAEC"}}`),
			fDelta("1", `{"reasoningContent":{"redactedContent":"AwQ="}}`),
			fStop("1"),
			evFrame("contentBlockStart", `{"contentBlockIndex":2,"start":{"toolUse":{"toolUseId":"t1","name":"f"}}}`),
			fDelta("2", `{"toolUse":{"input":"{}"}}`),
			fStop("2"), fMsgStop("tool_use"), fMeta),
		want: []codec.Event{
			{Type: codec.EventStart},
			{Type: codec.EventBlockStart, Key: 0, Kind: kReason},
			{Type: codec.EventReasoningDelta, Key: 0, Text: "Need "},
			{Type: codec.EventReasoningDelta, Key: 0, Text: "weather."},
			{Type: codec.EventSignature, Key: 0, Signature: "EqQBCkYIBxgCKkA="},
			{Type: codec.EventBlockEnd, Key: 0},
			{Type: codec.EventBlockStart, Key: 1, Kind: kReason},
			{Type: codec.EventSignature, Key: 1, Signature: "AAEC", Redacted: true},
			{Type: codec.EventSignature, Key: 1, Signature: "AAECAwQ=", Redacted: true},
			{Type: codec.EventBlockEnd, Key: 1},
			{Type: codec.EventBlockStart, Key: 2, Kind: kTool, ToolCallID: "t1", ToolName: "f"},
			{Type: codec.EventToolCallDelta, Key: 2, Text: "{}"},
			{Type: codec.EventBlockEnd, Key: 2},
			{Type: codec.EventFinish, Finish: llmv1.FinishReason_FINISH_REASON_TOOL_CALLS, RawFinish: "tool_use"},
			{Type: codec.EventUsage, Usage: usage12},
		},
		target: io.EOF,
	}, {
		// Signed reasoning with no text is not redacted: only
		// redactedContent is.
		name: "signed reasoning without text",
		body: stream(fStart,
			fDelta("0", `{"reasoningContent":{"signature":"EqQBCkYIBxgCKkA="}}`),
			fStop("0"), fMsgStop("end_turn"), fMeta),
		want: []codec.Event{
			{Type: codec.EventStart},
			{Type: codec.EventBlockStart, Key: 0, Kind: kReason},
			{Type: codec.EventSignature, Key: 0, Signature: "EqQBCkYIBxgCKkA="},
			{Type: codec.EventBlockEnd, Key: 0},
			{Type: codec.EventFinish, Finish: llmv1.FinishReason_FINISH_REASON_STOP, RawFinish: "end_turn"},
			{Type: codec.EventUsage, Usage: usage12},
		},
		target: io.EOF,
	}, {
		name: "exception frame after two deltas",
		body: stream(fStart, fDelta("0", `{"text":"a"}`), fDelta("0", `{"text":"b"}`),
			excFrame("throttlingException", `{"message":"Too many requests, please wait before trying again."}`)),
		want: []codec.Event{
			{Type: codec.EventStart},
			{Type: codec.EventBlockStart, Key: 0, Kind: kText},
			{Type: codec.EventTextDelta, Key: 0, Text: "a"},
			{Type: codec.EventTextDelta, Key: 0, Text: "b"},
		},
		kind: llmv1.ErrorKind_ERROR_KIND_RATE_LIMIT,
	}, {
		name: "model stream error exception",
		body: stream(fStart, excFrame("modelStreamErrorException", `{"message":"boom","originalStatusCode":500}`)),
		want: []codec.Event{{Type: codec.EventStart}},
		kind: llmv1.ErrorKind_ERROR_KIND_SERVER,
	}, {
		name: "service unavailable exception",
		body: stream(fStart, excFrame("serviceUnavailableException", `{"message":"busy"}`)),
		want: []codec.Event{{Type: codec.EventStart}},
		kind: llmv1.ErrorKind_ERROR_KIND_OVERLOADED,
	}, {
		name: "validation exception about context length",
		body: stream(excFrame("validationException", `{"message":"Input is too long for requested model."}`)),
		kind: llmv1.ErrorKind_ERROR_KIND_CONTEXT_LENGTH,
	}, {
		name: "error message type",
		body: stream(fStart, frameBytes([][2]string{{":message-type", "error"}, {":error-code", "InternalFailure"}, {":error-message", "oops"}}, "")),
		want: []codec.Event{{Type: codec.EventStart}},
		kind: llmv1.ErrorKind_ERROR_KIND_SERVER,
	}, {
		name: "bad message CRC",
		body: stream(fStart, corrupt(fDelta("0", `{"text":"a"}`), -1)),
		want: []codec.Event{{Type: codec.EventStart}},
		kind: llmv1.ErrorKind_ERROR_KIND_STREAM_DECODE,
	}, {
		name: "bad prelude CRC",
		body: stream(fStart, corrupt(fDelta("0", `{"text":"a"}`), 9)),
		want: []codec.Event{{Type: codec.EventStart}},
		kind: llmv1.ErrorKind_ERROR_KIND_STREAM_DECODE,
	}, {
		name: "malformed JSON payload with good CRCs",
		body: stream(fStart, fDelta("0", `{"text":"a"`)),
		want: []codec.Event{{Type: codec.EventStart}},
		kind: llmv1.ErrorKind_ERROR_KIND_STREAM_DECODE,
	}, {
		name:   "ends after messageStop without metadata",
		body:   stream(fStart, fDelta("0", `{"text":"a"}`), fStop("0"), fMsgStop("end_turn")),
		want:   []codec.Event{{Type: codec.EventStart}, {Type: codec.EventBlockStart, Kind: kText}, {Type: codec.EventTextDelta, Text: "a"}, {Type: codec.EventBlockEnd}, {Type: codec.EventFinish, Finish: llmv1.FinishReason_FINISH_REASON_STOP, RawFinish: "end_turn"}},
		target: io.ErrUnexpectedEOF,
	}, {
		name:   "cut inside a frame",
		body:   stream(fStart, fDelta("0", `{"text":"a"}`)[:20]),
		want:   []codec.Event{{Type: codec.EventStart}},
		target: io.ErrUnexpectedEOF,
	}, {
		name:   "cut inside a prelude",
		body:   stream(fStart, fDelta("0", `{"text":"a"}`)[:5]),
		want:   []codec.Event{{Type: codec.EventStart}},
		target: io.ErrUnexpectedEOF,
	}, {
		name:   "empty body",
		target: io.ErrUnexpectedEOF,
	}, {
		name: "open block closed at messageStop; inclusive usage normalized",
		body: stream(fStart, fDelta("0", `{"text":"a"}`), fMsgStop("max_tokens"),
			evFrame("metadata", `{"usage":{"inputTokens":4995,"outputTokens":10,"totalTokens":5005,"cacheReadInputTokens":0,"cacheWriteInputTokens":4993}}`)),
		want: []codec.Event{
			{Type: codec.EventStart},
			{Type: codec.EventBlockStart, Kind: kText},
			{Type: codec.EventTextDelta, Text: "a"},
			{Type: codec.EventBlockEnd},
			{Type: codec.EventFinish, Finish: llmv1.FinishReason_FINISH_REASON_LENGTH, RawFinish: "max_tokens"},
			{Type: codec.EventUsage, Usage: codec.Usage{Input: 2, Output: 10, CacheWrite: 4993}},
		},
		target: io.EOF,
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := collect(New().NewDecoder(bytes.NewReader(tt.body)))
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("events (-want +got):\n%s", diff)
			}
			if tt.target != nil {
				if !errors.Is(err, tt.target) {
					t.Fatalf("error = %v, want %v", err, tt.target)
				}
				return
			}
			var ce *codec.Error
			if !errors.As(err, &ce) || ce.Kind != tt.kind {
				t.Fatalf("error = %#v, want *codec.Error of kind %v", err, tt.kind)
			}
		})
	}
}

// corrupt flips one byte of a frame; a negative index counts from the end.
func corrupt(f []byte, i int) []byte {
	f = append([]byte(nil), f...)
	if i < 0 {
		i += len(f)
	}
	f[i] ^= 0x5a
	return f
}

// TestGoldenFrame checks the framing against the golden frame in the
// reference notes (computed independently with Python struct/zlib.crc32).
func TestGoldenFrame(t *testing.T) {
	const golden = "0000009400000057b4ab9aee0b3a6576656e742d74797065070011636f6e74656e74426c6f636b44656c74610d3a636f6e74656e742d747970650700106170706c69636174696f6e2f6a736f6e0d3a6d6573736167652d747970650700056576656e747b22636f6e74656e74426c6f636b496e646578223a302c2264656c7461223a7b2274657874223a224869227d7d1f944657"
	b, _ := hex.DecodeString(golden)
	if got := hex.EncodeToString(evFrame("contentBlockDelta", `{"contentBlockIndex":0,"delta":{"text":"Hi"}}`)); got != golden {
		t.Fatalf("test encoder differs from golden frame:\n got %s\nwant %s", got, golden)
	}
	fr := frameReader{r: bytes.NewReader(b)}
	var f frame
	if err := fr.next(&f); err != nil {
		t.Fatal(err)
	}
	if string(f.eventType) != "contentBlockDelta" || string(f.messageType) != "event" || string(f.payload) != `{"contentBlockIndex":0,"delta":{"text":"Hi"}}` {
		t.Fatalf("frame = %q %q %q", f.messageType, f.eventType, f.payload)
	}
	exc := excFrame("throttlingException", `{"message":"Too many requests, please wait before trying again."}`)
	if got := hex.EncodeToString(exc[:12]); got != "000000b2000000613590d5d3" || hex.EncodeToString(exc[len(exc)-4:]) != "e8ffb26a" {
		t.Fatalf("exception frame prelude %s crc %x", got, exc[len(exc)-4:])
	}
}

func BenchmarkDecoderTextDelta(b *testing.B) {
	const n = 1000
	frames := [][]byte{fStart}
	for range n {
		frames = append(frames, fDelta("0", `{"text":"Hello, wo"}`))
	}
	frames = append(frames, fStop("0"), fMsgStop("end_turn"), fMeta)
	body := stream(frames...)
	c := New()
	r := bytes.NewReader(body)
	b.ReportAllocs()
	b.SetBytes(int64(len(body)))
	var ev codec.Event
	for b.Loop() {
		r.Reset(body)
		d := c.NewDecoder(r)
		for {
			if err := d.Next(&ev); err != nil {
				if err != io.EOF {
					b.Fatal(err)
				}
				break
			}
		}
	}
	// Per-delta allocations, counting the decoder's setup against the deltas.
	b.ReportMetric(float64(testing.AllocsPerRun(1, func() {
		r.Reset(body)
		d := c.NewDecoder(r)
		for d.Next(&ev) == nil {
		}
	}))/n, "allocs/delta")
}

func TestDecodeResponse(t *testing.T) {
	body := `{"output":{"message":{"role":"assistant","content":[
	  {"reasoningContent":{"reasoningText":{"text":"Need weather.","signature":"EqQB"}}},
	  {"reasoningContent":{"redactedContent":"AAEC"}},
	  {"text":"Checking."},
	  {"citationsContent": {"content":[{"text":"x"}]}},
	  {"toolUse":{"toolUseId":"tooluse_1","name":"get_weather","input":{"city":"Paris"}}},
	  {"toolUse":{"toolUseId":"tooluse_2","name":"get_time","input":{}}}]}},
	 "stopReason":"tool_use",
	 "usage":{"inputTokens":12,"outputTokens":40,"totalTokens":2100,"cacheReadInputTokens":2048,"cacheWriteInputTokens":0},
	 "metrics":{"latencyMs":812}}`
	var got []codec.Event
	err := New().DecodeResponse(bytes.NewReader([]byte(body)), func(ev *codec.Event) error {
		got = append(got, *ev)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	want := []codec.Event{
		{Type: codec.EventStart},
		{Type: codec.EventBlockStart, Key: 0, Kind: kReason},
		{Type: codec.EventReasoningDelta, Key: 0, Text: "Need weather."},
		{Type: codec.EventSignature, Key: 0, Signature: "EqQB"},
		{Type: codec.EventBlockEnd, Key: 0},
		{Type: codec.EventBlockStart, Key: 1, Kind: kReason, Redacted: true},
		{Type: codec.EventSignature, Key: 1, Signature: "AAEC", Redacted: true},
		{Type: codec.EventBlockEnd, Key: 1},
		{Type: codec.EventBlockStart, Key: 2, Kind: kText},
		{Type: codec.EventTextDelta, Key: 2, Text: "Checking."},
		{Type: codec.EventBlockEnd, Key: 2},
		{Type: codec.EventBlockStart, Key: 3, Kind: kOpaque, OpaqueKind: OpaqueKind},
		{Type: codec.EventBlockEnd, Key: 3, Opaque: `{"citationsContent":{"content":[{"text":"x"}]}}`},
		{Type: codec.EventBlockStart, Key: 4, Kind: kTool, ToolCallID: "tooluse_1", ToolName: "get_weather"},
		{Type: codec.EventToolCallDelta, Key: 4, Text: `{"city":"Paris"}`},
		{Type: codec.EventBlockEnd, Key: 4},
		{Type: codec.EventBlockStart, Key: 5, Kind: kTool, ToolCallID: "tooluse_2", ToolName: "get_time"},
		{Type: codec.EventToolCallDelta, Key: 5, Text: `{}`},
		{Type: codec.EventBlockEnd, Key: 5},
		{Type: codec.EventFinish, Finish: llmv1.FinishReason_FINISH_REASON_TOOL_CALLS, RawFinish: "tool_use"},
		{Type: codec.EventUsage, Usage: usage12},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("events (-want +got):\n%s", diff)
	}

	// 200 without output (some guardrail and internal failures).
	err = New().DecodeResponse(bytes.NewReader([]byte(`{"stopReason":"end_turn"}`)), func(*codec.Event) error { return nil })
	var ce *codec.Error
	if !errors.As(err, &ce) || ce.Kind != llmv1.ErrorKind_ERROR_KIND_SERVER {
		t.Fatalf("no output: err = %v", err)
	}
}

func TestParseError(t *testing.T) {
	tests := []struct {
		status    int
		errType   string
		body      string
		kind      llmv1.ErrorKind
		code, msg string
	}{
		{429, "ThrottlingException:http://internal.amazon.com/coral/com.amazon.bedrock/", `{"message":"Too many requests, please wait before trying again."}`, llmv1.ErrorKind_ERROR_KIND_RATE_LIMIT, "ThrottlingException", "Too many requests, please wait before trying again."},
		{429, "ModelNotReadyException", `{"message":"Model is not ready"}`, llmv1.ErrorKind_ERROR_KIND_OVERLOADED, "ModelNotReadyException", "Model is not ready"},
		{503, "ServiceUnavailableException", `{"message":"unavailable"}`, llmv1.ErrorKind_ERROR_KIND_OVERLOADED, "ServiceUnavailableException", "unavailable"},
		{400, "ValidationException", `{"message":"The model returned the following errors: prompt is too long: 200049 tokens > 200000 maximum"}`, llmv1.ErrorKind_ERROR_KIND_CONTEXT_LENGTH, "ValidationException", "The model returned the following errors: prompt is too long: 200049 tokens > 200000 maximum"},
		{400, "ValidationException", `{"message":"Input is too long for requested model."}`, llmv1.ErrorKind_ERROR_KIND_CONTEXT_LENGTH, "ValidationException", "Input is too long for requested model."},
		{400, "ValidationException", `{"message":"messages.1: roles must alternate"}`, llmv1.ErrorKind_ERROR_KIND_INVALID_REQUEST, "ValidationException", "messages.1: roles must alternate"},
		{403, "AccessDeniedException", `{"message":"You don't have access to the model with the specified model ID."}`, llmv1.ErrorKind_ERROR_KIND_PERMISSION, "AccessDeniedException", "You don't have access to the model with the specified model ID."},
		{403, "UnrecognizedClientException", `{"Message":"The security token included in the request is invalid."}`, llmv1.ErrorKind_ERROR_KIND_AUTHENTICATION, "UnrecognizedClientException", "The security token included in the request is invalid."},
		{408, "ModelTimeoutException", `{"message":"timed out"}`, llmv1.ErrorKind_ERROR_KIND_TIMEOUT, "ModelTimeoutException", "timed out"},
		{404, "", `{"__type":"com.amazon.coral.service#ResourceNotFoundException","message":"no such model"}`, llmv1.ErrorKind_ERROR_KIND_NOT_FOUND, "ResourceNotFoundException", "no such model"},
		// A body in no known shape is never the message: it may quote anything.
		{502, "", `<html>bad gateway for AKIA-key</html>`, llmv1.ErrorKind_ERROR_KIND_SERVER, "", codec.UnreadableBody(502)},
	}
	for _, tt := range tests {
		resp := &http.Response{StatusCode: tt.status, Header: http.Header{}}
		if tt.errType != "" {
			resp.Header.Set("x-amzn-ErrorType", tt.errType)
		}
		resp.Header.Set("x-amzn-RequestId", "req-1")
		got := New().ParseError(resp, []byte(tt.body))
		want := &codec.Error{Kind: tt.kind, Message: "bedrock: " + tt.msg, StatusCode: tt.status, Code: tt.code, RequestID: "req-1"}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("ParseError(%d %s) (-want +got):\n%s", tt.status, tt.errType, diff)
		}
	}
}
