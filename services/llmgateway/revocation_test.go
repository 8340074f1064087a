package llmgateway

import (
	"bufio"
	"context"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fabro-sh/fabro-go/platform/auth"
	"github.com/fabro-sh/fabro-go/platform/server"
	"github.com/fabro-sh/fabro-go/services/llmgateway/fakeprovider"
)

// TestCompatStreamEndsWithItsToken: a compatible endpoint's stream, held by
// a slow model, ends once its token is revoked (as the gRPC streams do),
// well before the model's reply would have; a new call with the token is
// the API's 401; another token's stream goes on.
func TestCompatStreamEndsWithItsToken(t *testing.T) {
	fp, _, _ := newCompatServer(t)
	store := auth.OpenStore(filepath.Join(t.TempDir(), "tokens.json"))
	gw, err := New(context.Background(), Config{CatalogOverlay: overlayFor(t, fp), LookupEnv: func(k string) (string, bool) {
		v, ok := e2eEnv[k]
		return v, ok
	}}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = gw.Close() })
	gw.SetAuthenticator(TokenAuthenticator(store, slog.New(slog.DiscardHandler)))
	srv, err := server.Start(context.Background(), server.Config{GRPCAddr: "127.0.0.1:0", HTTPAddr: "127.0.0.1:0", NoAuth: true}, slog.New(slog.DiscardHandler), gw)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Shutdown(context.Background()) })
	base := "http://" + srv.HTTPAddr()
	mallory, entry, err := store.Issue("mallory", auth.RoleUser)
	if err != nil {
		t.Fatal(err)
	}
	// 400 chunks of 4 runes, 50 ms apart: 20 s of reply.
	fp.Script(func(fakeprovider.Request) fakeprovider.Turn {
		return fakeprovider.Turn{Text: strings.Repeat("slow", 400), ChunkRunes: 4, ChunkDelay: 50 * time.Millisecond}
	})
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "POST", base+"/anthropic/v1/messages", strings.NewReader(
		`{"model":"anthropic/claude-sonnet-4.5","max_tokens":1024,"stream":true,"messages":[{"role":"user","content":"hi"}]}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("anthropic-version", "2023-06-01")
	req.Header.Set("x-api-key", mallory)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d", resp.StatusCode)
	}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() && !strings.Contains(sc.Text(), "content_block_delta") {
	}
	if err := store.Revoke(entry.ID); err != nil {
		t.Fatal(err)
	}
	var rest strings.Builder
	for sc.Scan() {
		rest.WriteString(sc.Text() + "\n")
	}
	if strings.Contains(rest.String(), "message_stop") {
		t.Errorf("the stream ran to its end after its token was revoked:\n%.300s…", rest.String())
	}
	// And the token is refused from now on.
	req2, _ := http.NewRequestWithContext(ctx, "GET", base+"/anthropic/v1/models", nil)
	req2.Header.Set("x-api-key", mallory)
	resp2, err := http.DefaultClient.Do(req2)
	if err != nil {
		t.Fatal(err)
	}
	resp2.Body.Close()
	if resp2.StatusCode != http.StatusUnauthorized {
		t.Errorf("a call with the revoked token: %d, want 401", resp2.StatusCode)
	}
}

// overlayFor is a catalog overlay pointing every provider at fp.
func overlayFor(t *testing.T, fp *fakeprovider.Server) string {
	t.Helper()
	l, err := fakeprovider.Listen("127.0.0.1:0", fp)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	path := filepath.Join(t.TempDir(), "overlay.json")
	if err := os.WriteFile(path, fakeprovider.CatalogOverlay(l.URL), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}
