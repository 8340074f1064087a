package fakeprovider

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"hash/crc32"
	"net/http"
	"strings"
)

// bedrock-converse: POST /model/{modelId}/converse answers one JSON
// ConverseResponse; POST /model/{modelId}/converse-stream answers
// application/vnd.amazon.eventstream binary frames (messageStart,
// contentBlockStart/Delta/Stop, messageStop, metadata), each payload padded
// with a "p" field as the real service does. Errors carry the error name in
// x-amzn-ErrorType and {"message": ...} in the body; mid-stream errors are
// exception frames.

// bedrockRequestID is sent as x-amzn-RequestId on every answer.
const bedrockRequestID = "fake-bedrock-request-0001"

func renderBedrock(w http.ResponseWriter, r *http.Request, body []byte, t Turn) {
	w.Header().Set("X-Amzn-Requestid", bedrockRequestID)
	stream := strings.HasSuffix(r.URL.Path, "/converse-stream")
	// The real service refuses unsigned requests before anything else.
	if r.Header.Get("Authorization") == "" {
		bedrockHTTPError(w, http.StatusForbidden, "MissingAuthenticationTokenException", "Missing Authentication Token")
		return
	}
	var req struct {
		Messages []json.RawMessage `json:"messages"`
	}
	if err := json.Unmarshal(body, &req); err != nil || req.Messages == nil {
		bedrockHTTPError(w, http.StatusBadRequest, "ValidationException", "Malformed input request, please reformat your input and try again.")
		return
	}
	if f := t.Fault; f != nil {
		switch f.Kind {
		case FaultAuth:
			// Bedrock rejects bad credentials with 403, never 401.
			bedrockHTTPError(w, http.StatusForbidden, "UnrecognizedClientException", "The security token included in the request is invalid.")
			return
		case FaultOverloaded:
			// preStreamFault would answer 503 too, but Bedrock names it.
			bedrockHTTPError(w, http.StatusServiceUnavailable, "ServiceUnavailableException", "Bedrock is unable to process your request.")
			return
		}
		if preStreamFault(w, t, func(status int, kind FaultKind) []byte {
			name, msg := "InternalServerException", "The server encountered an internal error while processing the request."
			if kind == FaultRateLimit {
				name, msg = "ThrottlingException", "Too many requests, please wait before trying again."
			}
			w.Header().Set("X-Amzn-Errortype", name+":http://internal.amazon.com/coral/com.amazon.bedrock/")
			return bedrockMessage(msg)
		}) {
			return
		}
	}
	if stream {
		renderBedrockStream(w, r, t)
		return
	}
	renderBedrockJSON(w, t)
}

func bedrockHTTPError(w http.ResponseWriter, status int, name, msg string) {
	w.Header().Set("X-Amzn-Errortype", name+":http://internal.amazon.com/coral/com.amazon.bedrock/")
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	w.Write(bedrockMessage(msg))
}

func bedrockMessage(msg string) []byte {
	b, _ := json.Marshal(map[string]string{"message": msg})
	return b
}

// bedrockStopReason maps the script's finish to Converse's stopReason.
func bedrockStopReason(t Turn) string {
	switch t.Finish {
	case "length":
		return "max_tokens"
	case "content_filter":
		return "content_filtered"
	case "tool_calls":
		return "tool_use"
	case "", "stop":
		if t.Finish == "" && len(t.ToolCalls) > 0 {
			return "tool_use"
		}
		return "end_turn"
	}
	return t.Finish
}

// bedrockSignature is the reasoning signature the fake hands out: opaque,
// stable for the same reasoning text.
func bedrockSignature(reasoning string) string {
	sum := sha256.Sum256([]byte(reasoning))
	return base64.StdEncoding.EncodeToString(sum[:])
}

// bedrockUsage renders TokenUsage: inputTokens excludes the cache counts,
// totalTokens includes everything (AWS prompt caching semantics).
func bedrockUsage(u Usage) map[string]any {
	m := map[string]any{
		"inputTokens":  u.Input,
		"outputTokens": u.Output,
		"totalTokens":  u.Input + u.Output + u.CacheRead + u.CacheWrite,
	}
	if u.CacheRead > 0 || u.CacheWrite > 0 {
		m["cacheReadInputTokens"] = u.CacheRead
		m["cacheWriteInputTokens"] = u.CacheWrite
	}
	return m
}

func renderBedrockJSON(w http.ResponseWriter, t Turn) {
	if f := t.Fault; f != nil {
		switch f.Kind {
		case FaultMidStreamError:
			bedrockHTTPError(w, http.StatusFailedDependency, "ModelErrorException", "The system encountered an unexpected error during processing. Try your request again.")
			return
		case FaultConnectionReset:
			panic(http.ErrAbortHandler)
		}
	}
	var content []any
	if t.Reasoning != "" {
		content = append(content, map[string]any{"reasoningContent": map[string]any{
			"reasoningText": map[string]string{"text": t.Reasoning, "signature": bedrockSignature(t.Reasoning)},
		}})
	}
	if t.Text != "" {
		content = append(content, map[string]string{"text": t.Text})
	}
	for _, tc := range t.ToolCalls {
		content = append(content, map[string]any{"toolUse": map[string]any{
			"toolUseId": tc.ID, "name": tc.Name, "input": json.RawMessage(orEmptyObject(tc.Arguments)),
		}})
	}
	if content == nil {
		content = []any{}
	}
	b, _ := json.Marshal(map[string]any{
		"output":     map[string]any{"message": map[string]any{"role": "assistant", "content": content}},
		"stopReason": bedrockStopReason(t),
		"usage":      bedrockUsage(t.Usage),
		"metrics":    map[string]int{"latencyMs": 42},
	})
	if f := t.Fault; f != nil && f.Kind == FaultMalformedChunk {
		b = b[:len(b)/2]
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	w.Write(b)
}

func orEmptyObject(s string) string {
	if strings.TrimSpace(s) == "" {
		return "{}"
	}
	return s
}

// bedrockStream writes ConverseStream frames through a streamWriter.
type bedrockStream struct {
	sw  *streamWriter
	pad int
}

// event renders one event frame, its payload padded like the real service.
func (s *bedrockStream) event(eventType string, payload map[string]any) []byte {
	s.pad = s.pad%26 + 1
	payload["p"] = "abcdefghijklmnopqrstuvwxyz"[:s.pad]
	b, _ := json.Marshal(payload)
	return eventstreamFrame([][2]string{
		{":event-type", eventType},
		{":content-type", "application/json"},
		{":message-type", "event"},
	}, b)
}

// chunk sends a content frame, applying the turn's faults. A malformed
// chunk is a frame whose message CRC is wrong.
func (s *bedrockStream) chunk(frame []byte) bool {
	sw := s.sw
	if f := sw.turn.Fault; f != nil && f.Kind == FaultMalformedChunk && sw.sent >= f.AfterChunks {
		bad := append([]byte(nil), frame...)
		bad[len(bad)-1] ^= 0xff
		sw.Raw(bad)
		return false
	}
	return sw.Chunk(frame, func() []byte {
		return eventstreamFrame([][2]string{
			{":exception-type", "modelStreamErrorException"},
			{":content-type", "application/json"},
			{":message-type", "exception"},
		}, []byte(`{"message":"The model encountered an error while streaming its response.","originalStatusCode":500}`))
	})
}

func renderBedrockStream(w http.ResponseWriter, r *http.Request, t Turn) {
	s := &bedrockStream{sw: newStreamWriter(w, r, "application/vnd.amazon.eventstream", t)}
	s.sw.Raw(s.event("messageStart", map[string]any{"role": "assistant"}))
	idx := 0
	delta := func(d map[string]any) bool {
		return s.chunk(s.event("contentBlockDelta", map[string]any{"contentBlockIndex": idx, "delta": d}))
	}
	stop := func() {
		s.sw.Raw(s.event("contentBlockStop", map[string]any{"contentBlockIndex": idx}))
		idx++
	}
	if t.Reasoning != "" {
		for _, c := range chunks(t.Reasoning, t.ChunkRunes) {
			if !delta(map[string]any{"reasoningContent": map[string]string{"text": c}}) {
				return
			}
		}
		// The signature arrives in its own delta after the text.
		if !delta(map[string]any{"reasoningContent": map[string]string{"signature": bedrockSignature(t.Reasoning)}}) {
			return
		}
		stop()
	}
	if t.Text != "" {
		for _, c := range chunks(t.Text, t.ChunkRunes) {
			if !delta(map[string]any{"text": c}) {
				return
			}
		}
		stop()
	}
	for _, tc := range t.ToolCalls {
		start := s.event("contentBlockStart", map[string]any{
			"contentBlockIndex": idx,
			"start":             map[string]any{"toolUse": map[string]string{"toolUseId": tc.ID, "name": tc.Name}},
		})
		if !s.chunk(start) {
			return
		}
		for _, c := range chunks(orEmptyObject(tc.Arguments), t.ChunkRunes) {
			if !delta(map[string]any{"toolUse": map[string]string{"input": c}}) {
				return
			}
		}
		stop()
	}
	s.sw.Raw(s.event("messageStop", map[string]any{"stopReason": bedrockStopReason(t)}))
	s.sw.Raw(s.event("metadata", map[string]any{
		"usage":   bedrockUsage(t.Usage),
		"metrics": map[string]int{"latencyMs": 42},
	}))
}

// eventstreamFrame encodes one application/vnd.amazon.eventstream frame
// with string headers:
//
//	total_len | headers_len | prelude_crc | headers | payload | message_crc
func eventstreamFrame(headers [][2]string, payload []byte) []byte {
	var h []byte
	for _, kv := range headers {
		if len(kv[0]) > 255 || len(kv[1]) > 65535 {
			panic(fmt.Sprintf("fakeprovider: event-stream header %q too long", kv[0]))
		}
		h = append(h, byte(len(kv[0])))
		h = append(h, kv[0]...)
		h = append(h, 7) // string
		h = binary.BigEndian.AppendUint16(h, uint16(len(kv[1])))
		h = append(h, kv[1]...)
	}
	total := 12 + len(h) + len(payload) + 4
	b := make([]byte, 0, total)
	b = binary.BigEndian.AppendUint32(b, uint32(total))
	b = binary.BigEndian.AppendUint32(b, uint32(len(h)))
	b = binary.BigEndian.AppendUint32(b, crc32.ChecksumIEEE(b[:8]))
	b = append(b, h...)
	b = append(b, payload...)
	return binary.BigEndian.AppendUint32(b, crc32.ChecksumIEEE(b))
}
