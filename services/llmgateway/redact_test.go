package llmgateway

import (
	"bytes"
	"errors"
	"io"
	"log/slog"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/prototext"

	llmv1 "github.com/fabro-sh/fabro-go/gen/fabro/llm/v1"
	"github.com/fabro-sh/fabro-go/services/llmgateway/fakeprovider"
)

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestUpstreamEchoesAreRedacted runs the real OpenAI chat codec against a
// provider that quotes the request's Authorization header in a 401 body and
// in a mid-stream error event: the key reaches no error, event or log line,
// while the rest of the provider's message does.
func TestUpstreamEchoesAreRedacted(t *testing.T) {
	const key = "gsk-CANARY-3b1f9e77a0c2"
	leaky := fakeprovider.NewLeaky(fakeprovider.LeakAuthError, fakeprovider.LeakMidStream)
	srv := httptest.NewServer(leaky)
	t.Cleanup(srv.Close)
	overlay := filepath.Join(t.TempDir(), "overlay.json")
	if err := os.WriteFile(overlay, []byte(`{"providers": {"leaky": {"codec": "CODEC_OPENAI_CHAT", "chatDialect": "CHAT_DIALECT_COMPATIBLE", "baseUrl": "`+srv.URL+`/v1",
		"auth": {"scheme": "AUTH_SCHEME_BEARER", "credentialNames": ["LEAKY_API_KEY"]}}},
		"models": {"leaky/leaky-1": {}}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	logs := &lockedBuffer{}
	s, err := New(t.Context(), Config{
		CatalogOverlay: overlay,
		LookupEnv: func(k string) (string, bool) {
			if k == "LEAKY_API_KEY" {
				return key, true
			}
			return "", false
		},
	}, slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	client := dial(t, s)
	var seen []string

	_, err = client.Complete(t.Context(), &llmv1.CompleteRequest{Request: userReq("leaky/leaky-1", "hi")})
	st := status.Convert(err)
	if err == nil || !strings.Contains(st.Message(), "Incorrect API key provided") {
		t.Fatalf("Complete = %v, want the provider's authentication error", err)
	}
	seen = append(seen, st.Message(), prototext.Format(st.Proto()))
	for _, d := range st.Details() {
		if detail, ok := d.(*llmv1.ErrorDetail); ok {
			seen = append(seen, prototext.Format(detail))
		}
	}

	stream, err := client.Stream(t.Context(), &llmv1.StreamRequest{Request: userReq("leaky/leaky-1", "hi")})
	if err != nil {
		t.Fatal(err)
	}
	var sawError bool
	for {
		ev, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			seen = append(seen, err.Error())
			break
		}
		seen = append(seen, prototext.Format(ev))
		if ev.GetError() != nil {
			sawError = true
		}
	}
	if !sawError {
		t.Errorf("the stream carried no error event: %q", seen)
	}
	if leaky.Requests() != 2 {
		t.Errorf("the provider saw %d requests, want 2", leaky.Requests())
	}
	seen = append(seen, logs.String())
	for i, text := range seen {
		if strings.Contains(text, "CANARY") {
			t.Errorf("output %d holds the key:\n%s", i, text)
		}
	}
	if !strings.Contains(strings.Join(seen, "\n"), "Authorization: Bearer [REDACTED]") {
		t.Errorf("the provider's message did not come through, masked:\n%s", strings.Join(seen, "\n"))
	}
}
