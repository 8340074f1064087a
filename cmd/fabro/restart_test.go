package main

import (
	"bytes"
	"context"
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
