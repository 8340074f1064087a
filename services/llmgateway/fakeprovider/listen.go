package fakeprovider

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/http"
	"os"
	"slices"
	"strings"
	"time"
)

// Listening is a fake provider served on a real TCP listener.
type Listening struct {
	*Server
	// URL is the server's root, e.g. "http://127.0.0.1:43121".
	URL string
	srv *http.Server
	lis net.Listener
}

// Listen serves s on addr ("127.0.0.1:0" picks a port) until Close. The
// agent's and the gateway's tests use it with CatalogOverlay.
func Listen(addr string, s *Server) (*Listening, error) {
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("fakeprovider: listen: %w", err)
	}
	hs := &http.Server{Handler: s, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = hs.Serve(lis) }()
	return &Listening{Server: s, URL: "http://" + lis.Addr().String(), srv: hs, lis: lis}, nil
}

// Close stops the server, cutting open streams.
func (l *Listening) Close() error {
	err := l.srv.Close()
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}

// Shutdown stops the server after open requests end or ctx is done.
func (l *Listening) Shutdown(ctx context.Context) error { return l.srv.Shutdown(ctx) }

// CatalogOverlay returns a gateway catalog overlay (JSON) that points every
// built-in provider at the fake provider rooted at url, each at the base
// URL its protocol is served under. Local providers (ollama, vllm) keep no
// credentials; the others still need theirs (any value works).
func CatalogOverlay(url string) []byte {
	bases := map[string]string{
		"anthropic": url + "/v1",
		"openai":    url + "/v1",
		"gemini":    url + "/v1beta",
		"bedrock":   url,
	}
	for _, p := range []string{"openrouter", "groq", "together", "mistral", "deepseek", "xai", "fireworks", "ollama", "vllm", "moonshot", "zai"} {
		bases[p] = url + "/v1"
	}
	providers := map[string]any{}
	for id, base := range bases {
		providers[id] = map[string]any{"baseUrl": base}
	}
	b, _ := json.MarshalIndent(map[string]any{"providers": providers}, "", "  ")
	return b
}

// LoadScript reads a JSON file holding a list of Turns (field names as in
// Go; durations in nanoseconds or as strings such as "20ms").
func LoadScript(path string) ([]Turn, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("fakeprovider: read script: %w", err)
	}
	var raw []json.RawMessage
	if err := json.Unmarshal(b, &raw); err != nil {
		return nil, fmt.Errorf("fakeprovider: parse script %s: %w", path, err)
	}
	turns := make([]Turn, 0, len(raw))
	for i, r := range raw {
		var t scriptTurn
		if err := json.Unmarshal(r, &t); err != nil {
			return nil, fmt.Errorf("fakeprovider: script %s turn %d: %w", path, i, err)
		}
		turn, err := t.turn()
		if err != nil {
			return nil, fmt.Errorf("fakeprovider: script %s turn %d: %w", path, i, err)
		}
		turns = append(turns, turn)
	}
	return turns, nil
}

// scriptTurn is Turn as JSON, with readable durations and fault names.
type scriptTurn struct {
	Turn
	ChunkDelay duration `json:"ChunkDelay"`
	Fault      *struct {
		Kind        string
		RetryAfter  duration
		AfterChunks int
	}
}

var faultNames = map[string]FaultKind{
	"rate_limit": FaultRateLimit, "overloaded": FaultOverloaded, "server_error": FaultServerError,
	"mid_stream_error": FaultMidStreamError, "malformed_chunk": FaultMalformedChunk,
	"connection_reset": FaultConnectionReset, "auth": FaultAuth, "stall": FaultStall,
}

// turn converts the JSON turn; an unknown fault name is an error, never a
// clean reply that would make a fault test pass for the wrong reason.
func (s scriptTurn) turn() (Turn, error) {
	t := s.Turn
	t.ChunkDelay = time.Duration(s.ChunkDelay)
	if s.Fault != nil {
		kind, ok := faultNames[s.Fault.Kind]
		if !ok {
			names := slices.Sorted(maps.Keys(faultNames))
			return Turn{}, fmt.Errorf("unknown fault %q (want one of %s)", s.Fault.Kind, strings.Join(names, ", "))
		}
		t.Fault = &Fault{Kind: kind, RetryAfter: time.Duration(s.Fault.RetryAfter), AfterChunks: s.Fault.AfterChunks}
	}
	return t, nil
}

type duration time.Duration

func (d *duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err == nil {
		v, err := time.ParseDuration(s)
		*d = duration(v)
		return err
	}
	var n int64
	if err := json.Unmarshal(b, &n); err != nil {
		return fmt.Errorf("duration: want a string such as \"20ms\" or nanoseconds")
	}
	*d = duration(n)
	return nil
}

// Demo answers every request with a short reply that streams in chunks:
// the default script of cmd/fakeprovider.
func Demo(Request) Turn {
	return Turn{
		Text:       "Hello from the fake provider. This reply is scripted, streamed in small chunks, and costs nothing.",
		Usage:      Usage{Input: 42, Output: 21},
		ChunkRunes: 6,
		ChunkDelay: 15 * time.Millisecond,
	}
}
