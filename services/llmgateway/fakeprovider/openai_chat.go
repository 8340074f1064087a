package fakeprovider

import (
	"encoding/json"
	"fmt"
	"net/http"
	"time"
)

// openAIRequest holds the request fields the OpenAI renderers echo.
type openAIRequest struct {
	Model         string `json:"model"`
	Stream        bool   `json:"stream"`
	StreamOptions *struct {
		IncludeUsage bool `json:"include_usage"`
	} `json:"stream_options"`
}

// openAIError is OpenAI's error body: {"error":{"message","type","param","code"}}.
func openAIError(status int, kind FaultKind) []byte {
	var typ, code, msg string
	switch kind {
	case FaultRateLimit:
		typ, code, msg = "requests", "rate_limit_exceeded", "Rate limit reached for requests per min (RPM): Limit 500, Used 500, Requested 1. Please try again in 120ms."
	case FaultOverloaded:
		typ, code, msg = "server_error", "server_is_overloaded", "The server is overloaded. Please try again later."
	case FaultServerError:
		typ, code, msg = "server_error", "", "The server had an error while processing your request. Sorry about that!"
	case FaultAuth:
		typ, code, msg = "invalid_request_error", "invalid_api_key", "Incorrect API key provided: sk-fake***. You can find your API key at https://platform.openai.com/account/api-keys."
	default:
		typ, msg = "server_error", http.StatusText(status)
	}
	return openAIErrorJSON(typ, code, msg)
}

func openAIErrorJSON(typ, code, msg string) []byte {
	e := map[string]any{"message": msg, "type": typ, "param": nil, "code": nil}
	if code != "" {
		e["code"] = code
	}
	b, _ := json.Marshal(map[string]any{"error": e})
	return b
}

// openAIMidStreamError is the in-stream error a chat stream ends with.
func openAIMidStreamError() []byte {
	return append(append([]byte("data: "), openAIErrorJSON("server_error", "server_error", "The server had an error while processing your request. Sorry about that!")...), '\n', '\n')
}

// finishReason is the turn's normalized finish reason, defaulted.
func finishReason(t Turn) string {
	switch {
	case t.Finish != "":
		return t.Finish
	case len(t.ToolCalls) > 0:
		return "tool_calls"
	}
	return "stop"
}

// openAIHeaders sets what every OpenAI response carries.
func openAIHeaders(w http.ResponseWriter) {
	w.Header().Set("x-request-id", "req_fake")
	w.Header().Set("openai-processing-ms", "1")
}

// nonStreamFault renders a mid-stream fault of a non-streamed reply: an
// in-stream error becomes a 500, a malformed chunk a cut JSON body, a reset
// a dropped connection. It reports whether it did.
func nonStreamFault(w http.ResponseWriter, t Turn, full []byte) bool {
	if t.Fault == nil {
		return false
	}
	switch t.Fault.Kind {
	case FaultMidStreamError:
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusInternalServerError)
		w.Write(openAIError(http.StatusInternalServerError, FaultServerError))
	case FaultMalformedChunk:
		w.Header().Set("Content-Type", "application/json")
		w.Write(full[:len(full)/2])
	case FaultConnectionReset:
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Content-Length", fmt.Sprint(len(full)))
		w.Write(full[:len(full)/2])
		if f, ok := w.(http.Flusher); ok {
			f.Flush() // the client has the headers and half the body
		}
		panic(http.ErrAbortHandler)
	default:
		return false
	}
	return true
}

type chatUsage struct {
	PromptTokens        int `json:"prompt_tokens"`
	CompletionTokens    int `json:"completion_tokens"`
	TotalTokens         int `json:"total_tokens"`
	PromptTokensDetails struct {
		CachedTokens int `json:"cached_tokens"`
		AudioTokens  int `json:"audio_tokens"`
	} `json:"prompt_tokens_details"`
	CompletionTokensDetails struct {
		ReasoningTokens          int `json:"reasoning_tokens"`
		AudioTokens              int `json:"audio_tokens"`
		AcceptedPredictionTokens int `json:"accepted_prediction_tokens"`
		RejectedPredictionTokens int `json:"rejected_prediction_tokens"`
	} `json:"completion_tokens_details"`
}

// chatUsageOf renders the scripted usage: prompt_tokens includes cached
// (and, having no cache-write field, written) tokens; completion_tokens
// includes reasoning tokens.
func chatUsageOf(u Usage) chatUsage {
	var c chatUsage
	c.PromptTokens = u.Input + u.CacheRead + u.CacheWrite
	c.CompletionTokens = u.Output
	c.TotalTokens = c.PromptTokens + c.CompletionTokens
	c.PromptTokensDetails.CachedTokens = u.CacheRead
	c.CompletionTokensDetails.ReasoningTokens = u.Reasoning
	return c
}

type chatChunk struct {
	ID                string            `json:"id"`
	Object            string            `json:"object"`
	Created           int64             `json:"created"`
	Model             string            `json:"model"`
	ServiceTier       string            `json:"service_tier"`
	SystemFingerprint *string           `json:"system_fingerprint"`
	Choices           []chatChunkChoice `json:"choices"`
	Usage             *chatUsage        `json:"usage"`
	Obfuscation       string            `json:"obfuscation"`
}

type chatChunkChoice struct {
	Index        int            `json:"index"`
	Delta        map[string]any `json:"delta"`
	Logprobs     *struct{}      `json:"logprobs"`
	FinishReason any            `json:"finish_reason"`
}

type chatToolCallJSON struct {
	Index    *int   `json:"index,omitempty"`
	ID       string `json:"id,omitempty"`
	Type     string `json:"type,omitempty"`
	Function struct {
		Name      string `json:"name,omitempty"`
		Arguments string `json:"arguments"`
	} `json:"function"`
}

// renderOpenAIChat renders a turn as a Chat Completions reply: a
// chat.completion object, or chat.completion.chunk SSE ending in
// `data: [DONE]`. Reasoning is sent as reasoning_content, as DeepSeek and
// other compatible hosts do (OpenAI itself never returns it).
func renderOpenAIChat(w http.ResponseWriter, r *http.Request, body []byte, t Turn) {
	openAIRateLimits(w.Header())
	var req openAIRequest
	if err := json.Unmarshal(body, &req); err != nil {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusBadRequest)
		w.Write(openAIErrorJSON("invalid_request_error", "", "We could not parse the JSON body of your request."))
		return
	}
	openAIHeaders(w)
	if preStreamFault(w, t, openAIError) {
		return
	}
	const id = "chatcmpl-fake"
	created := time.Now().Unix()
	fin := finishReason(t)
	if !req.Stream {
		msg := map[string]any{"role": "assistant", "content": nil, "refusal": nil, "annotations": []any{}}
		if t.Text != "" {
			msg["content"] = t.Text
		}
		if t.Reasoning != "" {
			msg["reasoning_content"] = t.Reasoning
		}
		if len(t.ToolCalls) > 0 {
			calls := make([]chatToolCallJSON, len(t.ToolCalls))
			for i, tc := range t.ToolCalls {
				calls[i].ID, calls[i].Type = tc.ID, "function"
				calls[i].Function.Name, calls[i].Function.Arguments = tc.Name, tc.Arguments
			}
			msg["tool_calls"] = calls
		}
		full, _ := json.Marshal(map[string]any{
			"id": id, "object": "chat.completion", "created": created, "model": req.Model,
			"choices":            []any{map[string]any{"index": 0, "message": msg, "logprobs": nil, "finish_reason": fin}},
			"usage":              chatUsageOf(t.Usage),
			"service_tier":       "default",
			"system_fingerprint": nil,
		})
		if nonStreamFault(w, t, full) {
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Write(full)
		return
	}

	sw := newStreamWriter(w, r, "text/event-stream; charset=utf-8", t)
	// Structs, not maps, keep OpenAI's field order (id first).
	chunk := func(delta map[string]any, finish any) []byte {
		b, _ := json.Marshal(chatChunk{
			ID: id, Object: "chat.completion.chunk", Created: created, Model: req.Model, ServiceTier: "default",
			Choices:     []chatChunkChoice{{Delta: delta, FinishReason: finish}},
			Obfuscation: "fk",
		})
		return sse(b)
	}
	sw.Raw(chunk(map[string]any{"role": "assistant", "content": "", "refusal": nil}, nil))
	for _, c := range chunks(t.Reasoning, t.ChunkRunes) {
		if !sw.Chunk(chunk(map[string]any{"reasoning_content": c}, nil), openAIMidStreamError) {
			return
		}
	}
	for _, c := range chunks(t.Text, t.ChunkRunes) {
		if !sw.Chunk(chunk(map[string]any{"content": c}, nil), openAIMidStreamError) {
			return
		}
	}
	for i, tc := range t.ToolCalls {
		var first chatToolCallJSON
		first.Index, first.ID, first.Type = &i, tc.ID, "function"
		first.Function.Name = tc.Name
		if !sw.Chunk(chunk(map[string]any{"tool_calls": []chatToolCallJSON{first}}, nil), openAIMidStreamError) {
			return
		}
		for _, a := range chunks(tc.Arguments, t.ChunkRunes) {
			var frag chatToolCallJSON
			frag.Index = &i
			frag.Function.Arguments = a
			if !sw.Chunk(chunk(map[string]any{"tool_calls": []chatToolCallJSON{frag}}, nil), openAIMidStreamError) {
				return
			}
		}
	}
	if !sw.Chunk(chunk(map[string]any{}, fin), openAIMidStreamError) {
		return
	}
	if req.StreamOptions != nil && req.StreamOptions.IncludeUsage {
		u := chatUsageOf(t.Usage)
		b, _ := json.Marshal(chatChunk{
			ID: id, Object: "chat.completion.chunk", Created: created, Model: req.Model, ServiceTier: "default",
			Choices: []chatChunkChoice{}, Usage: &u, Obfuscation: "fk",
		})
		sw.Raw(sse(b))
	}
	sw.Raw([]byte("data: [DONE]\n\n"))
}

// sse frames one data-only server-sent event.
func sse(data []byte) []byte {
	out := make([]byte, 0, len(data)+8)
	out = append(out, "data: "...)
	out = append(out, data...)
	return append(out, '\n', '\n')
}
