package fakeprovider

import (
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"strings"
	"sync"
)

// Leak is how a [Leaky] provider answers one request.
type Leak int

// Ways a leaky provider quotes the credential it received.
const (
	// LeakAuthError answers 401 with an OpenAI error body whose message,
	// code and request id quote the request's credential headers.
	LeakAuthError Leak = iota
	// LeakMidStream streams a little text, then an in-stream error event
	// quoting the credential headers (of a kind no one retries, so a test
	// sees it once).
	LeakMidStream
	// LeakTransformed answers 401 quoting the credential in every altered
	// shape upstreams were seen to echo (see Transformations), the key split
	// between the message and the code, and its base64 in x-request-id.
	LeakTransformed
	// LeakTransformedMidStream is LeakTransformed in an in-stream error.
	LeakTransformedMidStream
)

// Transformations are the altered shapes of key a leaky provider echoes:
// a 24-character prefix, a suffix, hex, base64 of "Bearer <key>", upper
// case, one character dropped, and the first half of the key (the second
// goes in another field).
func Transformations(key string) map[string]string {
	return map[string]string{
		"prefix":    key[:min(24, len(key))],
		"suffix":    key[len(key)/3:],
		"hex":       hex.EncodeToString([]byte(key)),
		"bearer64":  base64.StdEncoding.EncodeToString([]byte("Bearer " + key)),
		"upper":     strings.ToUpper(key),
		"dropped":   key[:len(key)/2] + key[len(key)/2+1:],
		"firsthalf": key[:len(key)/2],
	}
}

// Leaky is an OpenAI chat-completions provider (POST .../chat/completions)
// that echoes the Authorization header (and x-api-key, x-goog-api-key)
// back in its errors, as misbehaving upstreams and proxies do: the test
// double of redaction. It answers with the leaks given, in turn, repeating
// the last one.
type Leaky struct {
	mu     sync.Mutex
	leaks  []Leak
	seen   int
	echoes []string
}

// NewLeaky returns a leaky provider.
func NewLeaky(leaks ...Leak) *Leaky {
	if len(leaks) == 0 {
		leaks = []Leak{LeakAuthError}
	}
	return &Leaky{leaks: leaks}
}

// Requests is how many requests it answered.
func (l *Leaky) Requests() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.seen
}

// Echoes returns what it quoted back, one entry a request.
func (l *Leaky) Echoes() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.echoes...)
}

// ServeHTTP implements http.Handler.
func (l *Leaky) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost || !strings.HasSuffix(r.URL.Path, "/chat/completions") {
		http.Error(w, "fakeprovider: the leaky provider serves POST /v1/chat/completions only", http.StatusNotFound)
		return
	}
	var quoted []string
	for _, h := range []string{"Authorization", "X-Api-Key", "X-Goog-Api-Key"} {
		if v := r.Header.Get(h); v != "" {
			quoted = append(quoted, h+": "+v)
		}
	}
	echo := strings.Join(quoted, ", ")
	key := r.Header.Get("X-Api-Key") + r.Header.Get("X-Goog-Api-Key")
	if k, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer "); ok {
		key = k
	}
	l.mu.Lock()
	leak := l.leaks[min(l.seen, len(l.leaks)-1)]
	l.seen++
	l.echoes = append(l.echoes, echo)
	l.mu.Unlock()
	w.Header().Set("x-request-id", "req_"+echo)
	var transformed, secondHalf string
	if key != "" {
		tr := Transformations(key)
		for _, name := range []string{"prefix", "suffix", "hex", "bearer64", "upper", "dropped", "firsthalf"} {
			transformed += " " + name + "=" + tr[name]
		}
		secondHalf = key[len(key)/2:]
		if leak == LeakTransformed || leak == LeakTransformedMidStream {
			w.Header().Set("x-request-id", base64.RawURLEncoding.EncodeToString([]byte(key)))
		}
	}
	switch leak {
	case LeakTransformed:
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusUnauthorized)
		b, _ := json.Marshal(map[string]any{"error": map[string]any{
			"message": "Incorrect API key provided:" + transformed, "type": "invalid_request_error", "param": nil, "code": secondHalf,
		}})
		w.Write(b)
	case LeakTransformedMidStream:
		sw := newStreamWriter(w, r, "text/event-stream; charset=utf-8", Turn{})
		b, _ := json.Marshal(chatChunk{ID: "chatcmpl-leaky", Object: "chat.completion.chunk", Model: "leaky", Choices: []chatChunkChoice{{Delta: map[string]any{"role": "assistant", "content": "Working on it"}}}})
		sw.Raw(sse(b))
		b, _ = json.Marshal(map[string]any{"error": map[string]any{
			"message": "The request was refused mid-stream:" + transformed, "type": "invalid_request_error", "param": nil, "code": secondHalf,
		}})
		sw.Raw(sse(b))
	case LeakAuthError:
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusUnauthorized)
		b, _ := json.Marshal(map[string]any{"error": map[string]any{
			"message": "Incorrect API key provided: " + echo + ". You can find your API key at https://platform.openai.com/account/api-keys.",
			"type":    "invalid_request_error", "param": nil, "code": "invalid_api_key " + echo,
		}})
		w.Write(b)
	case LeakMidStream:
		sw := newStreamWriter(w, r, "text/event-stream; charset=utf-8", Turn{})
		chunk := func(delta map[string]any) []byte {
			b, _ := json.Marshal(chatChunk{ID: "chatcmpl-leaky", Object: "chat.completion.chunk", Model: "leaky", Choices: []chatChunkChoice{{Delta: delta}}})
			return sse(b)
		}
		sw.Raw(chunk(map[string]any{"role": "assistant", "content": ""}))
		sw.Raw(chunk(map[string]any{"content": "Working on it"}))
		b, _ := json.Marshal(map[string]any{"error": map[string]any{
			"message": "The request was refused mid-stream (" + echo + ")",
			"type":    "invalid_request_error", "param": nil, "code": echo,
		}})
		sw.Raw(sse(b))
	}
}
