package anthropic

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	llmv1 "github.com/fabro-sh/fabro-go/gen/fabro/llm/v1"
	"github.com/fabro-sh/fabro-go/services/llmgateway/internal/codec"
	"github.com/fabro-sh/fabro-go/services/llmgateway/internal/codec/jsonscan"
)

// ParseError implements codec.Codec. The body is
// {"type":"error","error":{"type":"...","message":"..."},"request_id":"req_..."};
// anything else (a proxy's HTML page) is classified by status alone.
func (anthropicCodec) ParseError(resp *http.Response, body []byte) *codec.Error {
	typ, msg, reqID := errorBody(body)
	e := &codec.Error{StatusCode: resp.StatusCode, Code: typ, Message: msg, RequestID: reqID}
	if e.RequestID == "" {
		e.RequestID = resp.Header.Get("request-id")
	}
	if e.Message == "" {
		e.Message = codec.UnreadableBody(resp.StatusCode)
	}
	e.Message = "anthropic: " + e.Message
	e.RetryAfter = retryAfter(resp.Header)
	e.Kind = kindOf(resp.StatusCode, typ, msg)
	return e
}

// errorBody extracts error.type, error.message and request_id.
func errorBody(body []byte) (typ, msg, reqID string) {
	var scratch []byte
	var errv []byte
	_ = jsonscan.Object(body, func(k, v []byte) error {
		switch string(k) {
		case "error":
			errv = v
		case "request_id":
			reqID, _ = jsonscan.String(&scratch, v)
		}
		return nil
	})
	if errv != nil {
		typ, msg = errorObject(errv)
	}
	return typ, msg, reqID
}

func errorObject(v []byte) (typ, msg string) {
	var scratch []byte
	_ = jsonscan.Object(v, func(k, v []byte) error {
		switch string(k) {
		case "type":
			typ, _ = jsonscan.String(&scratch, v)
		case "message":
			msg, _ = jsonscan.String(&scratch, v)
		}
		return nil
	})
	return typ, msg
}

// streamError is the codec.Error of an `event: error` after HTTP 200, with
// the kind the same error type would have as an HTTP status.
func streamError(errv, data []byte) error {
	if errv == nil {
		return decodeErr(fmt.Errorf("error event without error"), data)
	}
	typ, msg := errorObject(errv)
	if msg == "" {
		msg = typ
	}
	return &codec.Error{Kind: kindOf(0, typ, msg), Message: "anthropic: " + msg, Code: typ}
}

// kindOf classifies by the error type first (it is the most specific, and
// the only signal mid-stream), then by status.
func kindOf(status int, typ, msg string) llmv1.ErrorKind {
	switch typ {
	case "overloaded_error":
		return llmv1.ErrorKind_ERROR_KIND_OVERLOADED
	case "rate_limit_error":
		return llmv1.ErrorKind_ERROR_KIND_RATE_LIMIT
	case "authentication_error":
		return llmv1.ErrorKind_ERROR_KIND_AUTHENTICATION
	case "permission_error":
		return llmv1.ErrorKind_ERROR_KIND_PERMISSION
	case "not_found_error":
		return llmv1.ErrorKind_ERROR_KIND_NOT_FOUND
	case "timeout_error":
		return llmv1.ErrorKind_ERROR_KIND_TIMEOUT
	case "api_error":
		return llmv1.ErrorKind_ERROR_KIND_SERVER
	case "invalid_request_error", "request_too_large":
		if isContextLength(msg) {
			return llmv1.ErrorKind_ERROR_KIND_CONTEXT_LENGTH
		}
		return llmv1.ErrorKind_ERROR_KIND_INVALID_REQUEST
	}
	switch {
	case status == 400 || status == 413 || status == 422:
		if isContextLength(msg) {
			return llmv1.ErrorKind_ERROR_KIND_CONTEXT_LENGTH
		}
		return llmv1.ErrorKind_ERROR_KIND_INVALID_REQUEST
	case status == 401:
		return llmv1.ErrorKind_ERROR_KIND_AUTHENTICATION
	case status == 403:
		return llmv1.ErrorKind_ERROR_KIND_PERMISSION
	case status == 404:
		return llmv1.ErrorKind_ERROR_KIND_NOT_FOUND
	case status == 408 || status == 504:
		return llmv1.ErrorKind_ERROR_KIND_TIMEOUT
	case status == 429:
		return llmv1.ErrorKind_ERROR_KIND_RATE_LIMIT
	case status == 529 || status == 503:
		return llmv1.ErrorKind_ERROR_KIND_OVERLOADED
	case status >= 500:
		return llmv1.ErrorKind_ERROR_KIND_SERVER
	case status == 0:
		// An unknown mid-stream error type: the provider failed.
		return llmv1.ErrorKind_ERROR_KIND_SERVER
	}
	return llmv1.ErrorKind_ERROR_KIND_INVALID_REQUEST
}

// isContextLength recognizes the context-window messages, such as
// "prompt is too long: 207791 tokens > 200000 maximum".
func isContextLength(msg string) bool {
	m := strings.ToLower(msg)
	for _, s := range []string{"prompt is too long", "context window", "context length", "too many tokens", "input is too long", "exceeds the context"} {
		if strings.Contains(m, s) {
			return true
		}
	}
	return false
}

// retryAfter reads retry-after-ms, then Retry-After (seconds or an HTTP
// date).
func retryAfter(h http.Header) time.Duration {
	if v := h.Get("retry-after-ms"); v != "" {
		if ms, err := strconv.ParseFloat(v, 64); err == nil && ms > 0 {
			return time.Duration(ms * float64(time.Millisecond))
		}
	}
	v := h.Get("Retry-After")
	if v == "" {
		return 0
	}
	if s, err := strconv.ParseFloat(v, 64); err == nil && s > 0 {
		return time.Duration(s * float64(time.Second))
	}
	if t, err := http.ParseTime(v); err == nil {
		if d := time.Until(t); d > 0 {
			return d
		}
	}
	return 0
}
