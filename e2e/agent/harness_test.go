package agent_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	agentv1 "github.com/fabro-sh/fabro-go/gen/fabro/agent/v1"
	sandboxv1 "github.com/fabro-sh/fabro-go/gen/fabro/sandbox/v1"
	"github.com/fabro-sh/fabro-go/platform/auth"
	"github.com/fabro-sh/fabro-go/platform/server"
	"github.com/fabro-sh/fabro-go/services/agent"
	"github.com/fabro-sh/fabro-go/services/llmgateway"
	"github.com/fabro-sh/fabro-go/services/llmgateway/fakeprovider"
	"github.com/fabro-sh/fabro-go/services/sandbox"
)

// stack is a whole deployment in the test process: the fake providers
// behind the real gateway, the real sandbox service (local driver), and the
// agent service with an embedded NATS server listening on a random port,
// each behind the shared server runtime on 127.0.0.1:0.
type stack struct {
	fake     *fakeprovider.Server
	agent    agentv1.AgentServiceClient
	sandbox  sandboxv1.SandboxServiceClient
	svc      *agent.Service
	httpAddr string // the agent's REST gateway
	grpcAddr string // the agent's gRPC address
	natsURL  string
	natsKey  string // the subscriber's nkey seed file
	// settingsFile is the operator's settings file (Config.SettingsFile),
	// absent until a test writes it.
	settingsFile string
	sbDeps       *sandbox.Service
	logs         *logRecorder // every service's log
	cfg          agent.Config
	logger       *slog.Logger
	stop         func() // stops the agent service and its server
	// tokens is the token store every server verifies against; nil: the
	// stack runs without authentication (newStack).
	tokens *auth.Store
}

// serverConfig is cfg verifying against tokens, or without authentication.
func serverConfig(cfg server.Config, tokens *auth.Store) server.Config {
	if tokens == nil {
		cfg.NoAuth = true
	} else {
		cfg.Auth = tokens
	}
	return cfg
}

// startAgent starts the agent service on st.cfg behind its own server.
func (st *stack) startAgent(t testing.TB) {
	t.Helper()
	ctx := t.Context()
	svc, err := agent.New(ctx, st.cfg, st.logger)
	if err != nil {
		t.Fatal(err)
	}
	st.svc, st.settingsFile = svc, st.cfg.SettingsFile
	st.natsURL, st.natsKey = svc.NATSURL(), svc.NATSSubscriberKeyFile()
	srv, err := server.Start(ctx, serverConfig(server.Config{GRPCAddr: "127.0.0.1:0", HTTPAddr: "127.0.0.1:0"}, st.tokens), st.logger, svc)
	if err != nil {
		t.Fatal(err)
	}
	st.httpAddr, st.grpcAddr = srv.HTTPAddr(), srv.GRPCAddr()
	conn, err := grpc.NewClient(srv.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(64<<20)))
	if err != nil {
		t.Fatal(err)
	}
	st.agent = agentv1.NewAgentServiceClient(conn)
	stopped := false
	st.stop = func() {
		if stopped {
			return
		}
		stopped = true
		conn.Close()
		srv.Shutdown(context.Background())
		svc.Close()
	}
	t.Cleanup(st.stop)
}

// restart stops the agent service and starts a new one on the same data
// directory, as a process restart does.
func (st *stack) restart(t testing.TB) {
	t.Helper()
	st.stop()
	st.startAgent(t)
}

func testLogger(t testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn}))
}

// logRecorder is the services' log handler in a stack: it writes to the
// test's output and keeps every message, for a test that waits on what
// the service tells its operator (the log is its observable behaviour).
type logRecorder struct {
	slog.Handler
	mu   *sync.Mutex
	msgs *[]string
}

func newLogRecorder(t testing.TB) *logRecorder {
	return &logRecorder{Handler: testLogger(t).Handler(), mu: new(sync.Mutex), msgs: new([]string)}
}

func (r *logRecorder) Handle(ctx context.Context, rec slog.Record) error {
	line := rec.Message
	rec.Attrs(func(a slog.Attr) bool {
		line += " " + a.String()
		return true
	})
	r.mu.Lock()
	*r.msgs = append(*r.msgs, line)
	r.mu.Unlock()
	return r.Handler.Handle(ctx, rec)
}

func (r *logRecorder) WithAttrs(as []slog.Attr) slog.Handler {
	return &logRecorder{Handler: r.Handler.WithAttrs(as), mu: r.mu, msgs: r.msgs}
}

func (r *logRecorder) WithGroup(name string) slog.Handler {
	return &logRecorder{Handler: r.Handler.WithGroup(name), mu: r.mu, msgs: r.msgs}
}

// logged reports whether a message containing text was logged (a message
// is its text and its record's attributes, " key=value" each).
func (r *logRecorder) logged(text string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, m := range *r.msgs {
		if strings.Contains(m, text) {
			return true
		}
	}
	return false
}

func newStack(t testing.TB, opts ...func(*agent.Config)) *stack {
	t.Helper()
	return newStackAuth(t, nil, opts...)
}

// newStackAuth is newStack with every server verifying against tokens
// (nil: none), the agent presenting a service token of its own; the
// stack's clients present no token (a test sends one per call).
func newStackAuth(t testing.TB, tokens *auth.Store, opts ...func(*agent.Config)) *stack {
	t.Helper()
	ctx := t.Context()
	st := &stack{fake: fakeprovider.New(), logs: newLogRecorder(t), tokens: tokens}
	logger := slog.New(st.logs)
	hs := httptest.NewServer(st.fake)
	t.Cleanup(hs.Close)

	dir := t.TempDir()
	overlay := map[string]any{"providers": map[string]any{
		"anthropic":  map[string]any{"baseUrl": hs.URL},
		"openai":     map[string]any{"baseUrl": hs.URL + "/v1"},
		"gemini":     map[string]any{"baseUrl": hs.URL + "/v1beta"},
		"bedrock":    map[string]any{"baseUrl": hs.URL},
		"openrouter": map[string]any{"baseUrl": hs.URL + "/v1"},
	}}
	b, _ := json.Marshal(overlay)
	overlayPath := filepath.Join(dir, "catalog.json")
	if err := os.WriteFile(overlayPath, b, 0o600); err != nil {
		t.Fatal(err)
	}
	gw, err := llmgateway.New(ctx, llmgateway.Config{
		CatalogOverlay: overlayPath,
		Backoff:        func(int, time.Duration) time.Duration { return 0 },
		LookupEnv: func(name string) (string, bool) {
			if strings.HasSuffix(name, "_API_KEY") || name == "AWS_BEARER_TOKEN_BEDROCK" {
				return "test-key", true
			}
			return "", false
		},
	}, logger)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { gw.Close() })
	if tokens != nil {
		gw.SetPolicies(tokens) // as fabro serve does
	}
	// Workspaces are other temporary directories.
	sb, err := sandbox.New(sandbox.Config{DataDir: filepath.Join(dir, "sandbox"), Security: sandbox.Security{AllowedRoots: []string{os.TempDir()}}}, logger)
	if err != nil {
		t.Fatal(err)
	}
	st.sbDeps = sb
	t.Cleanup(func() { sb.Close(context.Background()) })
	deps, err := server.Start(ctx, serverConfig(server.Config{GRPCAddr: "127.0.0.1:0"}, tokens), logger, gw, sb) // authentication: tenancy_test.go, cmd/fabro tests
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { deps.Shutdown(context.Background()) })

	cfg := agent.Config{
		LLMAddr:       deps.GRPCAddr(),
		SandboxAddr:   deps.GRPCAddr(),
		NATSListen:    "127.0.0.1:-1",
		DataDir:       filepath.Join(dir, "data"),
		ReplayBackoff: func(int) time.Duration { return time.Millisecond },
		SettingsFile:  filepath.Join(dir, "operator-settings.json"),
	}
	if tokens != nil {
		cfg.TokenFile = filepath.Join(dir, "agent.token")
		if err := tokens.EnsureServiceToken(cfg.TokenFile, auth.ServiceAgent); err != nil {
			t.Fatal(err)
		}
	}
	for _, o := range opts {
		o(&cfg)
	}
	st.cfg, st.logger = cfg, logger
	st.startAgent(t)
	dconn, err := grpc.NewClient(deps.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dconn.Close() })
	st.sandbox = sandboxv1.NewSandboxServiceClient(dconn)
	return st
}

// workspace makes a directory with files and a local sandbox on it.
func (st *stack) workspace(t testing.TB, files map[string]string) (dir, sandboxID string) {
	t.Helper()
	dir = t.TempDir()
	for name, content := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	resp, err := st.sandbox.CreateSandbox(t.Context(), &sandboxv1.CreateSandboxRequest{Spec: &sandboxv1.SandboxSpec{Driver: "local", WorkingDirectory: dir}})
	if err != nil {
		t.Fatal(err)
	}
	return dir, resp.GetSandbox().GetSandboxId()
}

// prompt runs a prompt and collects its events.
func (st *stack) prompt(t testing.TB, sessionID, text string) []*agentv1.AgentEvent {
	t.Helper()
	stream, err := st.agent.Prompt(t.Context(), &agentv1.PromptRequest{SessionId: sessionID, Text: text})
	if err != nil {
		t.Fatal(err)
	}
	var evs []*agentv1.AgentEvent
	for {
		resp, err := stream.Recv()
		if err != nil {
			if len(evs) > 0 && evs[len(evs)-1].GetPromptCompleted() != nil {
				return evs
			}
			t.Fatalf("prompt stream: %v (after %d events)", err, len(evs))
		}
		evs = append(evs, resp.GetEvent())
	}
}

// eventTypes lists the event types, dropping streaming deltas whose count
// depends on chunking.
func eventTypes(evs []*agentv1.AgentEvent) []string {
	var out []string
	for _, ev := range evs {
		name := eventType(ev)
		if name == "checkpoint_created" {
			// Whether a turn changed files, not the loop's flow:
			// TestCheckpointRewind checks them.
			continue
		}
		if name == "text_delta" || name == "reasoning_delta" || name == "tool_call_output_delta" {
			if len(out) > 0 && out[len(out)-1] == name+"*" {
				continue
			}
			name += "*"
		}
		out = append(out, name)
	}
	return out
}

func eventType(ev *agentv1.AgentEvent) string {
	fd := ev.ProtoReflect().WhichOneof(ev.ProtoReflect().Descriptor().Oneofs().ByName("event"))
	if fd == nil {
		return ""
	}
	return string(fd.Name())
}

// checkGapless fails unless the events number first, first+1, ... for one
// session.
func checkGapless(t testing.TB, evs []*agentv1.AgentEvent, first uint64) {
	t.Helper()
	for i, ev := range evs {
		if want := first + uint64(i); ev.GetSequence() != want {
			t.Fatalf("event %d (%s) has sequence %d, want %d", i, eventType(ev), ev.GetSequence(), want)
		}
	}
}

func lastReport(t testing.TB, evs []*agentv1.AgentEvent) *agentv1.PromptReport {
	t.Helper()
	if len(evs) == 0 || evs[len(evs)-1].GetPromptCompleted() == nil {
		t.Fatalf("the stream does not end with prompt_completed: %v", eventTypes(evs))
	}
	return evs[len(evs)-1].GetPromptCompleted().GetReport()
}

func args(v map[string]any) string {
	b, err := json.Marshal(v)
	if err != nil {
		panic(fmt.Sprint(err))
	}
	return string(b)
}
