package llmgateway

import (
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/fabro-sh/fabro-go/services/llmgateway/fakeprovider"
)

// TestCompatEchoedKeyInAnyShape: a provider that quotes its key altered
// every way upstreams were seen to (a 24-character prefix, a suffix, hex,
// base64 of "Bearer <key>", upper case, split across message and code, one
// character dropped, base64 in x-request-id), in a 401 body and in an
// in-stream error, reaches through the three compatible endpoints,
// streamed or not, no caller's body, no exported span and no log line of
// the shipped server stack with any 8 characters of the key in any of
// those shapes; the provider's message still comes through, masked.
func TestCompatEchoedKeyInAnyShape(t *testing.T) {
	const key = "sk-proj-CANARY7f3a9b2c4d5e6f708192a3b4c5d6e7"
	upstream := map[string]*fakeprovider.Leaky{
		"leaky":    fakeprovider.NewLeaky(fakeprovider.LeakTransformed),
		"leakymid": fakeprovider.NewLeaky(fakeprovider.LeakTransformedMidStream),
	}
	var providers, models []string
	for name, l := range upstream {
		srv := httptest.NewServer(l)
		t.Cleanup(srv.Close)
		providers = append(providers, fmt.Sprintf(`%q: {"codec": "CODEC_OPENAI_CHAT", "chatDialect": "CHAT_DIALECT_COMPATIBLE", "baseUrl": "%s/v1",
			"auth": {"scheme": "AUTH_SCHEME_BEARER", "credentialNames": ["LEAKY_API_KEY"]}}`, name, srv.URL))
		models = append(models, fmt.Sprintf(`"%s/leaky-1": {}`, name))
	}
	overlay := filepath.Join(t.TempDir(), "overlay.json")
	if err := os.WriteFile(overlay, []byte(`{"providers": {`+strings.Join(providers, ",")+`}, "models": {`+strings.Join(models, ",")+`}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	rec := tracetest.NewSpanRecorder()
	logs := &lockedBuffer{}
	logger := slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	gw, err := New(t.Context(), Config{
		CatalogOverlay: overlay, MaxAttempts: 1,
		TracerProvider: sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec)),
		LookupEnv: func(k string) (string, bool) {
			if k == "LEAKY_API_KEY" {
				return key, true
			}
			return "", false
		},
	}, logger)
	if err != nil {
		t.Fatal(err)
	}
	base := serveCompat(t, gw, logger)

	var seen []string
	for _, model := range []string{"leaky/leaky-1", "leakymid/leaky-1"} {
		for _, stream := range []string{"false", "true"} {
			for _, c := range []struct{ path, body string }{
				{"/openai/v1/chat/completions", `{"model":"` + model + `","stream":` + stream + `,"messages":[{"role":"user","content":"hi"}]}`},
				{"/openai/v1/responses", `{"model":"` + model + `","stream":` + stream + `,"input":"hi"}`},
				{"/anthropic/v1/messages", `{"model":"` + model + `","stream":` + stream + `,"max_tokens":5,"messages":[{"role":"user","content":"hi"}]}`},
			} {
				req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, base+c.path, strings.NewReader(c.body))
				req.Header.Set("Authorization", "Bearer "+compatToken)
				req.Header.Set("X-Api-Key", compatToken)
				req.Header.Set("anthropic-version", "2023-06-01")
				req.Header.Set("Content-Type", "application/json")
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				seen = append(seen, fmt.Sprintf("%s %s stream=%s: %d %v %s", model, c.path, stream, resp.StatusCode, resp.Header, b))
			}
		}
	}
	for name, l := range upstream {
		if echoes := l.Echoes(); len(echoes) != 6 && !t.Failed() || !strings.Contains(echoes[0], key) {
			t.Fatalf("%s saw %d requests (%q), want the key sent 6 times:\n%s", name, len(echoes), echoes, seen)
		}
	}
	spans := rec.Ended()
	if len(spans) != 12 {
		t.Errorf("%d attempt spans, want 12", len(spans))
	}
	for _, s := range spans {
		seen = append(seen, fmt.Sprintf("span %s %v %v %v", s.Name(), s.Status(), s.Attributes(), s.Events()))
	}
	seen = append(seen, logs.String())

	all := strings.Join(seen, "\n")
	for _, want := range []string{"Incorrect API key provided: prefix=[REDACTED]", "refused mid-stream: prefix=[REDACTED]", `"msg":"upstream error body"`} {
		if !strings.Contains(all, want) {
			t.Errorf("%q did not come through:\n%s", want, all)
		}
	}
	for i, text := range seen {
		if l := keyRuns(text, key); len(l) > 0 {
			t.Errorf("output %d holds %q:\n%s", i, l, text)
		}
	}
}

// keyRuns lists the 8-character runs of key, of its hex and of its base64
// (std or URL, at each alignment) that text holds, ignoring case.
func keyRuns(text, key string) []string {
	low := strings.ToLower(text)
	forms := []string{key, hex.EncodeToString([]byte(key))}
	for k := range 3 {
		forms = append(forms, base64.StdEncoding.EncodeToString([]byte(key[k:]))[:40], base64.URLEncoding.EncodeToString([]byte(key[k:]))[:40])
	}
	var found []string
	for _, f := range forms {
		f = strings.ToLower(f)
		for i := 0; i+8 <= len(f); i++ {
			if strings.Contains(low, f[i:i+8]) {
				found = append(found, f[i:i+8])
			}
		}
	}
	return found
}
