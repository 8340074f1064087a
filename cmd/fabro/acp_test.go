package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	acp "github.com/coder/acp-go-sdk"

	"github.com/fabro-sh/fabro-go/services/llmgateway/fakeprovider"
)

// acpTestClient is the editor's side: it records every session/update and
// answers permission requests from a script.
type acpTestClient struct {
	mu       sync.Mutex
	updates  []acp.SessionUpdate
	answers  []acp.PermissionOptionId // the next permission requests' answers, in order
	asked    []acp.RequestPermissionRequest
	onUpdate func(acp.SessionUpdate)
}

func (c *acpTestClient) SessionUpdate(_ context.Context, n acp.SessionNotification) error {
	c.mu.Lock()
	c.updates = append(c.updates, n.Update)
	f := c.onUpdate
	c.mu.Unlock()
	if f != nil {
		f(n.Update)
	}
	return nil
}

func (c *acpTestClient) RequestPermission(_ context.Context, p acp.RequestPermissionRequest) (acp.RequestPermissionResponse, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.asked = append(c.asked, p)
	if len(c.answers) == 0 {
		return acp.RequestPermissionResponse{Outcome: acp.NewRequestPermissionOutcomeCancelled()}, nil
	}
	a := c.answers[0]
	c.answers = c.answers[1:]
	return acp.RequestPermissionResponse{Outcome: acp.NewRequestPermissionOutcomeSelected(a)}, nil
}

func (c *acpTestClient) take() []acp.SessionUpdate {
	c.mu.Lock()
	defer c.mu.Unlock()
	u := c.updates
	c.updates = nil
	return u
}

func (c *acpTestClient) ReadTextFile(context.Context, acp.ReadTextFileRequest) (acp.ReadTextFileResponse, error) {
	return acp.ReadTextFileResponse{}, acp.NewMethodNotFound(acp.ClientMethodFsReadTextFile)
}

func (c *acpTestClient) WriteTextFile(context.Context, acp.WriteTextFileRequest) (acp.WriteTextFileResponse, error) {
	return acp.WriteTextFileResponse{}, acp.NewMethodNotFound(acp.ClientMethodFsWriteTextFile)
}

func (c *acpTestClient) CreateTerminal(context.Context, acp.CreateTerminalRequest) (acp.CreateTerminalResponse, error) {
	return acp.CreateTerminalResponse{}, acp.NewMethodNotFound(acp.ClientMethodTerminalCreate)
}

func (c *acpTestClient) KillTerminal(context.Context, acp.KillTerminalRequest) (acp.KillTerminalResponse, error) {
	return acp.KillTerminalResponse{}, acp.NewMethodNotFound(acp.ClientMethodTerminalKill)
}

func (c *acpTestClient) TerminalOutput(context.Context, acp.TerminalOutputRequest) (acp.TerminalOutputResponse, error) {
	return acp.TerminalOutputResponse{}, acp.NewMethodNotFound(acp.ClientMethodTerminalOutput)
}

func (c *acpTestClient) ReleaseTerminal(context.Context, acp.ReleaseTerminalRequest) (acp.ReleaseTerminalResponse, error) {
	return acp.ReleaseTerminalResponse{}, acp.NewMethodNotFound(acp.ClientMethodTerminalRelease)
}

func (c *acpTestClient) WaitForTerminalExit(context.Context, acp.WaitForTerminalExitRequest) (acp.WaitForTerminalExitResponse, error) {
	return acp.WaitForTerminalExitResponse{}, acp.NewMethodNotFound(acp.ClientMethodTerminalWaitForExit)
}

// acpProc is a running `fabro acp` with the SDK's client on its pipes.
type acpProc struct {
	cmd    *exec.Cmd
	conn   *acp.ClientSideConnection
	client *acpTestClient
	stdin  io.WriteCloser
	stderr *syncWriter
}

// startACP runs the real binary as an editor does: stdin and stdout are
// the protocol's pipes.
func startACP(t *testing.T, ws string, args []string) *acpProc {
	t.Helper()
	cmd := exec.Command(fabroBin, args...)
	cmd.Dir = ws
	cmd.Env = append(os.Environ(), "ANTHROPIC_API_KEY=test-key")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	p := &acpProc{cmd: cmd, client: &acpTestClient{}, stdin: stdin, stderr: &syncWriter{b: &strings.Builder{}}}
	cmd.Stderr = p.stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	p.conn = acp.NewClientSideConnection(p.client, stdin, stdout)
	return p
}

// stop closes the editor's end and waits for fabro acp to exit by itself.
func (p *acpProc) stop(t *testing.T) {
	t.Helper()
	p.stdin.Close()
	done := make(chan error, 1)
	go func() { done <- p.cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("fabro acp exited with %v\nstderr:\n%s", err, p.stderr.String())
		}
	case <-time.After(time.Minute):
		t.Fatalf("fabro acp did not exit when its stdin closed\nstderr:\n%s", p.stderr.String())
	}
}

type syncWriter struct {
	mu sync.Mutex
	b  *strings.Builder
}

func (w *syncWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.String()
}

func (w *syncWriter) Write(b []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(b)
}

// summarize is the updates as short lines, to compare.
func summarize(us []acp.SessionUpdate) []string {
	var out []string
	var text strings.Builder
	flush := func() {
		if text.Len() > 0 {
			out = append(out, "text: "+text.String())
			text.Reset()
		}
	}
	for _, u := range us {
		switch {
		case u.AgentMessageChunk != nil:
			text.WriteString(u.AgentMessageChunk.Content.Text.Text)
			continue
		case u.UserMessageChunk != nil:
			flush()
			out = append(out, "user: "+u.UserMessageChunk.Content.Text.Text)
		case u.ToolCall != nil:
			flush()
			loc := ""
			if len(u.ToolCall.Locations) > 0 {
				loc = " @" + filepath.Base(u.ToolCall.Locations[0].Path)
			}
			out = append(out, fmt.Sprintf("tool_call %s %s %s [%s]%s", u.ToolCall.ToolCallId, u.ToolCall.Kind, u.ToolCall.Status, u.ToolCall.Title, loc))
		case u.ToolCallUpdate != nil:
			flush()
			body := ""
			if c := u.ToolCallUpdate.Content; len(c) > 0 && c[0].Content != nil && c[0].Content.Content.Text != nil {
				body = firstLine(c[0].Content.Content.Text.Text)
			}
			out = append(out, fmt.Sprintf("tool_call_update %s %s: %s", u.ToolCallUpdate.ToolCallId, *u.ToolCallUpdate.Status, clip(body, 60)))
		}
	}
	flush()
	return out
}

// TestACP drives the real `fabro acp` over its pipes with the ACP Go
// SDK's client side, against an in-process stack on a fake Anthropic:
// initialize, new, a prompt whose two shell calls ask permission (one
// allowed, one denied), a cancelled prompt, and then, in a second fabro
// acp, session/load replaying the conversation and a prompt on it.
func TestACP(t *testing.T) {
	fake := fakeprovider.New(append(shellTurns(),
		fakeprovider.Turn{Text: strings.Repeat("slowly ", 200), ChunkRunes: 4, ChunkDelay: 20 * time.Millisecond},
		fakeprovider.Turn{Text: "Loaded and answering."})...)
	ws, execArgs := execSetup(t, fake)
	args := append([]string{"acp"}, execArgs[1:]...) // exec's flags, without its name
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	p := startACP(t, ws, args)
	init, err := p.conn.Initialize(ctx, acp.InitializeRequest{ProtocolVersion: acp.ProtocolVersionNumber})
	if err != nil {
		t.Fatalf("initialize: %v\nstderr:\n%s", err, p.stderr.String())
	}
	if init.ProtocolVersion != acp.ProtocolVersionNumber || !init.AgentCapabilities.LoadSession || init.AgentInfo == nil || init.AgentInfo.Name != "fabro" {
		t.Errorf("initialize = %+v, want protocol 1, loadSession, agent fabro", init)
	}
	if _, err := p.conn.NewSession(ctx, acp.NewSessionRequest{Cwd: "/", McpServers: []acp.McpServer{}}); err == nil || !strings.Contains(err.Error(), "outside") {
		t.Errorf("session/new on / (outside --dir) = %v, want refused", err)
	}
	sess, err := p.conn.NewSession(ctx, acp.NewSessionRequest{Cwd: ws, McpServers: []acp.McpServer{}})
	if err != nil {
		t.Fatalf("session/new: %v\nstderr:\n%s", err, p.stderr.String())
	}

	// A prompt with two tool calls that ask: allowed, then denied.
	p.client.answers = []acp.PermissionOptionId{"allow_once", "reject_once"}
	resp, err := p.conn.Prompt(ctx, acp.PromptRequest{SessionId: sess.SessionId, Prompt: []acp.ContentBlock{acp.TextBlock("Write the files.")}})
	if err != nil {
		t.Fatalf("session/prompt: %v\nstderr:\n%s", err, p.stderr.String())
	}
	if resp.StopReason != acp.StopReasonEndTurn {
		t.Errorf("stop reason %q, want end_turn", resp.StopReason)
	}
	got := summarize(p.client.take())
	want := []string{
		"tool_call c1 execute in_progress [shell echo approved > out.txt]",
		"tool_call_update c1 completed: Exit code: 0",
		"tool_call c2 execute in_progress [shell echo second > second.txt]",
		"tool_call_update c2 failed: The user denied this call of shell. They said: denied in the…",
		"text: All done.",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("session/update:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if len(p.client.asked) != 2 || p.client.asked[0].ToolCall.ToolCallId != "c1" || *p.client.asked[0].ToolCall.Kind != acp.ToolKindExecute || len(p.client.asked[0].Options) != 3 {
		t.Errorf("permission requests = %+v, want two, the first for c1 with 3 options", p.client.asked)
	}
	if b, err := os.ReadFile(filepath.Join(ws, "out.txt")); err != nil || string(b) != "approved\n" {
		t.Errorf("out.txt = %q, %v (the allowed call)", b, err)
	}
	if _, err := os.Stat(filepath.Join(ws, "second.txt")); err == nil {
		t.Errorf("the denied call ran")
	}

	// session/cancel while the answer streams: the prompt ends cancelled.
	first := make(chan struct{})
	var once sync.Once
	p.client.mu.Lock()
	p.client.onUpdate = func(u acp.SessionUpdate) {
		if u.AgentMessageChunk != nil {
			once.Do(func() { close(first) })
		}
	}
	p.client.mu.Unlock()
	go func() {
		select {
		case <-first:
			p.conn.Cancel(ctx, acp.CancelNotification{SessionId: sess.SessionId})
		case <-ctx.Done():
		}
	}()
	resp, err = p.conn.Prompt(ctx, acp.PromptRequest{SessionId: sess.SessionId, Prompt: []acp.ContentBlock{acp.TextBlock("Say it slowly.")}})
	if err != nil || resp.StopReason != acp.StopReasonCancelled {
		t.Errorf("cancelled prompt = %+v, %v; want stop reason cancelled", resp, err)
	}
	text := strings.Join(summarize(p.client.take()), "\n")
	if !strings.Contains(text, "slow") || strings.Count(text, "slowly") >= 200 {
		t.Errorf("the cancelled prompt's text is not a part of the answer: %q", clip(text, 200))
	}
	p.client.mu.Lock()
	p.client.onUpdate = nil
	p.client.mu.Unlock()
	p.stop(t)

	// A second fabro acp loads the session: its history first, then a prompt.
	p2 := startACP(t, ws, args)
	if _, err := p2.conn.Initialize(ctx, acp.InitializeRequest{ProtocolVersion: acp.ProtocolVersionNumber}); err != nil {
		t.Fatal(err)
	}
	if _, err := p2.conn.LoadSession(ctx, acp.LoadSessionRequest{SessionId: "no-such-session", Cwd: ws, McpServers: []acp.McpServer{}}); err == nil {
		t.Errorf("session/load of a session that does not exist succeeded")
	}
	if _, err := p2.conn.LoadSession(ctx, acp.LoadSessionRequest{SessionId: sess.SessionId, Cwd: ws, McpServers: []acp.McpServer{}}); err != nil {
		t.Fatalf("session/load: %v\nstderr:\n%s", err, p2.stderr.String())
	}
	replay := summarize(p2.client.take())
	if len(replay) < 6 || replay[0] != "user: Write the files." || replay[1] != want[0] || replay[5] != want[4] || !strings.Contains(strings.Join(replay, "\n"), "user: Say it slowly.") {
		t.Errorf("session/load replayed:\n%s\nwant the first prompt's updates after its user message, then the second's", strings.Join(replay, "\n"))
	}
	resp, err = p2.conn.Prompt(ctx, acp.PromptRequest{SessionId: sess.SessionId, Prompt: []acp.ContentBlock{acp.TextBlock("And now?")}})
	if err != nil || resp.StopReason != acp.StopReasonEndTurn {
		t.Fatalf("prompt after load = %+v, %v\nstderr:\n%s", resp, err, p2.stderr.String())
	}
	if got := summarize(p2.client.take()); len(got) != 1 || got[0] != "text: Loaded and answering." {
		t.Errorf("prompt after load: %q", got)
	}
	// The model saw the loaded history: the first prompt's text is in
	// the last request.
	reqs := fake.Requests()
	if last := string(reqs[len(reqs)-1].Body); !strings.Contains(last, "Write the files.") || !strings.Contains(last, "And now?") {
		t.Errorf("the prompt after load did not carry the session's history")
	}
	p2.stop(t)
}

// TestACPBadInput writes raw JSON-RPC: a method fabro does not implement,
// a line that is not JSON, a JSON value that is not a message, a prompt
// on a session never opened. Each gets the spec's error, and the
// connection goes on (initialize still answers after them).
func TestACPBadInput(t *testing.T) {
	ws, execArgs := execSetup(t, fakeprovider.New())
	cmd := exec.Command(fabroBin, append([]string{"acp"}, execArgs[1:]...)...)
	cmd.Dir = ws
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	stderr := &syncWriter{b: &strings.Builder{}}
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	out := bufio.NewScanner(stdout)
	out.Buffer(nil, 1<<20)
	exchange := func(line string) map[string]any {
		t.Helper()
		if _, err := io.WriteString(stdin, line+"\n"); err != nil {
			t.Fatal(err)
		}
		if !out.Scan() {
			t.Fatalf("no answer to %s: %v\nstderr:\n%s", line, out.Err(), stderr.String())
		}
		var m map[string]any
		if err := json.Unmarshal(out.Bytes(), &m); err != nil {
			t.Fatalf("answer %q is not JSON: %v", out.Text(), err)
		}
		return m
	}
	errCode := func(m map[string]any) float64 {
		e, _ := m["error"].(map[string]any)
		c, _ := e["code"].(float64)
		return c
	}
	tests := []struct {
		name, line string
		wantCode   float64
		wantID     any
	}{
		{"unknown method", `{"jsonrpc":"2.0","id":1,"method":"session/teleport","params":{}}`, -32601, float64(1)},
		{"not JSON", `{"jsonrpc":"2.0","id":2,"method":`, -32700, nil},
		{"not a message", `[1,2,3]`, -32600, nil},
		{"no method or id", `{"jsonrpc":"2.0","params":{}}`, -32600, nil},
		{"bad params", `{"jsonrpc":"2.0","id":3,"method":"initialize","params":{"protocolVersion":"one"}}`, -32602, float64(3)},
		{"prompt on no session", `{"jsonrpc":"2.0","id":4,"method":"session/prompt","params":{"sessionId":"nope","prompt":[{"type":"text","text":"hi"}]}}`, -32602, float64(4)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m := exchange(tc.line)
			if errCode(m) != tc.wantCode || m["id"] != tc.wantID {
				t.Errorf("answer %v, want error %v with id %v", m, tc.wantCode, tc.wantID)
			}
		})
	}
	m := exchange(`{"jsonrpc":"2.0","id":9,"method":"initialize","params":{"protocolVersion":1}}`)
	if res, _ := m["result"].(map[string]any); res == nil || res["protocolVersion"] != float64(1) {
		t.Errorf("initialize after the bad input = %v", m)
	}
	stdin.Close()
	if err := cmd.Wait(); err != nil {
		t.Errorf("fabro acp: %v\n%s", err, stderr.String())
	}
}
