// Package codec defines what a wire codec is: the translation between the
// gateway's normalized request and response (fabro.llm.v1) and one provider
// protocol. A codec knows the wire format only; retries, failover,
// credentials, cost and assembly of the final Response live in the gateway.
//
// The five codecs are openai-chat, openai-responses, anthropic-messages,
// gemini-generate and bedrock-converse, one sub-package each.
package codec

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	llmv1 "github.com/fabro-sh/fabro-go/gen/fabro/llm/v1"
)

// Codec builds provider requests and decodes provider responses.
type Codec interface {
	// Name is the catalog's codec name, e.g. "openai-chat".
	Name() string
	// NewRequest builds the HTTP request for one attempt: URL from the
	// provider's base URL, body, auth headers from call.Credentials, and the
	// provider's extra headers. It fails with an *Error of kind
	// INVALID_REQUEST for a request the protocol cannot express.
	NewRequest(ctx context.Context, call *Call) (*http.Request, error)
	// NewDecoder returns a decoder for a 2xx streaming response body.
	NewDecoder(body io.Reader) Decoder
	// DecodeResponse decodes a 2xx non-streaming response into events,
	// calling emit for each in stream order, so one assembler serves both.
	DecodeResponse(body io.Reader, emit func(*Event) error) error
	// ParseError classifies a non-2xx response (status, headers, body).
	ParseError(resp *http.Response, body []byte) *Error
}

// Call is one attempt against one provider and model.
type Call struct {
	Provider    *llmv1.Provider
	Model       string // the upstream model id sent on the wire
	Request     *llmv1.Request
	Credentials map[string]string // by credential name, e.g. OPENAI_API_KEY
	Stream      bool
}

// Decoder reads a provider stream. Next fills ev, which the caller owns and
// reuses, so decoding a text delta needs at most the delta's own string:
// the goal is 2 allocations per text delta or fewer.
type Decoder interface {
	// Next decodes the next event into ev. It returns io.EOF after the
	// provider's normal end of stream, and an *Error of kind STREAM_DECODE
	// for a malformed chunk, or of the provider's kind for an error the
	// provider sends mid-stream. An io.EOF before the provider's end marker
	// is io.ErrUnexpectedEOF: a stream must never end silently truncated.
	Next(ev *Event) error
}

// EventType says what an Event carries.
type EventType uint8

// Event types, in the order a stream normally produces them.
const (
	EventNone EventType = iota
	// EventStart: ResponseID and Model, when the provider reports them.
	EventStart
	// EventBlockStart opens a block identified by Key (codec-defined, unique
	// within the response): Kind, and for tool calls ToolCallID and ToolName,
	// for opaque blocks OpaqueKind, for reasoning the provider redacted
	// Redacted.
	EventBlockStart
	// EventTextDelta, EventReasoningDelta, EventToolCallDelta append Text
	// to the block Key (for tool calls Text is a JSON arguments fragment).
	EventTextDelta
	EventReasoningDelta
	EventToolCallDelta
	// EventSignature sets the block Key's signature (Signature) — reasoning
	// signatures, thought signatures, encrypted reasoning — returned untouched
	// on the next request. With Redacted, Signature is the encrypted payload
	// of reasoning the provider redacted.
	EventSignature
	// EventBlockEnd closes block Key; Opaque carries an opaque block's raw
	// provider JSON.
	EventBlockEnd
	// EventUsage: Usage holds cumulative counts so far (a later event
	// replaces an earlier one field by field where non-zero).
	EventUsage
	// EventFinish: Finish and RawFinish.
	EventFinish
)

// Event is one decoded stream event. Fields not used by Type are zero.
type Event struct {
	Type       EventType
	Key        int
	Kind       llmv1.ContentBlockKind
	Text       string
	ToolCallID string
	ToolName   string
	OpaqueKind string
	Opaque     string
	Signature  string
	// Redacted marks a REASONING block as redacted by the provider (Anthropic
	// redacted_thinking, Bedrock redactedContent), on its EventBlockStart or
	// any EventSignature: the block's signature is then the encrypted
	// payload to replay. Reasoning with a signature and no text is not
	// redacted by itself (Anthropic thinking with display omitted, Gemini
	// signature-only thoughts): only the codec knows, so only it says.
	Redacted   bool
	ResponseID string
	Model      string
	Usage      Usage
	Finish     llmv1.FinishReason
	RawFinish  string
}

// Reset zeroes ev for reuse.
func (ev *Event) Reset() { *ev = Event{} }

// Usage is token usage normalized so each token is counted once: Input
// excludes cache reads and writes; Reasoning is part of Output.
type Usage struct {
	Input, Output, Reasoning, CacheRead, CacheWrite int64
}

// Error is a classified provider or transport failure.
type Error struct {
	Kind       llmv1.ErrorKind
	Message    string // the provider's message, never a credential
	StatusCode int
	Code       string // the provider's error code or type
	RequestID  string
	RetryAfter time.Duration // from Retry-After or the body, 0 if unknown
}

func (e *Error) Error() string { return e.Message }

// UnreadableBody is the message of an error response whose body is in no
// shape the codec reads (a proxy's HTML page, plain text): the status only,
// never the body, which may quote anything, a credential included (the
// gateway logs it, redacted, at debug level).
func UnreadableBody(status int) string {
	return fmt.Sprintf("upstream answered %d %s, with a body in no known error shape", status, http.StatusText(status))
}

// OpaqueItem checks an opaque part a codec is about to send back verbatim:
// of kind prefix+t, its data must be one JSON object whose "type" is t, so
// a provider's item is replayed as the item its kind says and never as
// another (a reasoning item turned into a system message). It returns the
// data as raw JSON.
func OpaqueItem(kind, prefix, data string) (json.RawMessage, error) {
	t, ok := strings.CutPrefix(kind, prefix)
	var item struct {
		Type *string `json:"type"`
	}
	dec := json.NewDecoder(strings.NewReader(data))
	err := dec.Decode(&item)
	if _, end := dec.Token(); err != nil || end != io.EOF || !ok || t == "" || item.Type == nil || *item.Type != t {
		return nil, &Error{Kind: llmv1.ErrorKind_ERROR_KIND_INVALID_REQUEST,
			Message: fmt.Sprintf("opaque %s part is not one JSON object of type %q", kind, t)}
	}
	return json.RawMessage(data), nil
}
