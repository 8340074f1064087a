package bedrock

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	llmv1 "github.com/fabro-sh/fabro-go/gen/fabro/llm/v1"
	"github.com/fabro-sh/fabro-go/services/llmgateway/internal/codec"
)

// wireUsage is Converse's TokenUsage.
type wireUsage struct {
	InputTokens           int64 `json:"inputTokens"`
	OutputTokens          int64 `json:"outputTokens"`
	TotalTokens           int64 `json:"totalTokens"`
	CacheReadInputTokens  int64 `json:"cacheReadInputTokens"`
	CacheWriteInputTokens int64 `json:"cacheWriteInputTokens"`
}

// normalize counts each token once. AWS documents inputTokens as excluding
// cacheReadInputTokens and cacheWriteInputTokens, with totalTokens the sum
// of all four; that is the common case and passes through unchanged. Some
// model families (OpenAI models on ConverseStream, Bifrost PR #6942) report
// inputTokens inclusive of the cache counts instead; totalTokens tells the
// two apart (it then equals input + output), and the cache share is taken
// out of Input. Reasoning is inside outputTokens and is not reported
// separately by Converse.
func (u wireUsage) normalize() codec.Usage {
	out := codec.Usage{
		Input:      u.InputTokens,
		Output:     u.OutputTokens,
		CacheRead:  u.CacheReadInputTokens,
		CacheWrite: u.CacheWriteInputTokens,
	}
	cache := u.CacheReadInputTokens + u.CacheWriteInputTokens
	if cache > 0 && u.TotalTokens == u.InputTokens+u.OutputTokens && u.InputTokens >= cache {
		out.Input = u.InputTokens - cache
	}
	return out
}

// Stop reasons, interned so decoding one does not allocate.
var stopReasons = []string{
	"end_turn", "tool_use", "max_tokens", "stop_sequence", "guardrail_intervened",
	"content_filtered", "malformed_model_output", "malformed_tool_use", "model_context_window_exceeded",
}

func stopReasonString(b []byte) string {
	for _, s := range stopReasons {
		if string(b) == s {
			return s
		}
	}
	return string(b)
}

// finishReason normalizes a Converse stopReason.
func finishReason(raw string) llmv1.FinishReason {
	switch raw {
	case "end_turn", "stop_sequence":
		return llmv1.FinishReason_FINISH_REASON_STOP
	case "tool_use":
		return llmv1.FinishReason_FINISH_REASON_TOOL_CALLS
	case "max_tokens", "model_context_window_exceeded":
		return llmv1.FinishReason_FINISH_REASON_LENGTH
	case "guardrail_intervened", "content_filtered":
		return llmv1.FinishReason_FINISH_REASON_CONTENT_FILTER
	case "malformed_model_output", "malformed_tool_use":
		return llmv1.FinishReason_FINISH_REASON_ERROR
	case "":
		return llmv1.FinishReason_FINISH_REASON_UNSPECIFIED
	}
	return llmv1.FinishReason_FINISH_REASON_OTHER
}

// contextLengthHints are the phrases Bedrock's ValidationException uses when
// the prompt does not fit the model ("Input is too long for requested
// model.", "prompt is too long: 200049 tokens > 200000 maximum", ...).
var contextLengthHints = []string{
	"too long", "context length", "context window", "too many input tokens",
	"maximum context", "input length", "exceeds the maximum number of tokens",
}

// classify maps a Bedrock error name (x-amzn-ErrorType, :exception-type or
// :error-code, in any case) and HTTP status to an error kind.
func classify(code string, status int, message string) llmv1.ErrorKind {
	switch strings.ToLower(code) {
	case "throttlingexception", "servicequotaexceededexception", "toomanyrequestsexception":
		return llmv1.ErrorKind_ERROR_KIND_RATE_LIMIT
	case "modelnotreadyexception", "serviceunavailableexception":
		return llmv1.ErrorKind_ERROR_KIND_OVERLOADED
	case "internalserverexception", "modelerrorexception", "modelstreamerrorexception", "internalfailure":
		return llmv1.ErrorKind_ERROR_KIND_SERVER
	case "modeltimeoutexception":
		return llmv1.ErrorKind_ERROR_KIND_TIMEOUT
	case "validationexception":
		m := strings.ToLower(message)
		for _, h := range contextLengthHints {
			if strings.Contains(m, h) {
				return llmv1.ErrorKind_ERROR_KIND_CONTEXT_LENGTH
			}
		}
		return llmv1.ErrorKind_ERROR_KIND_INVALID_REQUEST
	case "accessdeniedexception":
		return llmv1.ErrorKind_ERROR_KIND_PERMISSION
	case "unrecognizedclientexception", "invalidsignatureexception", "incompletesignature",
		"incompletesignatureexception", "missingauthenticationtokenexception", "missingauthenticationtoken",
		"expiredtokenexception", "requestexpired", "invalidclienttokenid", "unauthorizedexception":
		return llmv1.ErrorKind_ERROR_KIND_AUTHENTICATION
	case "resourcenotfoundexception":
		return llmv1.ErrorKind_ERROR_KIND_NOT_FOUND
	}
	switch {
	case status == http.StatusUnauthorized:
		return llmv1.ErrorKind_ERROR_KIND_AUTHENTICATION
	case status == http.StatusForbidden:
		return llmv1.ErrorKind_ERROR_KIND_PERMISSION
	case status == http.StatusNotFound:
		return llmv1.ErrorKind_ERROR_KIND_NOT_FOUND
	case status == http.StatusRequestTimeout:
		return llmv1.ErrorKind_ERROR_KIND_TIMEOUT
	case status == http.StatusTooManyRequests:
		return llmv1.ErrorKind_ERROR_KIND_RATE_LIMIT
	case status == http.StatusServiceUnavailable:
		return llmv1.ErrorKind_ERROR_KIND_OVERLOADED
	case status >= 500 || status == http.StatusFailedDependency || status == 0:
		return llmv1.ErrorKind_ERROR_KIND_SERVER
	}
	return llmv1.ErrorKind_ERROR_KIND_INVALID_REQUEST
}

// streamException turns an exception frame into the error it reports.
func streamException(typ string, payload []byte) *codec.Error {
	var body struct {
		Message string `json:"message"`
	}
	_ = json.Unmarshal(payload, &body) // a payload without a message still classifies by type
	msg := body.Message
	if msg == "" {
		msg = typ
	}
	return &codec.Error{
		Kind:    classify(typ, 0, msg),
		Message: "bedrock: " + typ + ": " + msg,
		Code:    typ,
	}
}

// errorName extracts the short error name from x-amzn-ErrorType
// ("ThrottlingException:http://internal.amazon.com/coral/...") or a body
// __type ("com.amazon.coral.service#ThrottlingException").
func errorName(s string) string {
	if i := strings.IndexByte(s, ':'); i >= 0 {
		s = s[:i]
	}
	if i := strings.LastIndexByte(s, '#'); i >= 0 {
		s = s[i+1:]
	}
	return strings.TrimSpace(s)
}

// ParseError implements codec.Codec.
func (c *Codec) ParseError(resp *http.Response, body []byte) *codec.Error {
	var b struct {
		Message  string `json:"message"`
		MessageU string `json:"Message"`
		Type     string `json:"__type"`
		Code     string `json:"code"`
	}
	_ = json.Unmarshal(body, &b) // non-JSON bodies (proxies) classify by status
	code := errorName(resp.Header.Get("X-Amzn-Errortype"))
	if code == "" {
		code = errorName(b.Type)
	}
	if code == "" {
		code = b.Code
	}
	msg := firstNonEmpty(b.Message, b.MessageU)
	text := msg // what classifies it: the body's own text when no field holds one
	if msg == "" {
		text = strings.TrimSpace(string(body[:min(len(body), 512)]))
		msg = codec.UnreadableBody(resp.StatusCode)
	}
	e := &codec.Error{
		Kind:       classify(code, resp.StatusCode, text),
		Message:    "bedrock: " + msg,
		StatusCode: resp.StatusCode,
		Code:       code,
		RequestID:  resp.Header.Get("X-Amzn-Requestid"),
	}
	// Bedrock sends no Retry-After; honour one a proxy in front may add.
	if s, err := strconv.Atoi(resp.Header.Get("Retry-After")); err == nil && s > 0 {
		e.RetryAfter = time.Duration(s) * time.Second
	}
	return e
}

func firstNonEmpty(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// Converse response shapes, for the non-streaming path (allocation is not
// the concern there; encoding/json keeps it short).
type converseResponse struct {
	Output *struct {
		Message *struct {
			Content []json.RawMessage `json:"content"`
		} `json:"message"`
	} `json:"output"`
	StopReason string     `json:"stopReason"`
	Usage      *wireUsage `json:"usage"`
}

type contentBlock struct {
	Text    *string `json:"text"`
	ToolUse *struct {
		ToolUseID string          `json:"toolUseId"`
		Name      string          `json:"name"`
		Input     json.RawMessage `json:"input"`
	} `json:"toolUse"`
	ReasoningContent *struct {
		ReasoningText *struct {
			Text      string `json:"text"`
			Signature string `json:"signature"`
		} `json:"reasoningText"`
		RedactedContent *string `json:"redactedContent"`
	} `json:"reasoningContent"`
}

// DecodeResponse implements codec.Codec.
func (c *Codec) DecodeResponse(body io.Reader, emit func(*codec.Event) error) error {
	data, err := io.ReadAll(body)
	if err != nil {
		return fmt.Errorf("bedrock: read response: %w", err)
	}
	var r converseResponse
	if err := json.Unmarshal(data, &r); err != nil {
		return &codec.Error{Kind: llmv1.ErrorKind_ERROR_KIND_RESPONSE_DECODE, Message: "bedrock: decode response: " + err.Error()}
	}
	// Bedrock can answer 200 without output on some internal and guardrail
	// failures (Envoy AI Gateway guards the same case).
	if r.Output == nil || r.Output.Message == nil {
		return &codec.Error{Kind: llmv1.ErrorKind_ERROR_KIND_SERVER, Message: "bedrock: response has no output message", StatusCode: http.StatusOK}
	}
	var ev codec.Event
	send := func(fill func(*codec.Event)) error {
		ev.Reset()
		fill(&ev)
		return emit(&ev)
	}
	if err := send(func(e *codec.Event) { e.Type = codec.EventStart }); err != nil {
		return err
	}
	for i, raw := range r.Output.Message.Content {
		var b contentBlock
		if err := json.Unmarshal(raw, &b); err != nil {
			return &codec.Error{Kind: llmv1.ErrorKind_ERROR_KIND_RESPONSE_DECODE, Message: "bedrock: decode content block: " + err.Error()}
		}
		var evs []codec.Event
		switch {
		case b.Text != nil:
			evs = []codec.Event{
				{Type: codec.EventBlockStart, Kind: llmv1.ContentBlockKind_CONTENT_BLOCK_KIND_TEXT},
				{Type: codec.EventTextDelta, Text: *b.Text},
			}
		case b.ToolUse != nil:
			args := "{}"
			if in := bytes.TrimSpace(b.ToolUse.Input); len(in) > 0 && string(in) != "null" {
				args = string(in)
			}
			evs = []codec.Event{
				{Type: codec.EventBlockStart, Kind: llmv1.ContentBlockKind_CONTENT_BLOCK_KIND_TOOL_CALL, ToolCallID: b.ToolUse.ToolUseID, ToolName: b.ToolUse.Name},
				{Type: codec.EventToolCallDelta, Text: args},
			}
		case b.ReasoningContent != nil && b.ReasoningContent.ReasoningText != nil:
			rt := b.ReasoningContent.ReasoningText
			evs = []codec.Event{
				{Type: codec.EventBlockStart, Kind: llmv1.ContentBlockKind_CONTENT_BLOCK_KIND_REASONING},
				{Type: codec.EventReasoningDelta, Text: rt.Text},
			}
			if rt.Signature != "" {
				evs = append(evs, codec.Event{Type: codec.EventSignature, Signature: rt.Signature})
			}
		case b.ReasoningContent != nil && b.ReasoningContent.RedactedContent != nil:
			// A reasoning block marked Redacted whose signature is the base64
			// redactedContent (ReasoningPart's contract for redaction).
			evs = []codec.Event{
				{Type: codec.EventBlockStart, Kind: llmv1.ContentBlockKind_CONTENT_BLOCK_KIND_REASONING, Redacted: true},
				{Type: codec.EventSignature, Signature: *b.ReasoningContent.RedactedContent, Redacted: true},
			}
		default:
			// Blocks with no neutral form travel as the raw ContentBlock,
			// replayed byte for byte.
			var compact bytes.Buffer
			if err := json.Compact(&compact, raw); err != nil {
				return &codec.Error{Kind: llmv1.ErrorKind_ERROR_KIND_RESPONSE_DECODE, Message: "bedrock: decode content block: " + err.Error()}
			}
			evs = []codec.Event{{Type: codec.EventBlockStart, Kind: llmv1.ContentBlockKind_CONTENT_BLOCK_KIND_OPAQUE, OpaqueKind: OpaqueKind}}
			evs = append(evs, codec.Event{Type: codec.EventBlockEnd, Opaque: compact.String()})
		}
		if evs[len(evs)-1].Type != codec.EventBlockEnd {
			evs = append(evs, codec.Event{Type: codec.EventBlockEnd})
		}
		for j := range evs {
			evs[j].Key = i
			if err := emit(&evs[j]); err != nil {
				return err
			}
		}
	}
	if err := send(func(e *codec.Event) {
		e.Type, e.Finish, e.RawFinish = codec.EventFinish, finishReason(r.StopReason), r.StopReason
	}); err != nil {
		return err
	}
	if r.Usage != nil {
		return send(func(e *codec.Event) { e.Type, e.Usage = codec.EventUsage, r.Usage.normalize() })
	}
	return nil
}
