// Package openairesponses is the openai-responses codec: the OpenAI
// Responses API (POST {base}/responses), used stateless (store:false) with
// reasoning items replayed as opaque parts.
package openairesponses

import (
	"context"
	"encoding/json"
	"io"
	"net/http"

	llmv1 "github.com/fabro-sh/fabro-go/gen/fabro/llm/v1"
	"github.com/fabro-sh/fabro-go/services/llmgateway/internal/codec"
	"github.com/fabro-sh/fabro-go/services/llmgateway/internal/codec/openaiwire"
	"github.com/fabro-sh/fabro-go/services/llmgateway/internal/codec/sse"
)

// Codec implements codec.Codec for the Responses API.
type Codec struct{}

var _ codec.Codec = Codec{}

// New returns the openai-responses codec.
func New() codec.Codec { return Codec{} }

// Name implements codec.Codec.
func (Codec) Name() string { return "openai-responses" }

// NewRequest implements codec.Codec.
func (Codec) NewRequest(ctx context.Context, call *codec.Call) (*http.Request, error) {
	body, err := buildBody(call)
	if err != nil {
		return nil, err
	}
	return openaiwire.NewHTTPRequest(ctx, call, "/responses", body)
}

// ParseError implements codec.Codec.
func (Codec) ParseError(resp *http.Response, body []byte) *codec.Error {
	return openaiwire.ParseError(resp, body)
}

// NewDecoder implements codec.Codec.
func (Codec) NewDecoder(body io.Reader) codec.Decoder {
	r := sse.NewReader(body)
	r.KeepCut = true // an event cut off by the end still counts; the end marker decides
	return &decoder{sse: r, q: make([]codec.Event, 0, 8)}
}

func decodeError(format string, args ...any) *codec.Error {
	return openaiwire.DecodeError("openai-responses", format, args...)
}

// finish maps a terminal response's status. Completed with function calls
// is TOOL_CALLS; incomplete for max_output_tokens is LENGTH, for
// content_filter CONTENT_FILTER, otherwise INCOMPLETE.
func finish(status, reason string, tools, refused bool) (llmv1.FinishReason, string) {
	switch status {
	case "completed":
		switch {
		case refused:
			return llmv1.FinishReason_FINISH_REASON_CONTENT_FILTER, status
		case tools:
			return llmv1.FinishReason_FINISH_REASON_TOOL_CALLS, status
		}
		return llmv1.FinishReason_FINISH_REASON_STOP, status
	case "incomplete":
		switch reason {
		case "max_output_tokens":
			return llmv1.FinishReason_FINISH_REASON_LENGTH, reason
		case "content_filter":
			return llmv1.FinishReason_FINISH_REASON_CONTENT_FILTER, reason
		}
		if reason == "" {
			reason = status
		}
		return llmv1.FinishReason_FINISH_REASON_INCOMPLETE, reason
	case "failed":
		return llmv1.FinishReason_FINISH_REASON_ERROR, status
	}
	return llmv1.FinishReason_FINISH_REASON_OTHER, status
}

// wireUsage: input_tokens includes cached tokens, output_tokens includes
// reasoning tokens.
type wireUsage struct {
	InputTokens        int64 `json:"input_tokens"`
	OutputTokens       int64 `json:"output_tokens"`
	InputTokensDetails struct {
		CachedTokens int64 `json:"cached_tokens"`
	} `json:"input_tokens_details"`
	OutputTokensDetails struct {
		ReasoningTokens int64 `json:"reasoning_tokens"`
	} `json:"output_tokens_details"`
}

func (u *wireUsage) normalize() codec.Usage {
	in := u.InputTokens - u.InputTokensDetails.CachedTokens
	if in < 0 {
		in = 0
	}
	return codec.Usage{Input: in, Output: u.OutputTokens, Reasoning: u.OutputTokensDetails.ReasoningTokens, CacheRead: u.InputTokensDetails.CachedTokens}
}

type response struct {
	ID                string            `json:"id"`
	Model             string            `json:"model"`
	Status            string            `json:"status"`
	Output            []json.RawMessage `json:"output"`
	Usage             *wireUsage        `json:"usage"`
	IncompleteDetails *struct {
		Reason string `json:"reason"`
	} `json:"incomplete_details"`
	Error *openaiwire.ErrorObject `json:"error"`
}

type item struct {
	Type      string `json:"type"`
	ID        string `json:"id"`
	CallID    string `json:"call_id"`
	Name      string `json:"name"`
	Arguments string `json:"arguments"`
	Summary   []struct {
		Text string `json:"text"`
	} `json:"summary"`
	Content []struct {
		Type    string `json:"type"`
		Text    string `json:"text"`
		Refusal string `json:"refusal"`
	} `json:"content"`
}

// DecodeResponse implements codec.Codec for a response object, emitting
// the events the stream would have.
func (Codec) DecodeResponse(body io.Reader, emit func(*codec.Event) error) error {
	var r response
	if err := openaiwire.ReadResponse("openai-responses", body, &r); err != nil {
		return err
	}
	if r.Status == "failed" && r.Error != nil {
		return r.Error.StreamError()
	}
	ev := &codec.Event{}
	send := func(e codec.Event) error { *ev = e; return emit(ev) }
	key := 0
	block := func(e codec.Event, dt codec.EventType, text, opaque string) error {
		e.Type, e.Key = codec.EventBlockStart, key
		key++
		if err := send(e); err != nil {
			return err
		}
		if text != "" {
			if err := send(codec.Event{Type: dt, Key: e.Key, Text: text}); err != nil {
				return err
			}
		}
		return send(codec.Event{Type: codec.EventBlockEnd, Key: e.Key, Opaque: opaque})
	}
	if err := send(codec.Event{Type: codec.EventStart, ResponseID: r.ID, Model: r.Model}); err != nil {
		return err
	}
	tools, refused := false, false
	for _, raw := range r.Output {
		var it item
		if err := json.Unmarshal(raw, &it); err != nil {
			return &codec.Error{Kind: llmv1.ErrorKind_ERROR_KIND_RESPONSE_DECODE, Message: "openai-responses: decode output item: " + err.Error()}
		}
		var err error
		switch it.Type {
		case "message":
			for _, c := range it.Content {
				text := c.Text
				if c.Type == "refusal" {
					text, refused = c.Refusal, true
				}
				if err = block(codec.Event{Kind: llmv1.ContentBlockKind_CONTENT_BLOCK_KIND_TEXT}, codec.EventTextDelta, text, ""); err != nil {
					return err
				}
			}
		case "function_call":
			tools = true
			err = block(codec.Event{Kind: llmv1.ContentBlockKind_CONTENT_BLOCK_KIND_TOOL_CALL, ToolCallID: it.CallID, ToolName: it.Name}, codec.EventToolCallDelta, it.Arguments, "")
		case "reasoning":
			for _, s := range it.Summary {
				if err = block(codec.Event{Kind: llmv1.ContentBlockKind_CONTENT_BLOCK_KIND_REASONING}, codec.EventReasoningDelta, s.Text, ""); err != nil {
					return err
				}
			}
			for _, c := range it.Content {
				if c.Type == "reasoning_text" {
					if err = block(codec.Event{Kind: llmv1.ContentBlockKind_CONTENT_BLOCK_KIND_REASONING}, codec.EventReasoningDelta, c.Text, ""); err != nil {
						return err
					}
				}
			}
			err = block(codec.Event{Kind: llmv1.ContentBlockKind_CONTENT_BLOCK_KIND_OPAQUE, OpaqueKind: OpaqueReasoning}, 0, "", string(raw))
		}
		if err != nil {
			return err
		}
	}
	if r.Usage != nil {
		if err := send(codec.Event{Type: codec.EventUsage, Usage: r.Usage.normalize()}); err != nil {
			return err
		}
	}
	reason := ""
	if r.IncompleteDetails != nil {
		reason = r.IncompleteDetails.Reason
	}
	f, rawFinish := finish(r.Status, reason, tools, refused)
	return send(codec.Event{Type: codec.EventFinish, Finish: f, RawFinish: rawFinish})
}

func jsonUnmarshal(b []byte, v any) error { return json.Unmarshal(b, v) }
