package wiretest

import (
	"errors"
	"io"
	"time"

	llmv1 "github.com/fabro-sh/fabro-go/gen/fabro/llm/v1"
	"github.com/fabro-sh/fabro-go/services/llmgateway/fakeprovider"
	"github.com/fabro-sh/fabro-go/services/llmgateway/internal/codec"
)

// FaultCase is a scripted fault and the check its outcome must pass,
// streaming and not.
type FaultCase struct {
	Name  string
	Fault fakeprovider.Fault
	// Check validates the error of a streamed (stream=true) or unary call.
	Check func(err error, stream bool) error
}

func kind(err error, k llmv1.ErrorKind) error {
	var ce *codec.Error
	if !errors.As(err, &ce) {
		return errors.New("not a *codec.Error: " + errString(err))
	}
	if ce.Kind != k {
		return errors.New("kind " + ce.Kind.String() + ", want " + k.String() + ": " + ce.Message)
	}
	return nil
}

func errString(err error) string {
	if err == nil {
		return "<nil>"
	}
	return err.Error()
}

// OpenAIFaults are the fake's faults as an OpenAI codec must see them.
var OpenAIFaults = []FaultCase{{
	Name:  "429 with Retry-After",
	Fault: fakeprovider.Fault{Kind: fakeprovider.FaultRateLimit, RetryAfter: 2 * time.Second},
	Check: func(err error, _ bool) error {
		if e := kind(err, llmv1.ErrorKind_ERROR_KIND_RATE_LIMIT); e != nil {
			return e
		}
		ce := err.(*codec.Error)
		if ce.RetryAfter != 2*time.Second || ce.StatusCode != 429 || ce.Code != "rate_limit_exceeded" || ce.RequestID != "req_fake" {
			return errors.New("unexpected fields: " + ce.Message)
		}
		return nil
	},
}, {
	Name:  "503 overloaded",
	Fault: fakeprovider.Fault{Kind: fakeprovider.FaultOverloaded},
	Check: func(err error, _ bool) error { return kind(err, llmv1.ErrorKind_ERROR_KIND_OVERLOADED) },
}, {
	Name:  "500",
	Fault: fakeprovider.Fault{Kind: fakeprovider.FaultServerError},
	Check: func(err error, _ bool) error { return kind(err, llmv1.ErrorKind_ERROR_KIND_SERVER) },
}, {
	Name:  "401",
	Fault: fakeprovider.Fault{Kind: fakeprovider.FaultAuth},
	Check: func(err error, _ bool) error { return kind(err, llmv1.ErrorKind_ERROR_KIND_AUTHENTICATION) },
}, {
	Name:  "mid-stream error",
	Fault: fakeprovider.Fault{Kind: fakeprovider.FaultMidStreamError, AfterChunks: 2},
	Check: func(err error, _ bool) error { return kind(err, llmv1.ErrorKind_ERROR_KIND_SERVER) },
}, {
	Name:  "malformed chunk",
	Fault: fakeprovider.Fault{Kind: fakeprovider.FaultMalformedChunk, AfterChunks: 2},
	Check: func(err error, stream bool) error {
		if stream {
			return kind(err, llmv1.ErrorKind_ERROR_KIND_STREAM_DECODE)
		}
		return kind(err, llmv1.ErrorKind_ERROR_KIND_RESPONSE_DECODE)
	},
}, {
	Name:  "connection reset",
	Fault: fakeprovider.Fault{Kind: fakeprovider.FaultConnectionReset, AfterChunks: 2},
	Check: func(err error, _ bool) error {
		if !errors.Is(err, io.ErrUnexpectedEOF) {
			return errors.New("want io.ErrUnexpectedEOF, got " + errString(err))
		}
		return nil
	},
}}
