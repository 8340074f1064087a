package openaiwire

import (
	"net/http"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	llmv1 "github.com/fabro-sh/fabro-go/gen/fabro/llm/v1"
	"github.com/fabro-sh/fabro-go/services/llmgateway/internal/codec"
)

func TestParseError(t *testing.T) {
	now := time.Now()
	tests := []struct {
		name   string
		status int
		header http.Header
		body   string
		want   codec.Error
	}{{
		name: "context length 400", status: 400,
		body: `{"error":{"message":"This model's maximum context length is 128000 tokens. However, your messages resulted in 130000 tokens.","type":"invalid_request_error","param":"messages","code":"context_length_exceeded"}}`,
		want: codec.Error{Kind: llmv1.ErrorKind_ERROR_KIND_CONTEXT_LENGTH, StatusCode: 400, Code: "context_length_exceeded",
			Message: "This model's maximum context length is 128000 tokens. However, your messages resulted in 130000 tokens."},
	}, {
		name: "context length by message only (compatible host)", status: 400,
		body: `{"error":{"message":"Please reduce the length of the messages: prompt is too long","type":"invalid_request_error","code":null}}`,
		want: codec.Error{Kind: llmv1.ErrorKind_ERROR_KIND_CONTEXT_LENGTH, StatusCode: 400, Code: "invalid_request_error", Message: "Please reduce the length of the messages: prompt is too long"},
	}, {
		name: "unsupported parameter", status: 400,
		body: `{"error":{"code":"unsupported_parameter","message":"Unsupported parameter: 'max_tokens' is not supported with this model. Use 'max_completion_tokens' instead.","param":"max_tokens","type":"invalid_request_error"}}`,
		want: codec.Error{Kind: llmv1.ErrorKind_ERROR_KIND_INVALID_REQUEST, StatusCode: 400, Code: "unsupported_parameter", Message: "Unsupported parameter: 'max_tokens' is not supported with this model. Use 'max_completion_tokens' instead."},
	}, {
		name: "content policy", status: 400,
		body: `{"error":{"message":"Your request was rejected as a result of our safety system.","type":"invalid_request_error","code":"content_policy_violation"}}`,
		want: codec.Error{Kind: llmv1.ErrorKind_ERROR_KIND_CONTENT_FILTER, StatusCode: 400, Code: "content_policy_violation", Message: "Your request was rejected as a result of our safety system."},
	}, {
		name: "429 quota with retry-after-ms and request id", status: 429,
		header: http.Header{"Retry-After-Ms": {"1500"}, "Retry-After": {"9"}, "X-Request-Id": {"req_1"}},
		body:   `{"error":{"message":"You exceeded your current quota","type":"insufficient_quota","param":null,"code":"insufficient_quota"}}`,
		want: codec.Error{Kind: llmv1.ErrorKind_ERROR_KIND_RATE_LIMIT, StatusCode: 429, Code: "insufficient_quota", Message: "You exceeded your current quota",
			RequestID: "req_1", RetryAfter: 1500 * time.Millisecond},
	}, {
		name: "503 with an HTTP-date Retry-After", status: 503,
		header: http.Header{"Retry-After": {now.Add(30 * time.Second).UTC().Format(http.TimeFormat)}},
		body:   `{"error":{"message":"The engine is currently overloaded","type":"server_error","code":null}}`,
		want:   codec.Error{Kind: llmv1.ErrorKind_ERROR_KIND_OVERLOADED, StatusCode: 503, Code: "server_error", Message: "The engine is currently overloaded"},
	}, {
		name: "ollama string error 404", status: 404,
		body: `{"error":"model \"llama9\" not found, try pulling it first"}`,
		want: codec.Error{Kind: llmv1.ErrorKind_ERROR_KIND_NOT_FOUND, StatusCode: 404, Message: `model "llama9" not found, try pulling it first`},
	}, {
		name: "gemini-compat array body, numeric code", status: 403,
		body: `[{"error":{"code":403,"message":"Permission denied","status":"PERMISSION_DENIED"}}]`,
		want: codec.Error{Kind: llmv1.ErrorKind_ERROR_KIND_PERMISSION, StatusCode: 403, Code: "403", Message: "Permission denied"},
	}, {
		name: "html from a proxy", status: 502, body: `<html>Bad gateway</html>`,
		want: codec.Error{Kind: llmv1.ErrorKind_ERROR_KIND_SERVER, StatusCode: 502, Message: codec.UnreadableBody(502)},
	}, {
		name: "401", status: 401, body: `{"error":{"message":"Incorrect API key provided","type":"invalid_request_error","code":"invalid_api_key"}}`,
		want: codec.Error{Kind: llmv1.ErrorKind_ERROR_KIND_AUTHENTICATION, StatusCode: 401, Code: "invalid_api_key", Message: "Incorrect API key provided"},
	}, {
		name: "504", status: 504, body: ``,
		want: codec.Error{Kind: llmv1.ErrorKind_ERROR_KIND_TIMEOUT, StatusCode: 504, Message: codec.UnreadableBody(504)},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := tt.header
			if h == nil {
				h = http.Header{}
			}
			got := ParseError(&http.Response{StatusCode: tt.status, Header: h}, []byte(tt.body))
			if tt.name == "503 with an HTTP-date Retry-After" {
				if got.RetryAfter < 25*time.Second || got.RetryAfter > 31*time.Second {
					t.Errorf("RetryAfter = %v, want about 30s", got.RetryAfter)
				}
				got.RetryAfter = 0
			}
			if diff := cmp.Diff(tt.want, *got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}
