package agent_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"net/http/httptest"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	agentv1 "github.com/fabro-sh/fabro-go/gen/fabro/agent/v1"
	sandboxv1 "github.com/fabro-sh/fabro-go/gen/fabro/sandbox/v1"
	"github.com/fabro-sh/fabro-go/platform/server"
	"github.com/fabro-sh/fabro-go/services/agent"
	"github.com/fabro-sh/fabro-go/services/agent/natstest"
	"github.com/fabro-sh/fabro-go/services/llmgateway"
	"github.com/fabro-sh/fabro-go/services/llmgateway/fakeprovider"
	"github.com/fabro-sh/fabro-go/services/sandbox"
)

// replicaSpec is what a replica process is started with.
type replicaSpec struct {
	ID, LLMAddr, SandboxAddr, NATSURL, DataDir string
	LeaseTTL                                   time.Duration
	// Single is one agent process, not a cluster replica: a restart on
	// the same DataDir continues its unfinished prompts (ResumeOnStart).
	Single bool
}

// runReplica is the test binary as one agent replica of a cluster
// (FABRO_AGENT_TEST_REPLICA holds its replicaSpec as JSON): it serves
// gRPC, prints "ready <address>", and runs until killed.
func runReplica(spec string) {
	var rs replicaSpec
	if err := json.Unmarshal([]byte(spec), &rs); err != nil {
		fmt.Fprintln(os.Stderr, "replica:", err)
		os.Exit(2)
	}
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo})).With("replica", rs.ID)
	ctx := context.Background()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(os.Stderr, "replica:", err)
		os.Exit(2)
	}
	addr := l.Addr().String()
	l.Close() // the server listens there next; the lease must name it first
	cfg := agent.Config{
		LLMAddr: rs.LLMAddr, SandboxAddr: rs.SandboxAddr, NATSURL: rs.NATSURL, NATSListen: "none", DataDir: rs.DataDir,
		ReplayBackoff: func(int) time.Duration { return time.Millisecond },
		Cluster:       agent.ClusterConfig{Enabled: true, AdvertiseAddr: addr, ReplicaID: rs.ID, LeaseTTL: rs.LeaseTTL},
	}
	if rs.Single {
		cfg.Cluster, cfg.ResumeOnStart = agent.ClusterConfig{}, true
	}
	svc, err := agent.New(ctx, cfg, logger)
	if err != nil {
		fmt.Fprintln(os.Stderr, "replica:", err)
		os.Exit(2)
	}
	srv, err := server.Start(ctx, server.Config{GRPCAddr: addr, NoAuth: true}, logger, svc)
	if err != nil {
		fmt.Fprintln(os.Stderr, "replica:", err)
		os.Exit(2)
	}
	fmt.Println("ready", addr)
	// SIGTERM is a graceful stop: the sessions are handed over (Close
	// releases their leases); SIGKILL is not.
	sig, stop := signal.NotifyContext(ctx, syscall.SIGTERM)
	defer stop()
	<-sig.Done()
	logger.Info("stopping: handing the sessions over")
	svc.Close() // first: its open Prompt streams would hold the drain
	sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	srv.Shutdown(sctx)
	cancel()
	logger.Info("stopped")
	os.Exit(0)
}

// deps is the model gateway (with the fake provider) and the sandbox
// service, served once in the test process for every replica.
type deps struct {
	fake    *fakeprovider.Server
	addr    string
	sandbox sandboxv1.SandboxServiceClient
}

func startDeps(t testing.TB) *deps {
	t.Helper()
	ctx, logger := t.Context(), testLogger(t)
	d := &deps{fake: fakeprovider.New()}
	hs := httptest.NewServer(d.fake)
	t.Cleanup(hs.Close)
	dir := t.TempDir()
	overlay, _ := json.Marshal(map[string]any{"providers": map[string]any{"openai": map[string]any{"baseUrl": hs.URL + "/v1"}}})
	overlayPath := filepath.Join(dir, "catalog.json")
	if err := os.WriteFile(overlayPath, overlay, 0o600); err != nil {
		t.Fatal(err)
	}
	gw, err := llmgateway.New(ctx, llmgateway.Config{CatalogOverlay: overlayPath,
		Backoff:   func(int, time.Duration) time.Duration { return 0 },
		LookupEnv: func(name string) (string, bool) { return "test-key", strings.HasSuffix(name, "_API_KEY") }}, logger)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { gw.Close() })
	sb, err := sandbox.New(sandbox.Config{DataDir: filepath.Join(dir, "sandbox"), Security: sandbox.Security{AllowedRoots: []string{os.TempDir()}}}, logger)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sb.Close(context.Background()) })
	srv, err := server.Start(ctx, server.Config{GRPCAddr: "127.0.0.1:0", NoAuth: true}, logger, gw, sb)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Shutdown(context.Background()) })
	d.addr = srv.GRPCAddr()
	d.sandbox = sandboxv1.NewSandboxServiceClient(dial(t, d.addr))
	return d
}

func dial(t testing.TB, addr string) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// replicaProc is an agent replica in its own process.
type replicaProc struct {
	cmd    *exec.Cmd
	addr   string
	client agentv1.AgentServiceClient
}

func startReplicaProc(t testing.TB, d *deps, natsURL, id string, ttl time.Duration) *replicaProc {
	t.Helper()
	return startAgentProc(t, replicaSpec{ID: id, LLMAddr: d.addr, SandboxAddr: d.addr, NATSURL: natsURL, DataDir: t.TempDir(), LeaseTTL: ttl})
}

// startAgentProc starts an agent process (runReplica) of spec.
func startAgentProc(t testing.TB, rs replicaSpec) *replicaProc {
	t.Helper()
	id := rs.ID
	spec, _ := json.Marshal(rs)
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "FABRO_AGENT_TEST_REPLICA="+string(spec))
	cmd.Stderr = t.Output()
	if _, ok := t.(*testing.B); ok && os.Getenv("FABRO_BENCH_REPLICA_LOGS") == "" {
		cmd.Stderr = nil // a benchmark's output is its figures
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	sc := bufio.NewScanner(out)
	if !sc.Scan() {
		t.Fatalf("replica %s did not start", id)
	}
	addr, ok := strings.CutPrefix(sc.Text(), "ready ")
	if !ok {
		t.Fatalf("replica %s: %q", id, sc.Text())
	}
	return &replicaProc{cmd: cmd, addr: addr, client: agentv1.NewAgentServiceClient(dial(t, addr))}
}

// TestClusterTakeover runs two agent replicas, each in its own process,
// on one NATS: a call for a session that replica a owns, made to replica
// b, is forwarded to a (the prompt too); a is killed (SIGKILL) in the
// middle of the prompt's shell command; b takes the session over when
// a's lease expires, resumes it from its record on the same sandbox and
// finishes the prompt, and the session's events, read back from b, are
// 1..N with no gap and no double.
func TestClusterTakeover(t *testing.T) {
	d := startDeps(t)
	natsURL := natstest.StartServer(t)
	const ttl = time.Second
	a := startReplicaProc(t, d, natsURL, "a", ttl)
	b := startReplicaProc(t, d, natsURL, "b", ttl)

	// The model runs a slow shell command, then answers once it has seen
	// the command's output.
	d.fake.Script(func(r fakeprovider.Request) fakeprovider.Turn {
		if bytes.Contains(r.Body, []byte("slept well")) {
			return fakeprovider.Turn{Text: "All done."}
		}
		return fakeprovider.Turn{ToolCalls: []fakeprovider.ToolCall{{ID: "call_1", Name: "shell",
			Arguments: args(map[string]any{"command": "sleep 2 && echo slept well"})}}}
	})
	dir := t.TempDir()
	sb, err := d.sandbox.CreateSandbox(t.Context(), &sandboxv1.CreateSandboxRequest{Spec: &sandboxv1.SandboxSpec{Driver: "local", WorkingDirectory: dir}})
	if err != nil {
		t.Fatal(err)
	}
	created, err := a.client.CreateSession(t.Context(), &agentv1.CreateSessionRequest{
		Model: "openai/gpt-5", Sandbox: &agentv1.CreateSessionRequest_SandboxId{SandboxId: sb.GetSandbox().GetSandboxId()},
		PermissionLevel: agentv1.PermissionLevel_PERMISSION_LEVEL_FULL,
	})
	if err != nil {
		t.Fatal(err)
	}
	id := created.GetSession().GetSessionId()

	// Forwarded: b does not serve the session, a does.
	snap, err := b.client.GetSnapshot(t.Context(), &agentv1.GetSnapshotRequest{SessionId: id})
	if err != nil {
		t.Fatalf("GetSnapshot through the other replica: %v", err)
	}
	if got := snap.GetSnapshot().GetSession().GetSessionId(); got != id {
		t.Fatalf("GetSnapshot through the other replica: session %q", got)
	}

	// The prompt, through b too: its events stream from a.
	pctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	stream, err := b.client.Prompt(pctx, &agentv1.PromptRequest{SessionId: id, Text: "Sleep, then tell me."})
	if err != nil {
		t.Fatal(err)
	}
	var promptID string
	var lastBefore uint64
	for {
		resp, err := stream.Recv()
		if err != nil {
			t.Fatalf("forwarded prompt stream: %v", err)
		}
		ev := resp.GetEvent()
		promptID, lastBefore = ev.GetPromptId(), ev.GetSequence()
		if ev.GetToolCallStarted() != nil {
			break
		}
	}
	if err := a.cmd.Process.Kill(); err != nil { // SIGKILL, mid-command
		t.Fatal(err)
	}
	killed := time.Now()
	_ = a.cmd.Wait()

	// Reattach through b, from the first event, until the prompt ends;
	// until b has taken the session over a call fails (a is gone).
	var evs []*agentv1.AgentEvent
	deadline := time.Now().Add(60 * time.Second)
	for {
		evs = evs[:0]
		err := func() error {
			ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
			defer cancel()
			s, err := b.client.StreamEvents(ctx, &agentv1.StreamEventsRequest{SessionId: id, FromSequence: 1, Follow: true})
			if err != nil {
				return err
			}
			for {
				resp, err := s.Recv()
				if err != nil {
					return err
				}
				ev := resp.GetEvent()
				evs = append(evs, ev)
				if ev.GetPromptCompleted() != nil && ev.GetPromptId() == promptID {
					return nil
				}
			}
		}()
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no completed prompt through b: %v (after %d events)", err, len(evs))
		}
		time.Sleep(100 * time.Millisecond) // b's takeover: no notification to await from here
	}
	checkGapless(t, evs, 1)
	var resumed bool
	var firstNew time.Time
	for _, ev := range evs {
		if ev.GetSequence() > lastBefore && firstNew.IsZero() {
			firstNew = ev.GetTime().AsTime()
		}
		if ss := ev.GetSessionStarted(); ss != nil && ss.GetResumed() {
			resumed = true
			if ss.GetSandboxId() != sb.GetSandbox().GetSandboxId() {
				t.Errorf("resumed on sandbox %q, want the same %q", ss.GetSandboxId(), sb.GetSandbox().GetSandboxId())
			}
		}
	}
	if !resumed {
		t.Errorf("no resumed session_started in %v", eventTypes(evs))
	}
	rep := lastReport(t, evs)
	if rep.GetStatus() != agentv1.PromptStatus_PROMPT_STATUS_COMPLETED || rep.GetOutput() != "All done." {
		t.Errorf("report after the takeover: %v", rep)
	}
	t.Logf("killed the owner after event %d; the new owner's first event came %s later; %d events in all",
		lastBefore, firstNew.Sub(killed).Round(time.Millisecond), len(evs))
}
