package crash_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	agentv1 "github.com/fabro-sh/fabro-go/gen/fabro/agent/v1"
	sandboxv1 "github.com/fabro-sh/fabro-go/gen/fabro/sandbox/v1"
	"github.com/fabro-sh/fabro-go/services/llmgateway/fakeprovider"
)

// TestKilledPromptAfterRestart kills fabro serve while the prompt's first
// commands run and restarts it, with -agent-resume-on-start on (the prompt
// continues by itself) and off (the session comes back SUSPENDED; its
// resume ends the prompt as interrupted, a watcher of it returns, and a
// continuation finishes the work). Either way the prompt is counted once,
// however many times it is continued, and the workspace is the full run's.
func TestKilledPromptAfterRestart(t *testing.T) {
	fake, err := fakeprovider.Listen("127.0.0.1:0", fakeprovider.New())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { fake.Close() })
	fake.Script(script)
	for _, resume := range []bool{true, false} {
		name := map[bool]string{true: "resume-on-start", false: "no-resume-on-start"}[resume]
		t.Run(name, func(t *testing.T) {
			flag := "-agent-resume-on-start=" + map[bool]string{true: "true", false: "false"}[resume]
			ws, data := t.TempDir(), t.TempDir()
			overlay := filepath.Join(t.TempDir(), "catalog.json")
			if err := os.WriteFile(overlay, fakeprovider.CatalogOverlay(fake.URL), 0o600); err != nil {
				t.Fatal(err)
			}
			env := []string{"FABRO_LLM_CATALOG_OVERLAY=" + overlay, "ANTHROPIC_API_KEY=test-key", "FABRO_SANDBOX_ALLOWED_ROOTS=" + ws}
			s := startServe(t, data, env, "", flag)
			c := s.client(t, data)
			created, err := c.CreateSession(t.Context(), &agentv1.CreateSessionRequest{
				Model:           "anthropic/claude-sonnet-4.5",
				Sandbox:         &agentv1.CreateSessionRequest_SandboxSpec{SandboxSpec: &sandboxv1.SandboxSpec{Driver: "local", WorkingDirectory: ws}},
				PermissionLevel: agentv1.PermissionLevel_PERMISSION_LEVEL_FULL,
				Options:         &agentv1.AgentOptions{Subagents: &agentv1.SubagentOptions{Enabled: true}},
			})
			if err != nil {
				t.Fatal(err)
			}
			id := created.GetSession().GetSessionId()
			started, err := c.StartPrompt(t.Context(), &agentv1.StartPromptRequest{SessionId: id, Text: promptText})
			if err != nil {
				t.Fatal(err)
			}
			promptID := started.GetPromptId()
			awaitEvent(t, c, id, func(ev *agentv1.AgentEvent) bool { return ev.GetToolCallStarted().GetToolCallId() == "toolu_b" })
			if err := s.cmd.Process.Kill(); err != nil { // SIGKILL, as toolu_b's command runs
				t.Fatal(err)
			}
			<-s.done
			s = startServe(t, data, env, "", flag)
			c = s.client(t, data)
			if resume {
				watch(t, c, id, promptID, time.Minute)
			} else {
				got, err := c.GetSession(t.Context(), &agentv1.GetSessionRequest{SessionId: id})
				if err != nil {
					t.Fatal(err)
				}
				if st := got.GetSession().GetState(); st != agentv1.SessionState_SESSION_STATE_SUSPENDED {
					t.Fatalf("after the restart the session is %s, want SUSPENDED", st)
				}
				// A watcher of the prompt returns: nothing continues it.
				ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
				st, err := c.StreamEvents(ctx, &agentv1.StreamEventsRequest{SessionId: id, PromptId: promptID, FromSequence: 1, Follow: true})
				if err == nil {
					for err == nil {
						_, err = st.Recv()
					}
				}
				hung := ctx.Err() != nil
				cancel()
				if hung {
					t.Fatalf("StreamEvents(prompt_id, follow) of the killed prompt did not return: %v", err)
				}
				if _, err := c.ResumeSession(t.Context(), &agentv1.ResumeSessionRequest{SessionId: id}); err != nil {
					t.Fatal(err)
				}
				end := promptEnd(t, c, id, promptID)
				if end.GetReport().GetStatus() != agentv1.PromptStatus_PROMPT_STATUS_CANCELLED ||
					end.GetReport().GetError().GetKind() != agentv1.AgentErrorKind_AGENT_ERROR_KIND_INTERRUPTED {
					t.Errorf("the killed prompt ended %v, want CANCELLED, INTERRUPTED", end.GetReport())
				}
				// --continue: the work goes on to its end.
				pr, err := c.Prompt(t.Context(), &agentv1.PromptRequest{SessionId: id, ContinueUnfinished: true})
				if err != nil {
					t.Fatal(err)
				}
				var last *agentv1.AgentEvent
				for {
					resp, err := pr.Recv()
					if err != nil {
						break
					}
					last = resp.GetEvent()
				}
				if st := last.GetPromptCompleted().GetReport().GetStatus(); st != agentv1.PromptStatus_PROMPT_STATUS_COMPLETED {
					t.Fatalf("the continuation ended %v (last event %v), want COMPLETED", st, last)
				}
			}
			got, err := c.GetSession(t.Context(), &agentv1.GetSessionRequest{SessionId: id})
			if err != nil {
				t.Fatal(err)
			}
			if n := got.GetSession().GetPromptCount(); n != 1 {
				t.Errorf("prompt_count %d, want 1 (one prompt, continued)", n)
			}
			b, err := os.ReadFile(filepath.Join(ws, "all.txt"))
			if err != nil || string(b) != "alpha\nbeta\ngamma\n" {
				t.Errorf("all.txt: %q, %v; want the full run's", b, err)
			}
		})
	}
}

// awaitEvent follows the session's events until one matches, again from
// the start while a restarted server has not loaded the session yet.
func awaitEvent(t *testing.T, c agentv1.AgentServiceClient, id string, match func(*agentv1.AgentEvent) bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	for {
		st, err := c.StreamEvents(ctx, &agentv1.StreamEventsRequest{SessionId: id, FromSequence: 1, Follow: true})
		for err == nil {
			var resp *agentv1.StreamEventsResponse
			if resp, err = st.Recv(); err == nil && match(resp.GetEvent()) {
				return
			}
		}
		if ctx.Err() != nil {
			t.Fatalf("the awaited event did not come: %v", err)
		}
		time.Sleep(100 * time.Millisecond) // a server restarting: nothing to await from here
	}
}

// promptEnd is the prompt's prompt_completed, read from the log.
func promptEnd(t *testing.T, c agentv1.AgentServiceClient, id, promptID string) *agentv1.PromptCompleted {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	st, err := c.StreamEvents(ctx, &agentv1.StreamEventsRequest{SessionId: id, PromptId: promptID, FromSequence: 1, Follow: true})
	if err != nil {
		t.Fatal(err)
	}
	for {
		resp, err := st.Recv()
		if err != nil {
			t.Fatalf("prompt %s has no prompt_completed: %v", promptID, err)
		}
		if pc := resp.GetEvent().GetPromptCompleted(); pc != nil && resp.GetEvent().GetSessionId() == id {
			return pc
		}
	}
}
