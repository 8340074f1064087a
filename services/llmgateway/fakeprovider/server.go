package fakeprovider

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"
	"unicode/utf8"
)

// Request is one request the fake received, recorded for assertions.
type Request struct {
	Protocol string // "openai-chat", "openai-responses", "anthropic-messages", "gemini-generate", "bedrock-converse"
	Method   string
	Path     string
	Query    string
	Header   http.Header
	Body     []byte
}

// Server is an http.Handler serving every protocol from one queue of
// scripted turns. Mount it under httptest.NewServer or a real listener;
// point a provider's base URL at it (see the route table in Handler).
type Server struct {
	mu       sync.Mutex
	turns    []Turn
	script   func(Request) Turn // when set, answers every request
	requests []Request
}

// New returns a fake provider answering with turns in order.
func New(turns ...Turn) *Server { return &Server{turns: turns} }

// Enqueue appends turns to the queue.
func (s *Server) Enqueue(turns ...Turn) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.turns = append(s.turns, turns...)
}

// Script makes f answer every request, replacing the queue: for replies
// that depend on the request, and for endless load in benchmarks.
func (s *Server) Script(f func(Request) Turn) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.script = f
}

// Requests returns every request received so far.
func (s *Server) Requests() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Request(nil), s.requests...)
}

// next records req and returns the turn to answer it with.
func (s *Server) next(req Request) (Turn, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.requests = append(s.requests, req)
	if s.script != nil {
		return s.script(req), true
	}
	if len(s.turns) == 0 {
		return Turn{}, false
	}
	t := s.turns[0]
	s.turns = s.turns[1:]
	return t, true
}

// renderer writes one turn in one protocol; body is the request body.
type renderer func(w http.ResponseWriter, r *http.Request, body []byte, t Turn)

// route maps a request to its protocol. Base URLs to configure:
//
//	openai-chat, openai-responses  http://HOST/v1        (POST /v1/chat/completions, /v1/responses)
//	anthropic-messages             http://HOST           (POST /v1/messages)
//	gemini-generate                http://HOST/v1beta    (POST /v1beta/models/{model}:generateContent, :streamGenerateContent?alt=sse)
//	bedrock-converse               http://HOST           (POST /model/{modelId}/converse, /converse-stream)
func route(r *http.Request) (string, renderer) {
	p := r.URL.Path
	switch {
	case strings.HasSuffix(p, "/chat/completions"):
		return "openai-chat", renderOpenAIChat
	case strings.HasSuffix(p, "/responses"):
		return "openai-responses", renderOpenAIResponses
	case strings.HasSuffix(p, "/v1/messages"):
		return "anthropic-messages", renderAnthropic
	case strings.Contains(p, "/models/") && (strings.HasSuffix(p, ":generateContent") || strings.HasSuffix(p, ":streamGenerateContent")):
		return "gemini-generate", renderGemini
	case strings.HasPrefix(p, "/model/") && (strings.HasSuffix(p, "/converse") || strings.HasSuffix(p, "/converse-stream")):
		return "bedrock-converse", renderBedrock
	}
	return "", nil
}

// ServeHTTP implements http.Handler.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	protocol, render := route(r)
	if render == nil || r.Method != http.MethodPost {
		http.Error(w, fmt.Sprintf("fakeprovider: no protocol serves %s %s", r.Method, r.URL.Path), http.StatusNotFound)
		return
	}
	body, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, "fakeprovider: read body: "+err.Error(), http.StatusBadRequest)
		return
	}
	turn, ok := s.next(Request{Protocol: protocol, Method: r.Method, Path: r.URL.Path, Query: r.URL.RawQuery, Header: r.Header.Clone(), Body: body})
	if !ok {
		http.Error(w, "fakeprovider: no scripted turn left", http.StatusInternalServerError)
		return
	}
	if f := turn.Fault; f != nil && (f.Kind <= FaultNone || f.Kind > FaultStall) {
		// Never a clean reply for a fault the fake cannot render.
		http.Error(w, fmt.Sprintf("fakeprovider: unknown fault kind %d", f.Kind), http.StatusInternalServerError)
		return
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	render(w, r, body, turn)
}

// chunks splits s into pieces of n runes (default 8), never splitting a rune.
func chunks(s string, n int) []string {
	if n <= 0 {
		n = 8
	}
	var out []string
	for len(s) > 0 {
		i, count := 0, 0
		for i < len(s) && count < n {
			_, size := utf8.DecodeRuneInString(s[i:])
			i += size
			count++
		}
		out = append(out, s[:i])
		s = s[i:]
	}
	return out
}

// streamWriter writes a streamed body chunk by chunk, applying a turn's
// chunk delay and mid-stream faults. Renderers call Chunk for every
// content-bearing chunk; the fault fires once AfterChunks chunks are out.
type streamWriter struct {
	w       http.ResponseWriter
	ctx     context.Context // the request's: delays and stalls end with it
	flusher http.Flusher
	turn    Turn
	sent    int
}

func newStreamWriter(w http.ResponseWriter, r *http.Request, contentType string, t Turn) *streamWriter {
	w.Header().Set("Content-Type", contentType)
	w.WriteHeader(http.StatusOK)
	f, _ := w.(http.Flusher)
	return &streamWriter{w: w, ctx: r.Context(), flusher: f, turn: t}
}

// Raw writes b and flushes, without counting it as a content chunk.
func (sw *streamWriter) Raw(b []byte) {
	sw.w.Write(b)
	if sw.flusher != nil {
		sw.flusher.Flush()
	}
}

// Chunk writes one content chunk. It returns false when a fault has ended
// the stream: the renderer must stop writing. midStreamError renders the
// protocol's own in-stream error event.
func (sw *streamWriter) Chunk(b []byte, midStreamError func() []byte) bool {
	if f := sw.turn.Fault; f != nil && sw.sent >= f.AfterChunks {
		switch f.Kind {
		case FaultMidStreamError:
			sw.Raw(midStreamError())
			return false
		case FaultMalformedChunk:
			sw.Raw([]byte("data: {\"this is not\": json\n\n"))
			return false
		case FaultConnectionReset:
			// Aborting the handler makes net/http drop the connection
			// without the terminating chunk: the client sees an unexpected EOF.
			panic(http.ErrAbortHandler)
		case FaultStall:
			<-sw.ctx.Done()
			return false
		}
	}
	if sw.sent > 0 && sw.turn.ChunkDelay > 0 {
		t := time.NewTimer(sw.turn.ChunkDelay)
		select {
		case <-t.C:
		case <-sw.ctx.Done(): // the client left: stop, as a real server would
			t.Stop()
			return false
		}
	}
	sw.Raw(b)
	sw.sent++
	return true
}

// preStreamFault answers a turn's HTTP-level fault (429, 5xx, 401) with the
// given protocol error body, and reports whether it did.
func preStreamFault(w http.ResponseWriter, t Turn, body func(status int, kind FaultKind) []byte) bool {
	if t.Fault == nil {
		return false
	}
	var status int
	switch t.Fault.Kind {
	case FaultRateLimit:
		status = http.StatusTooManyRequests
		if t.Fault.RetryAfter > 0 {
			w.Header().Set("Retry-After", fmt.Sprint(int(t.Fault.RetryAfter.Round(time.Second)/time.Second)))
		}
	case FaultOverloaded:
		status = http.StatusServiceUnavailable
	case FaultServerError:
		status = http.StatusInternalServerError
	case FaultAuth:
		status = http.StatusUnauthorized
	default:
		return false
	}
	b := body(status, t.Fault.Kind)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	w.Write(b)
	return true
}

// Rate-limit headers as the real services send them on every reply:
// OpenAI's resets are durations, Anthropic's RFC 3339 times.
const (
	RateLimitRequests          = 500
	RateLimitRequestsRemaining = 499
	RateLimitTokens            = 30000
	RateLimitTokensRemaining   = 29000
)

func openAIRateLimits(h http.Header) {
	h.Set("x-ratelimit-limit-requests", fmt.Sprint(RateLimitRequests))
	h.Set("x-ratelimit-remaining-requests", fmt.Sprint(RateLimitRequestsRemaining))
	h.Set("x-ratelimit-reset-requests", "120ms")
	h.Set("x-ratelimit-limit-tokens", fmt.Sprint(RateLimitTokens))
	h.Set("x-ratelimit-remaining-tokens", fmt.Sprint(RateLimitTokensRemaining))
	h.Set("x-ratelimit-reset-tokens", "2s")
}

func anthropicRateLimits(h http.Header) {
	reset := time.Now().Add(time.Minute).UTC().Format(time.RFC3339)
	h.Set("anthropic-ratelimit-requests-limit", fmt.Sprint(RateLimitRequests))
	h.Set("anthropic-ratelimit-requests-remaining", fmt.Sprint(RateLimitRequestsRemaining))
	h.Set("anthropic-ratelimit-requests-reset", reset)
	h.Set("anthropic-ratelimit-tokens-limit", fmt.Sprint(RateLimitTokens))
	h.Set("anthropic-ratelimit-tokens-remaining", fmt.Sprint(RateLimitTokensRemaining))
	h.Set("anthropic-ratelimit-tokens-reset", reset)
}
