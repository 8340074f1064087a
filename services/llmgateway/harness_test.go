package llmgateway

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/test/bufconn"
	"google.golang.org/protobuf/encoding/protojson"

	llmv1 "github.com/fabro-sh/fabro-go/gen/fabro/llm/v1"
	"github.com/fabro-sh/fabro-go/services/llmgateway/internal/codec"
)

// This file is a test-only codec ("ndjson": one JSON codec.Event per line,
// then {"end":true}) and its upstream, so the gateway core is tested
// without depending on the real codecs.

type ndjsonCodec struct{}

func (ndjsonCodec) Name() string { return "test-ndjson" }

func (ndjsonCodec) NewRequest(ctx context.Context, call *codec.Call) (*http.Request, error) {
	req, err := protojson.Marshal(call.Request)
	if err != nil {
		return nil, err
	}
	body, _ := json.Marshal(map[string]any{"model": call.Model, "stream": call.Stream, "request": json.RawMessage(req)})
	r, err := http.NewRequestWithContext(ctx, http.MethodPost, call.Provider.GetBaseUrl()+"/generate", bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	for _, n := range call.Provider.GetAuth().GetCredentialNames() {
		if v := call.Credentials[n]; v != "" {
			r.Header.Set("Authorization", "Bearer "+v)
			break
		}
	}
	return r, nil
}

type ndjsonLine struct {
	codec.Event
	End   bool         `json:"end,omitempty"`
	Error *codec.Error `json:"error,omitempty"`
}

type ndjsonDecoder struct{ sc *bufio.Scanner }

func (ndjsonCodec) NewDecoder(body io.Reader) codec.Decoder {
	sc := bufio.NewScanner(body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	return &ndjsonDecoder{sc: sc}
}

func (d *ndjsonDecoder) Next(ev *codec.Event) error {
	if !d.sc.Scan() {
		if err := d.sc.Err(); err != nil {
			return err
		}
		return io.ErrUnexpectedEOF
	}
	var l ndjsonLine
	if err := json.Unmarshal(d.sc.Bytes(), &l); err != nil {
		return &codec.Error{Kind: llmv1.ErrorKind_ERROR_KIND_STREAM_DECODE, Message: "malformed chunk"}
	}
	switch {
	case l.End:
		return io.EOF
	case l.Error != nil:
		return l.Error
	}
	*ev = l.Event
	return nil
}

func (c ndjsonCodec) DecodeResponse(body io.Reader, emit func(*codec.Event) error) error {
	d := c.NewDecoder(body)
	var ev codec.Event
	for {
		ev.Reset()
		err := d.Next(&ev)
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		if err := emit(&ev); err != nil {
			return err
		}
	}
}

func (ndjsonCodec) ParseError(resp *http.Response, body []byte) *codec.Error {
	var e struct {
		Message string `json:"message"`
		Code    string `json:"code"`
	}
	_ = json.Unmarshal(body, &e)
	ce := &codec.Error{Kind: kindForStatus(resp.StatusCode), Message: e.Message, Code: e.Code, StatusCode: resp.StatusCode}
	if s, err := strconv.Atoi(resp.Header.Get("Retry-After")); err == nil {
		ce.RetryAfter = time.Duration(s) * time.Second
	}
	return ce
}

// turn is one scripted upstream reply.
type turn struct {
	status     int // non-2xx: an error reply
	retryAfter string
	code       string
	events     []codec.Event
	// after events: end marker (default), an in-stream error, a cut
	// connection, or holding the stream open until the client leaves.
	midError *codec.Error
	cut      bool
	hold     bool
	header   http.Header
}

type recorded struct {
	Path, Auth string
	Model      string
	Stream     bool
	Request    json.RawMessage
}

// upstream is the test provider speaking ndjson.
type upstream struct {
	mu     sync.Mutex
	turns  []turn
	reqs   []recorded
	srv    *httptest.Server
	hangup chan struct{}       // a held stream saw its client go away
	script func(recorded) turn // when set, answers every request
}

func newUpstream(t testing.TB, turns ...turn) *upstream {
	u := &upstream{turns: turns, hangup: make(chan struct{}, 8)}
	u.srv = httptest.NewServer(http.HandlerFunc(u.serve))
	t.Cleanup(u.srv.Close)
	return u
}

func (u *upstream) enqueue(turns ...turn) {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.turns = append(u.turns, turns...)
}

func (u *upstream) requests() []recorded {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]recorded(nil), u.reqs...)
}

func (u *upstream) serve(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	var rec recorded
	_ = json.Unmarshal(body, &rec)
	rec.Path, rec.Auth = r.URL.Path, r.Header.Get("Authorization")
	u.mu.Lock()
	u.reqs = append(u.reqs, rec)
	if u.script != nil {
		u.turns = append(u.turns, u.script(rec))
	}
	if len(u.turns) == 0 {
		u.mu.Unlock()
		http.Error(w, `{"message":"no turn left"}`, http.StatusInternalServerError)
		return
	}
	t := u.turns[0]
	u.turns = u.turns[1:]
	u.mu.Unlock()

	for k, vs := range t.header {
		w.Header()[k] = vs
	}
	if t.status != 0 {
		if t.retryAfter != "" {
			w.Header().Set("Retry-After", t.retryAfter)
		}
		w.WriteHeader(t.status)
		fmt.Fprintf(w, `{"message":"scripted %d","code":%q}`, t.status, t.code)
		return
	}
	w.Header().Set("Content-Type", "application/x-ndjson")
	enc := json.NewEncoder(w)
	fl := w.(http.Flusher)
	for _, ev := range t.events {
		_ = enc.Encode(ndjsonLine{Event: ev})
		fl.Flush()
	}
	switch {
	case t.midError != nil:
		_ = enc.Encode(ndjsonLine{Error: t.midError})
	case t.cut:
		fl.Flush()
		panic(http.ErrAbortHandler)
	case t.hold:
		fl.Flush()
		<-r.Context().Done()
		u.hangup <- struct{}{}
		return
	default:
		_ = enc.Encode(ndjsonLine{End: true})
	}
}

// Event builders.
func evStart(id, model string) codec.Event {
	return codec.Event{Type: codec.EventStart, ResponseID: id, Model: model}
}
func evBlock(key int, kind llmv1.ContentBlockKind) codec.Event {
	return codec.Event{Type: codec.EventBlockStart, Key: key, Kind: kind}
}
func evTool(key int, id, name string) codec.Event {
	return codec.Event{Type: codec.EventBlockStart, Key: key, Kind: llmv1.ContentBlockKind_CONTENT_BLOCK_KIND_TOOL_CALL, ToolCallID: id, ToolName: name}
}
func evText(key int, s string) codec.Event {
	return codec.Event{Type: codec.EventTextDelta, Key: key, Text: s}
}
func evReason(key int, s string) codec.Event {
	return codec.Event{Type: codec.EventReasoningDelta, Key: key, Text: s}
}
func evArgs(key int, s string) codec.Event {
	return codec.Event{Type: codec.EventToolCallDelta, Key: key, Text: s}
}
func evSig(key int, s string) codec.Event {
	return codec.Event{Type: codec.EventSignature, Key: key, Signature: s}
}
func evEnd(key int) codec.Event { return codec.Event{Type: codec.EventBlockEnd, Key: key} }
func evUsage(u codec.Usage) codec.Event {
	return codec.Event{Type: codec.EventUsage, Usage: u}
}
func evFinish(f llmv1.FinishReason, raw string) codec.Event {
	return codec.Event{Type: codec.EventFinish, Finish: f, RawFinish: raw}
}

// textTurn is a plain text reply.
func textTurn(text string) turn {
	return turn{events: []codec.Event{
		evStart("r1", "up-model"),
		evBlock(0, llmv1.ContentBlockKind_CONTENT_BLOCK_KIND_TEXT), evText(0, text), evEnd(0),
		evUsage(codec.Usage{Input: 10, Output: 2}),
		evFinish(llmv1.FinishReason_FINISH_REASON_STOP, "stop"),
	}}
}

// testOverlay puts three providers on the upstream: fake (with fallback to
// backup), backup, and the disabled off.
func testOverlay(baseURL string) string {
	prov := func(cred string, enabled bool) string {
		return fmt.Sprintf(`{"codec": "CODEC_OPENAI_CHAT", "baseUrl": %q, "enabled": %t,
			"auth": {"scheme": "AUTH_SCHEME_BEARER", "credentialNames": [%q]}}`, baseURL, enabled, cred)
	}
	return `{"providers": {"fake": ` + prov("FAKE_API_KEY", true) + `, "backup": ` + prov("BACKUP_API_KEY", true) + `, "off": ` + prov("OFF_API_KEY", false) + `},
	"models": {
	  "fake/fake-1": {"aliases": ["f1"], "apiModel": "fake-1-wire", "fallbacks": ["backup/backup-1"],
	    "pricing": {"inputUsdMicrosPerMillion": 3000000, "outputUsdMicrosPerMillion": 15000000, "cacheReadUsdMicrosPerMillion": 300000, "cacheWriteUsdMicrosPerMillion": 3750000}},
	  "fake/fake-2": {},
	  "backup/backup-1": {},
	  "off/off-1": {}
	}}`
}

type gwOpt func(*Config)

var testEnv = map[string]string{"FAKE_API_KEY": "sk-fake", "BACKUP_API_KEY": "sk-backup"}

// newGateway builds the gateway for the upstream with the test codec, an
// environment of testEnv, and no backoff waits.
func newGateway(t testing.TB, u *upstream, opts ...gwOpt) *Service {
	t.Helper()
	path := filepath.Join(t.TempDir(), "overlay.json")
	if err := os.WriteFile(path, []byte(testOverlay(u.srv.URL)), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := Config{
		CatalogOverlay: path,
		Codecs:         map[llmv1.Codec]codec.Codec{llmv1.Codec_CODEC_OPENAI_CHAT: ndjsonCodec{}},
		Backoff:        func(int, time.Duration) time.Duration { return 0 },
		LookupEnv: func(k string) (string, bool) {
			v, ok := testEnv[k]
			return v, ok
		},
	}
	for _, o := range opts {
		o(&cfg)
	}
	s, err := New(context.Background(), cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// dial serves s over bufconn and returns a client.
func dial(t testing.TB, s *Service) llmv1.LLMGatewayServiceClient {
	t.Helper()
	lis := bufconn.Listen(1 << 20)
	gs := grpc.NewServer()
	s.RegisterGRPC(gs)
	go func() { _ = gs.Serve(lis) }()
	t.Cleanup(gs.Stop)
	conn, err := grpc.NewClient("passthrough:///bufnet",
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return llmv1.NewLLMGatewayServiceClient(conn)
}

func userReq(model, text string) *llmv1.Request {
	return &llmv1.Request{Model: model, Messages: []*llmv1.Message{userText(text)}}
}

func discardLogger() *slog.Logger { return slog.New(slog.DiscardHandler) }
