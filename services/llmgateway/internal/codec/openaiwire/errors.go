package openaiwire

import (
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"time"

	llmv1 "github.com/fabro-sh/fabro-go/gen/fabro/llm/v1"
	"github.com/fabro-sh/fabro-go/services/llmgateway/internal/codec"
)

// ParseError classifies a non-2xx OpenAI-style response. The body is
// {"error":{"message","type","param","code"}}; OpenAI-compatible hosts vary
// ({"error":"text"}, {"message":...}, a one-element array), so each shape
// is tried, and a body in none of them is never the message (see
// codec.UnreadableBody).
func ParseError(resp *http.Response, body []byte) *codec.Error {
	e := &codec.Error{StatusCode: resp.StatusCode}
	typ, code, msg := errorFields(body)
	e.Code, e.Message = code, msg
	if e.Code == "" {
		e.Code = typ
	}
	if e.Message == "" {
		e.Message = codec.UnreadableBody(resp.StatusCode)
	}
	e.Kind = Classify(resp.StatusCode, typ, code, msg)
	e.RequestID = resp.Header.Get("x-request-id")
	e.RetryAfter = RetryAfter(resp.Header, time.Now())
	return e
}

// StreamError turns an in-stream error object (chat `data: {"error":{...}}`,
// responses `error` and `response.failed`) into a classified error.
func StreamError(typ, code, msg string) *codec.Error {
	c := code
	if c == "" {
		c = typ
	}
	if msg == "" {
		msg = "provider reported an error mid-stream"
	}
	return &codec.Error{Kind: Classify(0, typ, code, msg), Code: c, Message: msg}
}

type errorBody struct {
	Error   json.RawMessage `json:"error"`
	Message string          `json:"message"`
	Type    string          `json:"type"`
	Code    json.RawMessage `json:"code"`
}

// ErrorObject is OpenAI's error object, in an error body, a mid-stream
// chunk or event, or a failed response.
type ErrorObject struct {
	Message string          `json:"message"`
	Type    string          `json:"type"`
	Code    json.RawMessage `json:"code"` // a string, a number or null
}

// StreamError classifies an in-stream error object.
func (o *ErrorObject) StreamError() *codec.Error {
	return StreamError(o.Type, rawCode(o.Code), o.Message)
}

// ErrorValue classifies the value of an in-stream or response "error"
// member: an error object, or a bare string (some compatible hosts).
func ErrorValue(raw json.RawMessage) *codec.Error {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return StreamError("", "", s)
	}
	var o ErrorObject
	_ = json.Unmarshal(raw, &o)
	return o.StreamError()
}

func errorFields(body []byte) (typ, code, msg string) {
	body = []byte(strings.TrimSpace(string(body)))
	if len(body) > 0 && body[0] == '[' { // Gemini's OpenAI-compatible endpoint
		var arr []json.RawMessage
		if json.Unmarshal(body, &arr) == nil && len(arr) > 0 {
			body = arr[0]
		}
	}
	var b errorBody
	if json.Unmarshal(body, &b) != nil {
		return "", "", ""
	}
	typ, code, msg = b.Type, rawCode(b.Code), b.Message
	if len(b.Error) > 0 {
		var s string
		if json.Unmarshal(b.Error, &s) == nil {
			return typ, code, s
		}
		var o ErrorObject
		if json.Unmarshal(b.Error, &o) == nil {
			return o.Type, rawCode(o.Code), o.Message
		}
	}
	return typ, code, msg
}

// rawCode reads a code that is a string, a number or null.
func rawCode(raw json.RawMessage) string {
	if len(raw) == 0 || string(raw) == "null" {
		return ""
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	return string(raw)
}

// Classify maps an HTTP status (0 for an in-stream error) and the
// provider's error type, code and message to an error kind. The code and
// message win over the status where they are more specific: a 400 can be a
// context-length error, a 429 can be a quota error (still RATE_LIMIT, with
// the code telling the gateway not to retry the same key).
func Classify(status int, typ, code, msg string) llmv1.ErrorKind {
	tc := strings.ToLower(typ + " " + code)
	lm := strings.ToLower(msg)
	switch {
	case strings.Contains(tc, "context_length_exceeded"), strings.Contains(tc, "string_above_max_length") && strings.Contains(lm, "token"),
		strings.Contains(lm, "maximum context length"), strings.Contains(lm, "context length"), strings.Contains(lm, "context window"),
		strings.Contains(lm, "prompt is too long"), strings.Contains(lm, "too many tokens") && status != http.StatusTooManyRequests:
		return llmv1.ErrorKind_ERROR_KIND_CONTEXT_LENGTH
	case strings.Contains(tc, "content_filter"), strings.Contains(tc, "content_policy"), strings.Contains(tc, "safety"),
		strings.Contains(lm, "content management policy"):
		return llmv1.ErrorKind_ERROR_KIND_CONTENT_FILTER
	case strings.Contains(tc, "overloaded"), strings.Contains(lm, "overloaded"):
		return llmv1.ErrorKind_ERROR_KIND_OVERLOADED
	}
	switch status {
	case http.StatusBadRequest, http.StatusUnprocessableEntity, http.StatusRequestEntityTooLarge, http.StatusConflict:
		return llmv1.ErrorKind_ERROR_KIND_INVALID_REQUEST
	case http.StatusUnauthorized:
		return llmv1.ErrorKind_ERROR_KIND_AUTHENTICATION
	case http.StatusPaymentRequired, http.StatusForbidden:
		return llmv1.ErrorKind_ERROR_KIND_PERMISSION
	case http.StatusNotFound:
		return llmv1.ErrorKind_ERROR_KIND_NOT_FOUND
	case http.StatusRequestTimeout, http.StatusGatewayTimeout:
		return llmv1.ErrorKind_ERROR_KIND_TIMEOUT
	case http.StatusTooManyRequests:
		return llmv1.ErrorKind_ERROR_KIND_RATE_LIMIT
	case http.StatusServiceUnavailable, 529:
		return llmv1.ErrorKind_ERROR_KIND_OVERLOADED
	}
	if status >= 500 {
		return llmv1.ErrorKind_ERROR_KIND_SERVER
	}
	// In-stream errors carry no status: classify by type and code.
	switch {
	case strings.Contains(tc, "rate_limit"), strings.Contains(tc, "insufficient_quota"), strings.Contains(tc, "tokens"), strings.Contains(tc, "requests"):
		return llmv1.ErrorKind_ERROR_KIND_RATE_LIMIT
	case strings.Contains(tc, "invalid_api_key"), strings.Contains(tc, "authentication"):
		return llmv1.ErrorKind_ERROR_KIND_AUTHENTICATION
	case strings.Contains(tc, "permission"):
		return llmv1.ErrorKind_ERROR_KIND_PERMISSION
	case strings.Contains(tc, "model_not_found"), strings.Contains(tc, "not_found"):
		return llmv1.ErrorKind_ERROR_KIND_NOT_FOUND
	case strings.Contains(tc, "invalid_request"), strings.Contains(tc, "invalid_prompt"), strings.Contains(tc, "unsupported"):
		return llmv1.ErrorKind_ERROR_KIND_INVALID_REQUEST
	case strings.Contains(tc, "timeout"):
		return llmv1.ErrorKind_ERROR_KIND_TIMEOUT
	}
	if status >= 400 {
		return llmv1.ErrorKind_ERROR_KIND_INVALID_REQUEST
	}
	return llmv1.ErrorKind_ERROR_KIND_SERVER
}

// RetryAfter reads retry-after-ms (OpenAI), then Retry-After in seconds
// or as an HTTP date; 0 when absent or unparsable.
func RetryAfter(h http.Header, now time.Time) time.Duration {
	if v := h.Get("retry-after-ms"); v != "" {
		if ms, err := strconv.ParseFloat(v, 64); err == nil && ms > 0 {
			return time.Duration(ms * float64(time.Millisecond))
		}
	}
	v := h.Get("Retry-After")
	if v == "" {
		return 0
	}
	if s, err := strconv.ParseFloat(v, 64); err == nil {
		if s <= 0 {
			return 0
		}
		return time.Duration(s * float64(time.Second))
	}
	if t, err := http.ParseTime(v); err == nil && t.After(now) {
		return t.Sub(now)
	}
	return 0
}
