// Package openaichat is the openai-chat codec: OpenAI Chat Completions, and
// every OpenAI-compatible host (openrouter, groq, together, mistral,
// deepseek, xai, fireworks, ollama, vllm, moonshot, zai).
package openaichat

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"

	llmv1 "github.com/fabro-sh/fabro-go/gen/fabro/llm/v1"
	"github.com/fabro-sh/fabro-go/services/llmgateway/internal/codec"
	"github.com/fabro-sh/fabro-go/services/llmgateway/internal/codec/openaiwire"
	"github.com/fabro-sh/fabro-go/services/llmgateway/internal/codec/sse"
)

// Codec implements codec.Codec for Chat Completions.
type Codec struct{}

var _ codec.Codec = Codec{}

// New returns the openai-chat codec.
func New() codec.Codec { return Codec{} }

// Name implements codec.Codec.
func (Codec) Name() string { return "openai-chat" }

// NewRequest implements codec.Codec: POST {base}/chat/completions.
func (Codec) NewRequest(ctx context.Context, call *codec.Call) (*http.Request, error) {
	body, err := buildBody(call)
	if err != nil {
		return nil, err
	}
	return openaiwire.NewHTTPRequest(ctx, call, "/chat/completions", body)
}

// ParseError implements codec.Codec.
func (Codec) ParseError(resp *http.Response, body []byte) *codec.Error {
	return openaiwire.ParseError(resp, body)
}

// NewDecoder implements codec.Codec.
func (Codec) NewDecoder(body io.Reader) codec.Decoder {
	r := sse.NewReader(body)
	r.KeepCut = true // an event cut off by the end still counts; the end marker decides
	return &decoder{sse: r, q: make([]codec.Event, 0, 8), text: -1, thinking: -1}
}

func decodeError(format string, args ...any) *codec.Error {
	return openaiwire.DecodeError("openai-chat", format, args...)
}

// finish maps finish_reason. Some compatible hosts say "stop" after tool
// calls; the calls are what the turn is.
func finish(raw string, toolCalls bool) llmv1.FinishReason {
	switch raw {
	case "stop", "eos", "end_turn":
		if toolCalls {
			return llmv1.FinishReason_FINISH_REASON_TOOL_CALLS
		}
		return llmv1.FinishReason_FINISH_REASON_STOP
	case "length", "max_tokens", "model_length":
		return llmv1.FinishReason_FINISH_REASON_LENGTH
	case "tool_calls", "function_call":
		return llmv1.FinishReason_FINISH_REASON_TOOL_CALLS
	case "content_filter":
		return llmv1.FinishReason_FINISH_REASON_CONTENT_FILTER
	case "":
		return llmv1.FinishReason_FINISH_REASON_UNSPECIFIED
	case "error":
		return llmv1.FinishReason_FINISH_REASON_ERROR
	}
	return llmv1.FinishReason_FINISH_REASON_OTHER
}

// wireUsage is the usage object; prompt_tokens includes cached tokens and
// completion_tokens includes reasoning tokens.
type wireUsage struct {
	PromptTokens        int64 `json:"prompt_tokens"`
	CompletionTokens    int64 `json:"completion_tokens"`
	PromptTokensDetails struct {
		CachedTokens int64 `json:"cached_tokens"`
	} `json:"prompt_tokens_details"`
	CompletionTokensDetails struct {
		ReasoningTokens int64 `json:"reasoning_tokens"`
	} `json:"completion_tokens_details"`
	// DeepSeek reports its cache hits here instead.
	PromptCacheHitTokens int64 `json:"prompt_cache_hit_tokens"`
}

func (u *wireUsage) normalize() codec.Usage {
	cached := u.PromptTokensDetails.CachedTokens
	if cached == 0 {
		cached = u.PromptCacheHitTokens
	}
	input := u.PromptTokens - cached
	if input < 0 {
		input = 0
	}
	return codec.Usage{Input: input, Output: u.CompletionTokens, Reasoning: u.CompletionTokensDetails.ReasoningTokens, CacheRead: cached}
}

type completion struct {
	ID      string          `json:"id"`
	Model   string          `json:"model"`
	Choices []choice        `json:"choices"`
	Usage   *wireUsage      `json:"usage"`
	Error   json.RawMessage `json:"error"`
}

type choice struct {
	Message struct {
		Content          *string `json:"content"`
		Refusal          *string `json:"refusal"`
		ReasoningContent string  `json:"reasoning_content"`
		Reasoning        string  `json:"reasoning"`
		ToolCalls        []struct {
			ID       string `json:"id"`
			Function struct {
				Name      string          `json:"name"`
				Arguments json.RawMessage `json:"arguments"`
			} `json:"function"`
		} `json:"tool_calls"`
	} `json:"message"`
	FinishReason string `json:"finish_reason"`
}

// DecodeResponse implements codec.Codec for a chat.completion body.
func (Codec) DecodeResponse(body io.Reader, emit func(*codec.Event) error) error {
	var c completion
	if err := openaiwire.ReadResponse("openai-chat", body, &c); err != nil {
		return err
	}
	if len(c.Error) > 0 && string(c.Error) != "null" {
		return openaiwire.ErrorValue(c.Error)
	}
	ev := &codec.Event{}
	send := func(e codec.Event) error { *ev = e; return emit(ev) }
	if err := send(codec.Event{Type: codec.EventStart, ResponseID: c.ID, Model: c.Model}); err != nil {
		return err
	}
	key := 0
	block := func(kind llmv1.ContentBlockKind, dt codec.EventType, text string, id, name string) error {
		k := key
		key++
		if err := send(codec.Event{Type: codec.EventBlockStart, Key: k, Kind: kind, ToolCallID: id, ToolName: name}); err != nil {
			return err
		}
		if text != "" {
			if err := send(codec.Event{Type: dt, Key: k, Text: text}); err != nil {
				return err
			}
		}
		return send(codec.Event{Type: codec.EventBlockEnd, Key: k})
	}
	var raw string
	tools := false
	if len(c.Choices) > 0 {
		m := &c.Choices[0].Message
		raw = c.Choices[0].FinishReason
		reasoning := m.ReasoningContent
		if reasoning == "" {
			reasoning = m.Reasoning
		}
		if reasoning != "" {
			if err := block(llmv1.ContentBlockKind_CONTENT_BLOCK_KIND_REASONING, codec.EventReasoningDelta, reasoning, "", ""); err != nil {
				return err
			}
		}
		text := ""
		if m.Content != nil {
			text = *m.Content
		}
		if text == "" && m.Refusal != nil {
			text = *m.Refusal
			if raw == "stop" {
				raw = "content_filter"
			}
		}
		if text != "" {
			if err := block(llmv1.ContentBlockKind_CONTENT_BLOCK_KIND_TEXT, codec.EventTextDelta, text, "", ""); err != nil {
				return err
			}
		}
		for i, tc := range m.ToolCalls {
			tools = true
			id := tc.ID
			if id == "" {
				id = fmt.Sprintf("call_%d", i)
			}
			if err := block(llmv1.ContentBlockKind_CONTENT_BLOCK_KIND_TOOL_CALL, codec.EventToolCallDelta, arguments(tc.Function.Arguments), id, tc.Function.Name); err != nil {
				return err
			}
		}
	}
	if c.Usage != nil {
		if err := send(codec.Event{Type: codec.EventUsage, Usage: c.Usage.normalize()}); err != nil {
			return err
		}
	}
	return send(codec.Event{Type: codec.EventFinish, Finish: finish(raw, tools), RawFinish: raw})
}

// arguments reads function.arguments, a JSON string by the spec; some
// compatible hosts send the object itself.
func arguments(raw json.RawMessage) string {
	if len(raw) == 0 || string(raw) == "null" {
		return ""
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	return string(raw)
}
