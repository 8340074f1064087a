package main

import (
	"bytes"
	"context"
	"io"
	"strings"
	"testing"
	"time"

	agentv1 "github.com/fabro-sh/fabro-go/gen/fabro/agent/v1"
	sandboxv1 "github.com/fabro-sh/fabro-go/gen/fabro/sandbox/v1"
	"github.com/fabro-sh/fabro-go/platform/grpcclient"
	"github.com/fabro-sh/fabro-go/services/llmgateway/fakeprovider"
)

// agentClient dials a serve's gRPC port as its admin.
func agentClient(t *testing.T, s *serveProc) agentv1.AgentServiceClient {
	t.Helper()
	conn, err := grpcclient.New(s.grpcAddr, grpcclient.Options{Token: grpcclient.Static(s.adminToken(t))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return agentv1.NewAgentServiceClient(conn)
}

// watchPrompt follows a prompt's events from sequence 1 until its
// prompt_completed, reconnecting (a server restarting refuses calls for a
// while) until the deadline, and returns every event of the session in
// that span: the last attempt's, whole.
func watchPrompt(t *testing.T, client func() agentv1.AgentServiceClient, sessionID, promptID string, until time.Duration) []*agentv1.AgentEvent {
	t.Helper()
	deadline := time.Now().Add(until)
	for {
		var evs []*agentv1.AgentEvent
		err := func() error {
			ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
			defer cancel()
			st, err := client().StreamEvents(ctx, &agentv1.StreamEventsRequest{SessionId: sessionID, FromSequence: 1, Follow: true})
			if err != nil {
				return err
			}
			for {
				resp, err := st.Recv()
				if err != nil {
					return err
				}
				evs = append(evs, resp.GetEvent())
				if ev := resp.GetEvent(); ev.GetPromptId() == promptID && ev.GetPromptCompleted() != nil {
					return nil
				}
			}
		}()
		if err == nil {
			return evs
		}
		if time.Now().After(deadline) {
			t.Fatalf("prompt %s did not complete: %v (%d events)", promptID, err, len(evs))
		}
		time.Sleep(100 * time.Millisecond) // the restart: nothing to await from here
	}
}

// checkExactLog checks the invariants of a session's log across a crash:
// sequences exactly 1..N, each prompt started and completed once, and no
// tool call started without its completion.
func checkExactLog(t *testing.T, evs []*agentv1.AgentEvent) {
	t.Helper()
	started, completed := map[string]int{}, map[string]int{}
	calls := map[string]int{}
	for i, ev := range evs {
		if ev.GetSequence() != uint64(i+1) {
			t.Fatalf("event %d has sequence %d (%v): the log is not exactly 1..N", i+1, ev.GetSequence(), ev)
		}
		switch {
		case ev.GetPromptStarted() != nil:
			started[ev.GetPromptId()]++
		case ev.GetPromptCompleted() != nil:
			completed[ev.GetPromptId()]++
		case ev.GetToolCallStarted() != nil:
			calls[ev.GetToolCallStarted().GetToolCallId()]++
		case ev.GetToolCallCompleted() != nil:
			calls[ev.GetToolCallCompleted().GetToolCallId()]--
		}
	}
	for p, n := range started {
		if n != 1 || completed[p] != 1 {
			t.Errorf("prompt %s: %d prompt_started and %d prompt_completed, want one each", p, n, completed[p])
		}
	}
	for id, open := range calls {
		if open != 0 {
			t.Errorf("tool call %s: %d more tool_call_started than tool_call_completed", id, open)
		}
	}
}

// TestServeKilledMidPromptContinues: `fabro serve` is killed with SIGKILL
// while a prompt's shell command runs. Started again on the same data
// directory, it continues the prompt by itself: the running call completes
// INTERRUPTED, the turn runs again, the prompt completes, and the
// session's log is exactly 1..N with one start and one end of the prompt.
func TestServeKilledMidPromptContinues(t *testing.T) {
	fake, overlay := scriptedAnthropic(t)
	fake.Script(func(r fakeprovider.Request) fakeprovider.Turn {
		if bytes.Contains(r.Body, []byte("slept well")) {
			return fakeprovider.Turn{Text: "All done."}
		}
		return fakeprovider.Turn{Text: "Sleeping first.", ToolCalls: []fakeprovider.ToolCall{{ID: "toolu_1", Name: "shell",
			Arguments: `{"command":"sleep 1 && echo slept well"}`}}}
	})
	ws, data := t.TempDir(), t.TempDir()
	env := []string{"FABRO_LLM_CATALOG_OVERLAY=" + overlay, "ANTHROPIC_API_KEY=test-key", "FABRO_SANDBOX_ALLOWED_ROOTS=" + ws}
	s := startServe(t, data, env...)
	c := agentClient(t, s)
	created, err := c.CreateSession(t.Context(), &agentv1.CreateSessionRequest{
		Model:           "anthropic/claude-sonnet-4.5",
		Sandbox:         &agentv1.CreateSessionRequest_SandboxSpec{SandboxSpec: &sandboxv1.SandboxSpec{Driver: "local", WorkingDirectory: ws}},
		PermissionLevel: agentv1.PermissionLevel_PERMISSION_LEVEL_FULL,
	})
	if err != nil {
		t.Fatal(err)
	}
	id := created.GetSession().GetSessionId()
	started, err := c.StartPrompt(t.Context(), &agentv1.StartPromptRequest{SessionId: id, Text: "Sleep, then tell me."})
	if err != nil {
		t.Fatal(err)
	}
	promptID := started.GetPromptId()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	st, err := c.StreamEvents(ctx, &agentv1.StreamEventsRequest{SessionId: id, FromSequence: 1, Follow: true, PromptId: promptID})
	if err != nil {
		t.Fatal(err)
	}
	var before uint64
	for {
		resp, err := st.Recv()
		if err != nil {
			t.Fatalf("before the kill: %v", err)
		}
		before = resp.GetEvent().GetSequence()
		if resp.GetEvent().GetToolCallStarted() != nil {
			break
		}
	}
	if err := s.cmd.Process.Kill(); err != nil { // SIGKILL, mid-command
		t.Fatal(err)
	}
	<-s.done
	cancel()

	restarted := time.Now()
	s2 := startServe(t, data, env...)
	c2 := agentClient(t, s2)
	evs := watchPrompt(t, func() agentv1.AgentServiceClient { return c2 }, id, promptID, 60*time.Second)
	checkExactLog(t, evs)
	var interrupted, replaced bool
	var firstNew time.Time
	for _, ev := range evs {
		if ev.GetSequence() > before && firstNew.IsZero() {
			firstNew = ev.GetTime().AsTime()
		}
		if tc := ev.GetToolCallCompleted(); tc != nil && tc.GetErrorKind() == agentv1.ToolErrorKind_TOOL_ERROR_KIND_INTERRUPTED {
			interrupted = true
		}
		if ev.GetAssistantOutputReplace() != nil && ev.GetPromptId() == promptID {
			replaced = true
		}
	}
	if !interrupted {
		t.Errorf("no tool_call_completed with INTERRUPTED for the call the kill cut off")
	}
	if !replaced {
		t.Errorf("the replayed turn's partial output is not marked (assistant_output_replace)")
	}
	rep := evs[len(evs)-1].GetPromptCompleted().GetReport()
	if rep.GetStatus() != agentv1.PromptStatus_PROMPT_STATUS_COMPLETED || rep.GetOutput() != "All done." {
		t.Errorf("the continued prompt's report: %v", rep)
	}
	t.Logf("killed after event %d; the prompt's first new event came %s after the restart began; %d events",
		before, firstNew.Sub(restarted).Round(time.Millisecond), len(evs))
}

// TestServeKilledWhileSubagentRuns: `fabro serve` is killed with SIGKILL
// while a subagent's shell command runs. After the restart the subagent's
// log is closed out, once: its running call completes INTERRUPTED, its
// prompt completes CANCELLED saying the process restarted, and its
// session is closed, so the parent's continued prompt finds it ended
// (and spawns it again). A second restart adds nothing to its log.
func TestServeKilledWhileSubagentRuns(t *testing.T) {
	fake, overlay := scriptedAnthropic(t)
	fake.Script(func(r fakeprovider.Request) fakeprovider.Turn {
		body := string(r.Body)
		if !strings.Contains(body, "PARENT-TASK") { // the subagent
			if strings.Contains(body, "sub slept") {
				return fakeprovider.Turn{Text: "SUBRESULT-OK"}
			}
			return fakeprovider.Turn{Text: "Sleeping.", ToolCalls: []fakeprovider.ToolCall{{ID: "toolu_sub", Name: "shell",
				Arguments: `{"command":"sleep 3 && echo sub slept"}`}}}
		}
		switch {
		case strings.Contains(body, "SUBRESULT-OK"):
			return fakeprovider.Turn{Text: "All done."}
		case strings.LastIndex(body, "has no subagents") > strings.LastIndex(body, "started on the task"):
			return fakeprovider.Turn{Text: "Again.", ToolCalls: []fakeprovider.ToolCall{{ID: "toolu_respawn", Name: "spawn_agent",
				Arguments: `{"task":"SUBTASK: sleep"}`}}}
		case strings.Contains(body, "started on the task"):
			return fakeprovider.Turn{Text: "Waiting.", ToolCalls: []fakeprovider.ToolCall{{ID: "toolu_wait", Name: "wait", Arguments: `{}`}}}
		}
		return fakeprovider.Turn{Text: "Delegating.", ToolCalls: []fakeprovider.ToolCall{{ID: "toolu_spawn", Name: "spawn_agent",
			Arguments: `{"task":"SUBTASK: sleep"}`}}}
	})
	ws, data := t.TempDir(), t.TempDir()
	env := []string{"FABRO_LLM_CATALOG_OVERLAY=" + overlay, "ANTHROPIC_API_KEY=test-key", "FABRO_SANDBOX_ALLOWED_ROOTS=" + ws}
	s := startServe(t, data, env...)
	c := agentClient(t, s)
	created, err := c.CreateSession(t.Context(), &agentv1.CreateSessionRequest{
		Model:           "anthropic/claude-sonnet-4.5",
		Sandbox:         &agentv1.CreateSessionRequest_SandboxSpec{SandboxSpec: &sandboxv1.SandboxSpec{Driver: "local", WorkingDirectory: ws}},
		PermissionLevel: agentv1.PermissionLevel_PERMISSION_LEVEL_FULL,
		Options:         &agentv1.AgentOptions{Subagents: &agentv1.SubagentOptions{Enabled: true}},
	})
	if err != nil {
		t.Fatal(err)
	}
	root := created.GetSession().GetSessionId()
	started, err := c.StartPrompt(t.Context(), &agentv1.StartPromptRequest{SessionId: root, Text: "PARENT-TASK"})
	if err != nil {
		t.Fatal(err)
	}
	// The subagent's session, once its shell command runs.
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	st, err := c.StreamEvents(ctx, &agentv1.StreamEventsRequest{SessionId: root, FromSequence: 1, Follow: true, IncludeSubagents: true})
	if err != nil {
		t.Fatal(err)
	}
	var child string
	for child == "" {
		resp, err := st.Recv()
		if err != nil {
			t.Fatalf("before the kill: %v", err)
		}
		if ev := resp.GetEvent(); ev.GetSessionId() != root && ev.GetToolCallStarted().GetToolName() == "shell" {
			child = ev.GetSessionId()
		}
	}
	if err := s.cmd.Process.Kill(); err != nil { // SIGKILL, mid-subagent
		t.Fatal(err)
	}
	<-s.done
	cancel()

	s2 := startServe(t, data, env...)
	c2 := agentClient(t, s2)
	evs := watchPrompt(t, func() agentv1.AgentServiceClient { return c2 }, root, started.GetPromptId(), 60*time.Second)
	checkExactLog(t, evs)
	if rep := evs[len(evs)-1].GetPromptCompleted().GetReport(); rep.GetOutput() != "All done." {
		t.Errorf("the parent's continued prompt: %v", rep)
	}
	childLog := replayAll(t, c2, child)
	checkExactLog(t, childLog)
	var interrupted bool
	var ended *agentv1.PromptReport
	for _, ev := range childLog {
		if tc := ev.GetToolCallCompleted(); tc.GetToolCallId() == "toolu_sub" && tc.GetErrorKind() == agentv1.ToolErrorKind_TOOL_ERROR_KIND_INTERRUPTED {
			interrupted = true
		}
		if pc := ev.GetPromptCompleted(); pc != nil {
			ended = pc.GetReport()
		}
	}
	if !interrupted {
		t.Errorf("the subagent's running call has no INTERRUPTED completion")
	}
	if ended.GetStatus() != agentv1.PromptStatus_PROMPT_STATUS_CANCELLED || ended.GetError().GetKind() != agentv1.AgentErrorKind_AGENT_ERROR_KIND_INTERRUPTED ||
		!strings.Contains(ended.GetError().GetMessage(), "restarted") {
		t.Errorf("the subagent's prompt report: %v; want CANCELLED, INTERRUPTED, naming the restart", ended)
	}
	got, err := c2.GetSession(t.Context(), &agentv1.GetSessionRequest{SessionId: child})
	if err != nil {
		t.Fatal(err)
	}
	if st := got.GetSession().GetState(); st != agentv1.SessionState_SESSION_STATE_CLOSED || got.GetSession().GetActivePromptId() != "" {
		t.Errorf("the subagent after the restart: %s, active prompt %q; want CLOSED with none", st, got.GetSession().GetActivePromptId())
	}

	// Once only: another restart finds nothing left to close out.
	s2.stop(t)
	s3 := startServe(t, data, env...)
	c3 := agentClient(t, s3)
	if again := replayAll(t, c3, child); len(again) != len(childLog) {
		t.Errorf("the subagent's log after a second restart has %d events, %d before: closed out twice", len(again), len(childLog))
	}
}

// replayAll reads a session's whole log.
func replayAll(t *testing.T, c agentv1.AgentServiceClient, id string) []*agentv1.AgentEvent {
	t.Helper()
	st, err := c.StreamEvents(t.Context(), &agentv1.StreamEventsRequest{SessionId: id, FromSequence: 1})
	if err != nil {
		t.Fatal(err)
	}
	var evs []*agentv1.AgentEvent
	for {
		resp, err := st.Recv()
		if err == io.EOF {
			return evs
		}
		if err != nil {
			t.Fatalf("replay %s: %v", id, err)
		}
		evs = append(evs, resp.GetEvent())
	}
}
