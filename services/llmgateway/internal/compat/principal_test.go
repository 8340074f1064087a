package compat

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/fabro-sh/fabro-go/platform/auth"
)

// people authenticates a key that is a user's name as that user, and
// counts the watches it starts.
type people struct{ watches atomic.Int32 }

func (p *people) Authenticate(ctx context.Context, key string) (context.Context, error) {
	if !auth.ValidName(key) {
		return nil, errors.New("unknown key")
	}
	return auth.WithPrincipal(ctx, auth.Principal{Name: key, Role: auth.RoleUser}), nil
}

func (p *people) WatchToken(ctx context.Context, _ string) (context.Context, context.CancelFunc) {
	p.watches.Add(1)
	return context.WithCancel(ctx)
}

func newPeopleHandler(b Backend, p *people) http.Handler {
	h := New(b, p, testSealer, slog.New(slog.DiscardHandler))
	mux := http.NewServeMux()
	h.Register(mux)
	return mux
}

// TestEnvelopeBoundToPrincipal: the state one caller was handed opens for
// that caller only; the same envelope sent back by another is the API's
// 400 naming the field, and nothing reaches the backend.
func TestEnvelopeBoundToPrincipal(t *testing.T) {
	p := &people{}
	b := &scripted{events: turnEvents()}
	h := newPeopleHandler(b, p)
	_, _, body := do(t, h, http.MethodPost, "/openai/v1/responses", `{"model":"m","input":"hi"}`, "Authorization", "Bearer alice")
	var out struct {
		Output []struct {
			EncryptedContent string `json:"encrypted_content"`
		} `json:"output"`
	}
	if err := json.Unmarshal([]byte(body), &out); err != nil || len(out.Output) == 0 || out.Output[0].EncryptedContent == "" {
		t.Fatalf("no reasoning item in %s (%v)", body, err)
	}
	replay := `{"model":"m","input":[{"role":"user","content":"q"},{"type":"reasoning","summary":[],"encrypted_content":"` +
		out.Output[0].EncryptedContent + `"},{"role":"user","content":"go on"}]}`
	b.got = nil
	if code, _, body := do(t, h, http.MethodPost, "/openai/v1/responses", replay, "Authorization", "Bearer bob"); code != http.StatusBadRequest ||
		!strings.Contains(body, "input[1].encrypted_content") || !strings.Contains(body, "does not authenticate") {
		t.Errorf("bob replaying alice's state: %d %s, want 400 naming input[1].encrypted_content", code, body)
	}
	if b.got != nil {
		t.Errorf("bob's replay reached the backend: %v", b.got)
	}
	if code, _, body := do(t, h, http.MethodPost, "/openai/v1/responses", replay, "Authorization", "Bearer alice"); code != http.StatusOK {
		t.Errorf("alice replaying her own state: %d %s", code, body)
	}
}

// TestWatchOnlyStreams: a one-shot answer starts no revocation watch; a
// streamed one starts one, on every front.
func TestWatchOnlyStreams(t *testing.T) {
	fronts := []struct{ path, body string }{
		{"/openai/v1/chat/completions", `{"model":"m","messages":[{"role":"user","content":"hi"}]%s}`},
		{"/openai/v1/responses", `{"model":"m","input":"hi"%s}`},
		{"/anthropic/v1/messages", `{"model":"m","max_tokens":5,"messages":[{"role":"user","content":"hi"}]%s}`},
	}
	for _, f := range fronts {
		for _, stream := range []bool{false, true} {
			p := &people{}
			h := newPeopleHandler(&scripted{events: turnEvents()}, p)
			extra := ""
			if stream {
				extra = `,"stream":true`
			}
			code, _, body := do(t, h, http.MethodPost, f.path, strings.Replace(f.body, "%s", extra, 1), "Authorization", "Bearer alice")
			if code != http.StatusOK {
				t.Fatalf("%s stream=%v: %d %s", f.path, stream, code, body)
			}
			want := int32(0)
			if stream {
				want = 1
			}
			if got := p.watches.Load(); got != want {
				t.Errorf("%s stream=%v: %d watches, want %d", f.path, stream, got, want)
			}
		}
	}
}
