package agent_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	agentv1 "github.com/fabro-sh/fabro-go/gen/fabro/agent/v1"
	sandboxv1 "github.com/fabro-sh/fabro-go/gen/fabro/sandbox/v1"
	"github.com/fabro-sh/fabro-go/platform/server"
	"github.com/fabro-sh/fabro-go/services/agent"
	"github.com/fabro-sh/fabro-go/services/llmgateway/fakeprovider"
	"github.com/fabro-sh/fabro-go/services/sandbox"
)

// sandboxProcess is the sandbox service as a process of its own: its
// gRPC server on a fixed loopback address and its data directory, which
// stop and start again there, as a restarted sandbox binary does.
type sandboxProcess struct {
	t       *testing.T
	addr    string
	dataDir string
	svc     *sandbox.Service
	srv     *server.Server
}

func startSandboxProcess(t *testing.T) *sandboxProcess {
	p := &sandboxProcess{t: t, addr: "127.0.0.1:0", dataDir: filepath.Join(t.TempDir(), "sandbox")}
	p.start()
	t.Cleanup(p.stop)
	return p
}

func (p *sandboxProcess) start() {
	t := p.t
	svc, err := sandbox.New(sandbox.Config{DataDir: p.dataDir, Security: sandbox.Security{AllowedRoots: []string{os.TempDir()}}}, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	srv, err := server.Start(t.Context(), server.Config{GRPCAddr: p.addr, NoAuth: true}, testLogger(t), svc)
	if err != nil {
		svc.Close(context.Background())
		t.Fatal(err)
	}
	p.svc, p.srv, p.addr = svc, srv, srv.GRPCAddr()
}

func (p *sandboxProcess) stop() {
	if p.srv == nil {
		return
	}
	// No drain: the calls in flight are cut, as a dying process cuts them.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	p.srv.Shutdown(ctx)
	p.svc.Close(context.Background())
	p.srv, p.svc = nil, nil
}

// A sandbox service that restarts while a prompt runs costs the command
// that was running (its tool call fails, naming the broken connection),
// not the session: the next tool call waits for the service to be back,
// the prompt completes, and the session takes more prompts.
func TestSandboxServiceRestartMidToolCall(t *testing.T) {
	sb := startSandboxProcess(t)
	st := newStack(t, func(c *agent.Config) { c.SandboxAddr = sb.addr })
	conn, err := grpc.NewClient(sb.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	dir := t.TempDir()
	created, err := sandboxv1.NewSandboxServiceClient(conn).CreateSandbox(t.Context(), &sandboxv1.CreateSandboxRequest{
		Spec: &sandboxv1.SandboxSpec{Driver: "local", WorkingDirectory: dir}})
	if err != nil {
		t.Fatal(err)
	}
	st.fake.Enqueue(
		fakeprovider.Turn{ToolCalls: []fakeprovider.ToolCall{{ID: "c1", Name: "shell", Arguments: args(map[string]any{"command": "sleep 60"})}}},
		fakeprovider.Turn{ToolCalls: []fakeprovider.ToolCall{{ID: "c2", Name: "write_file", Arguments: args(map[string]any{"file_path": "after.txt", "content": "back\n"})}}},
		fakeprovider.Turn{Text: "done"},
		fakeprovider.Turn{Text: "still here"},
	)
	sess, err := st.agent.CreateSession(t.Context(), &agentv1.CreateSessionRequest{
		Model: "anthropic/claude-opus-4.1", Sandbox: &agentv1.CreateSessionRequest_SandboxId{SandboxId: created.GetSandbox().GetSandboxId()},
		PermissionLevel: agentv1.PermissionLevel_PERMISSION_LEVEL_FULL})
	if err != nil {
		t.Fatal(err)
	}
	id := sess.GetSession().GetSessionId()
	stream, err := st.agent.Prompt(t.Context(), &agentv1.PromptRequest{SessionId: id, Text: "go"})
	if err != nil {
		t.Fatal(err)
	}
	var evs []*agentv1.AgentEvent
	next := func() *agentv1.AgentEvent {
		t.Helper()
		resp, err := stream.Recv()
		if err != nil {
			t.Fatalf("prompt stream: %v after %v", err, eventTypes(evs))
		}
		evs = append(evs, resp.GetEvent())
		return resp.GetEvent()
	}
	// The sandbox service goes down while the command runs, and stays down
	// until the next tool call is waiting for it.
	for ev := next(); ev.GetToolCallStarted().GetToolCallId() != "c1"; ev = next() {
	}
	sb.stop()
	var shellOut string
	for ev := next(); ev.GetToolCallStarted().GetToolCallId() != "c2"; ev = next() {
		if c := ev.GetToolCallCompleted(); c != nil {
			shellOut = c.GetOutput()
		}
	}
	if !strings.Contains(shellOut, "connection to the sandbox service broke") {
		t.Errorf("the interrupted command's result %q does not name the broken connection", shellOut)
	}
	sb.start()
	for ev := next(); ev.GetPromptCompleted() == nil; ev = next() {
	}
	if r := lastReport(t, evs); r.GetError() != nil {
		t.Fatalf("the prompt failed: %v", r.GetError())
	}
	checkGapless(t, evs, evs[0].GetSequence())
	if b, err := os.ReadFile(filepath.Join(dir, "after.txt")); err != nil || string(b) != "back\n" {
		t.Errorf("the tool call after the restart wrote %q, %v", b, err)
	}
	got, err := st.agent.GetSession(t.Context(), &agentv1.GetSessionRequest{SessionId: id})
	if err != nil {
		t.Fatal(err)
	}
	if s := got.GetSession().GetState(); s == agentv1.SessionState_SESSION_STATE_CLOSED {
		t.Fatalf("the session was closed by the sandbox service's restart")
	}
	if r := lastReport(t, st.prompt(t, id, "again")); r.GetError() != nil {
		t.Fatalf("a prompt after the restart failed: %v", r.GetError())
	}
}
