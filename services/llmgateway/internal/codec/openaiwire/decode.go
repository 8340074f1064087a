package openaiwire

import (
	"encoding/json"
	"fmt"
	"io"

	llmv1 "github.com/fabro-sh/fabro-go/gen/fabro/llm/v1"
	"github.com/fabro-sh/fabro-go/services/llmgateway/internal/codec"
)

// DecodeError is a STREAM_DECODE error of the named codec.
func DecodeError(codecName, format string, args ...any) *codec.Error {
	return &codec.Error{Kind: llmv1.ErrorKind_ERROR_KIND_STREAM_DECODE, Message: codecName + ": " + fmt.Sprintf(format, args...)}
}

// ReadResponse reads a whole unary response body and decodes it into v.
// It reads first: a failed read (a reset connection) is a transport error
// for the gateway to classify, a body that does not parse is the codec's
// RESPONSE_DECODE error.
func ReadResponse(codecName string, body io.Reader, v any) error {
	data, err := io.ReadAll(body)
	if err != nil {
		return fmt.Errorf("%s: read response: %w", codecName, err)
	}
	if err := json.Unmarshal(data, v); err != nil {
		return &codec.Error{Kind: llmv1.ErrorKind_ERROR_KIND_RESPONSE_DECODE, Message: codecName + ": decode response: " + err.Error()}
	}
	return nil
}
