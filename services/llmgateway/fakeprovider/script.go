// Package fakeprovider serves the five provider wire protocols —
// openai-chat, openai-responses, anthropic-messages, gemini-generate and
// bedrock-converse — from scripted turns, with injectable faults. The
// gateway's tests, the agent's tests, the benchmarks and offline demos run
// against it; its bytes follow the published APIs exactly.
package fakeprovider

import "time"

// Turn is one scripted model reply.
type Turn struct {
	Reasoning string     // reasoning/thinking text, sent before the text
	Text      string     // assistant text
	ToolCalls []ToolCall // parallel tool calls, in order
	// Finish is the normalized finish reason: "stop" (default, or
	// "tool_calls" when ToolCalls is set), "length", "content_filter".
	Finish string
	Usage  Usage
	// ChunkRunes splits Text and Reasoning into deltas of this many runes
	// (default 8); ChunkDelay sleeps between chunks (slow chunks), until
	// the client leaves.
	ChunkRunes int
	ChunkDelay time.Duration
	Fault      *Fault // nil: a clean reply
}

// ToolCall is one scripted tool call; Arguments is JSON text.
type ToolCall struct {
	ID, Name, Arguments string
}

// Usage is the scripted token usage, reported in each protocol's own shape.
type Usage struct {
	Input, Output, Reasoning, CacheRead, CacheWrite int
}

// FaultKind is an injected failure.
type FaultKind int

// Faults, each rendered the way the protocol's real service fails.
const (
	FaultNone FaultKind = iota
	// FaultRateLimit answers 429 with Retry-After (RetryAfter).
	FaultRateLimit
	// FaultOverloaded answers 529 (anthropic), 503 otherwise, "overloaded".
	FaultOverloaded
	// FaultServerError answers 500.
	FaultServerError
	// FaultMidStreamError sends AfterChunks chunks, then the protocol's
	// in-stream error event (bedrock: an exception frame).
	FaultMidStreamError
	// FaultMalformedChunk sends AfterChunks chunks, then bytes that do not
	// parse.
	FaultMalformedChunk
	// FaultConnectionReset sends AfterChunks chunks, then drops the TCP
	// connection without the end marker.
	FaultConnectionReset
	// FaultAuth answers 401 with the protocol's authentication error.
	FaultAuth
	// FaultStall sends AfterChunks chunks, then nothing more, holding the
	// connection open until the client leaves (an upstream that hangs).
	FaultStall
)

// Fault describes an injected failure.
type Fault struct {
	Kind        FaultKind
	RetryAfter  time.Duration
	AfterChunks int
}
