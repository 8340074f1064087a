package fakeprovider

import (
	"encoding/json"
	"fmt"
	"hash/crc32"
	"net/http"
)

// The Anthropic Messages API (POST /v1/messages): a message object, or with
// "stream": true the SSE sequence message_start, (content_block_start,
// content_block_delta*, content_block_stop)*, message_delta, message_stop.
// Errors are {"type":"error","error":{"type","message"},"request_id"}; an
// overload is HTTP 529 before the stream and `event: error` inside it.

type anthropicRequest struct {
	Model  string `json:"model"`
	Stream bool   `json:"stream"`
}

func anthropicErrorBody(typ, msg string) []byte {
	b, _ := json.Marshal(map[string]any{
		"type":       "error",
		"error":      map[string]string{"type": typ, "message": msg},
		"request_id": "req_fake_01",
	})
	return b
}

// anthropicStopReason renders a Turn's normalized finish.
func anthropicStopReason(t Turn) string {
	switch t.Finish {
	case "length":
		return "max_tokens"
	case "content_filter":
		return "refusal"
	case "tool_calls":
		return "tool_use"
	case "stop":
		return "end_turn"
	}
	if len(t.ToolCalls) > 0 {
		return "tool_use"
	}
	return "end_turn"
}

// fakeSignature is a stable stand-in for a provider's opaque signature.
func fakeSignature(prefix, s string) string {
	return fmt.Sprintf("%s%08x", prefix, crc32.ChecksumIEEE([]byte(s)))
}

func anthropicToolID(tc ToolCall, i int) string {
	if tc.ID != "" {
		return tc.ID
	}
	return fmt.Sprintf("toolu_fake_%02d", i+1)
}

func anthropicUsage(u Usage, output int) map[string]int {
	return map[string]int{
		"input_tokens":                u.Input,
		"cache_creation_input_tokens": u.CacheWrite,
		"cache_read_input_tokens":     u.CacheRead,
		"output_tokens":               output,
	}
}

func anthropicArgs(s string) json.RawMessage {
	if s == "" {
		return json.RawMessage("{}")
	}
	return json.RawMessage(s)
}

func renderAnthropic(w http.ResponseWriter, r *http.Request, body []byte, t Turn) {
	anthropicRateLimits(w.Header())
	var req anthropicRequest
	if err := json.Unmarshal(body, &req); err != nil {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusBadRequest)
		w.Write(anthropicErrorBody("invalid_request_error", "request body is not JSON: "+err.Error()))
		return
	}
	w.Header().Set("request-id", "req_fake_01")
	if t.Fault != nil && t.Fault.Kind == FaultOverloaded {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("x-should-retry", "true")
		w.WriteHeader(529)
		w.Write(anthropicErrorBody("overloaded_error", "Overloaded"))
		return
	}
	if preStreamFault(w, t, func(status int, kind FaultKind) []byte {
		switch kind {
		case FaultRateLimit:
			return anthropicErrorBody("rate_limit_error", "This request would exceed the rate limit for your organization.")
		case FaultAuth:
			return anthropicErrorBody("authentication_error", "invalid x-api-key")
		}
		return anthropicErrorBody("api_error", "Internal server error")
	}) {
		return
	}
	model := req.Model
	if model == "" {
		model = "claude-fake"
	}
	if !req.Stream {
		anthropicMessage(w, t, model)
		return
	}
	anthropicStream(w, r, t, model)
}

func anthropicMessage(w http.ResponseWriter, t Turn, model string) {
	var content []any
	if t.Reasoning != "" {
		content = append(content, map[string]string{"type": "thinking", "thinking": t.Reasoning, "signature": fakeSignature("EqFake", t.Reasoning)})
	}
	if t.Text != "" {
		content = append(content, map[string]string{"type": "text", "text": t.Text})
	}
	for i, tc := range t.ToolCalls {
		content = append(content, map[string]any{"type": "tool_use", "id": anthropicToolID(tc, i), "name": tc.Name, "input": anthropicArgs(tc.Arguments)})
	}
	if content == nil {
		content = []any{}
	}
	b, err := json.Marshal(map[string]any{
		"id": "msg_fake_01", "type": "message", "role": "assistant", "model": model,
		"content": content, "stop_reason": anthropicStopReason(t), "stop_sequence": nil,
		"usage": anthropicUsage(t.Usage, t.Usage.Output),
	})
	if err != nil {
		http.Error(w, "fakeprovider: "+err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Write(b)
}

func anthropicStream(w http.ResponseWriter, r *http.Request, t Turn, model string) {
	sw := newStreamWriter(w, r, "text/event-stream; charset=utf-8", t)
	midErr := func() []byte {
		return []byte("event: error\ndata: " + string(anthropicErrorBody("overloaded_error", "Overloaded")) + "\n\n")
	}
	send := func(event string, v any) bool {
		b, err := json.Marshal(v)
		if err != nil {
			panic(err) // scripted values always marshal
		}
		return sw.Chunk([]byte("event: "+event+"\ndata: "+string(b)+"\n\n"), midErr)
	}
	startUsage := anthropicUsage(t.Usage, 1)
	if !send("message_start", map[string]any{"type": "message_start", "message": map[string]any{
		"id": "msg_fake_01", "type": "message", "role": "assistant", "model": model, "content": []any{},
		"stop_reason": nil, "stop_sequence": nil, "usage": startUsage,
	}}) {
		return
	}
	sw.Raw([]byte("event: ping\ndata: {\"type\": \"ping\"}\n\n"))
	index := 0
	block := func(start map[string]any, deltas []map[string]any) bool {
		if !send("content_block_start", map[string]any{"type": "content_block_start", "index": index, "content_block": start}) {
			return false
		}
		for _, d := range deltas {
			if !send("content_block_delta", map[string]any{"type": "content_block_delta", "index": index, "delta": d}) {
				return false
			}
		}
		ok := send("content_block_stop", map[string]any{"type": "content_block_stop", "index": index})
		index++
		return ok
	}
	if t.Reasoning != "" {
		var ds []map[string]any
		for _, c := range chunks(t.Reasoning, t.ChunkRunes) {
			ds = append(ds, map[string]any{"type": "thinking_delta", "thinking": c})
		}
		ds = append(ds, map[string]any{"type": "signature_delta", "signature": fakeSignature("EqFake", t.Reasoning)})
		if !block(map[string]any{"type": "thinking", "thinking": "", "signature": ""}, ds) {
			return
		}
	}
	if t.Text != "" {
		var ds []map[string]any
		for _, c := range chunks(t.Text, t.ChunkRunes) {
			ds = append(ds, map[string]any{"type": "text_delta", "text": c})
		}
		if !block(map[string]any{"type": "text", "text": ""}, ds) {
			return
		}
	}
	for i, tc := range t.ToolCalls {
		// Every tool_use opens with an empty fragment, as the API does.
		ds := []map[string]any{{"type": "input_json_delta", "partial_json": ""}}
		for _, c := range chunks(tc.Arguments, t.ChunkRunes) {
			ds = append(ds, map[string]any{"type": "input_json_delta", "partial_json": c})
		}
		if !block(map[string]any{"type": "tool_use", "id": anthropicToolID(tc, i), "name": tc.Name, "input": map[string]any{}}, ds) {
			return
		}
	}
	if !send("message_delta", map[string]any{"type": "message_delta",
		"delta": map[string]any{"stop_reason": anthropicStopReason(t), "stop_sequence": nil},
		"usage": map[string]int{"output_tokens": t.Usage.Output}}) {
		return
	}
	send("message_stop", map[string]any{"type": "message_stop"})
}
