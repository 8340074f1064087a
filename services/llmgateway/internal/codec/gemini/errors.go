package gemini

import (
	"net/http"
	"strconv"
	"strings"
	"time"

	llmv1 "github.com/fabro-sh/fabro-go/gen/fabro/llm/v1"
	"github.com/fabro-sh/fabro-go/services/llmgateway/internal/codec"
	"github.com/fabro-sh/fabro-go/services/llmgateway/internal/codec/jsonscan"
)

// ParseError implements codec.Codec. The body is
// {"error":{"code":429,"message":"...","status":"RESOURCE_EXHAUSTED","details":[...]}},
// sometimes wrapped in an array; google.rpc.RetryInfo's retryDelay in
// details, or Retry-After, gives the wait.
func (geminiCodec) ParseError(resp *http.Response, body []byte) *codec.Error {
	obj := body
	if t := trimSpace(body); len(t) > 0 && t[0] == '[' {
		_ = jsonscan.Array(t, func(v []byte) error {
			if len(obj) == 0 || obj[0] != '{' {
				obj = v
			}
			return nil
		})
	}
	var errv []byte
	_ = jsonscan.Object(obj, func(k, v []byte) error {
		if string(k) == "error" {
			errv = v
		}
		return nil
	})
	var e *codec.Error
	if errv != nil {
		e = bodyError(resp.StatusCode, errv)
	} else {
		// Classified by its text, which is never the message.
		text := strings.TrimSpace(string(body[:min(len(body), 300)]))
		e = &codec.Error{Kind: kindOf(resp.StatusCode, "", text, ""), Message: "gemini: " + codec.UnreadableBody(resp.StatusCode)}
	}
	e.StatusCode = resp.StatusCode
	if e.RetryAfter == 0 {
		if v := resp.Header.Get("Retry-After"); v != "" {
			if s, err := strconv.ParseFloat(v, 64); err == nil && s > 0 {
				e.RetryAfter = time.Duration(s * float64(time.Second))
			}
		}
	}
	for _, h := range []string{"x-request-id", "x-goog-request-id"} {
		if v := resp.Header.Get(h); v != "" && e.RequestID == "" {
			e.RequestID = v
		}
	}
	return e
}

func trimSpace(b []byte) []byte {
	for len(b) > 0 && (b[0] == ' ' || b[0] == '\n' || b[0] == '\r' || b[0] == '\t') {
		b = b[1:]
	}
	return b
}

// bodyError classifies an error object ({"code","message","status",
// "details"}), in an HTTP error body or mid-stream (status 0: the HTTP code
// in "code" is used).
func bodyError(status int, errv []byte) *codec.Error {
	var scratch []byte
	var code int64
	var msg, st, reason string
	var retry time.Duration
	_ = jsonscan.Object(errv, func(k, v []byte) error {
		switch string(k) {
		case "code":
			code, _ = jsonscan.Int(v)
		case "message":
			msg, _ = jsonscan.String(&scratch, v)
		case "status":
			st, _ = jsonscan.String(&scratch, v)
		case "details":
			_ = jsonscan.Array(v, func(d []byte) error {
				_ = jsonscan.Object(d, func(k, v []byte) error {
					switch string(k) {
					case "retryDelay":
						if s, err := jsonscan.String(&scratch, v); err == nil {
							if dur, err := time.ParseDuration(s); err == nil {
								retry = dur
							}
						}
					case "reason":
						if reason == "" {
							reason, _ = jsonscan.String(&scratch, v)
						}
					}
					return nil
				})
				return nil
			})
		}
		return nil
	})
	if status == 0 {
		status = int(code)
	}
	if msg == "" {
		msg = st
	}
	codeName := st
	if reason != "" {
		codeName = reason
	}
	return &codec.Error{
		Kind:       kindOf(status, st, msg, reason),
		Message:    "gemini: " + msg,
		StatusCode: status,
		Code:       codeName,
		RetryAfter: retry,
	}
}

// kindOf classifies by the canonical status name first, then the HTTP code.
func kindOf(status int, st, msg, reason string) llmv1.ErrorKind {
	if reason == "API_KEY_INVALID" || strings.Contains(msg, "API key not valid") {
		return llmv1.ErrorKind_ERROR_KIND_AUTHENTICATION
	}
	switch st {
	case "INVALID_ARGUMENT", "FAILED_PRECONDITION", "OUT_OF_RANGE":
		if isContextLength(msg) {
			return llmv1.ErrorKind_ERROR_KIND_CONTEXT_LENGTH
		}
		return llmv1.ErrorKind_ERROR_KIND_INVALID_REQUEST
	case "UNAUTHENTICATED":
		return llmv1.ErrorKind_ERROR_KIND_AUTHENTICATION
	case "PERMISSION_DENIED":
		return llmv1.ErrorKind_ERROR_KIND_PERMISSION
	case "NOT_FOUND":
		return llmv1.ErrorKind_ERROR_KIND_NOT_FOUND
	case "RESOURCE_EXHAUSTED":
		return llmv1.ErrorKind_ERROR_KIND_RATE_LIMIT
	case "UNAVAILABLE":
		return llmv1.ErrorKind_ERROR_KIND_OVERLOADED
	case "DEADLINE_EXCEEDED":
		return llmv1.ErrorKind_ERROR_KIND_TIMEOUT
	case "CANCELLED":
		return llmv1.ErrorKind_ERROR_KIND_CANCELLED
	case "INTERNAL", "UNKNOWN", "DATA_LOSS", "ABORTED":
		return llmv1.ErrorKind_ERROR_KIND_SERVER
	}
	switch {
	case status == 400 || status == 413:
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
	case status == 503:
		return llmv1.ErrorKind_ERROR_KIND_OVERLOADED
	case status >= 500 || status == 0:
		return llmv1.ErrorKind_ERROR_KIND_SERVER
	}
	return llmv1.ErrorKind_ERROR_KIND_INVALID_REQUEST
}

// isContextLength recognizes "The input token count (1200293) exceeds the
// maximum number of tokens allowed (1048576)." and its relatives.
func isContextLength(msg string) bool {
	m := strings.ToLower(msg)
	for _, s := range []string{"input token count", "exceeds the maximum number of tokens", "context window", "context length", "too many tokens"} {
		if strings.Contains(m, s) {
			return true
		}
	}
	return false
}
