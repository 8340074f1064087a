package crash_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	agentv1 "github.com/fabro-sh/fabro-go/gen/fabro/agent/v1"
	sandboxv1 "github.com/fabro-sh/fabro-go/gen/fabro/sandbox/v1"
	"github.com/fabro-sh/fabro-go/services/llmgateway/fakeprovider"
)

// TestApprovalOpenAtKill kills fabro serve while a shell call waits for
// its approval. After the restart the continued prompt asks again (a new
// approval id the client answers, and the prompt completes), and the
// approval the killed process left waiting is resolved in the log: no
// approval_requested is left that nothing can answer.
func TestApprovalOpenAtKill(t *testing.T) {
	fake, err := fakeprovider.Listen("127.0.0.1:0", fakeprovider.New())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { fake.Close() })
	fake.Script(func(r fakeprovider.Request) fakeprovider.Turn {
		if strings.Contains(string(r.Body), "7-asked") {
			return fakeprovider.Turn{Text: "Done."}
		}
		b, _ := json.Marshal(map[string]any{"command": `echo "$((3+4))-asked" > asked.txt; cat asked.txt`})
		return fakeprovider.Turn{Text: "Asking.", ToolCalls: []fakeprovider.ToolCall{{ID: "toolu_ask", Name: "shell", Arguments: string(b)}}}
	})
	ws, data := t.TempDir(), t.TempDir()
	overlay := filepath.Join(t.TempDir(), "catalog.json")
	if err := os.WriteFile(overlay, fakeprovider.CatalogOverlay(fake.URL), 0o600); err != nil {
		t.Fatal(err)
	}
	env := []string{"FABRO_LLM_CATALOG_OVERLAY=" + overlay, "ANTHROPIC_API_KEY=test-key", "FABRO_SANDBOX_ALLOWED_ROOTS=" + ws}
	s := startServe(t, data, env, "")
	c := s.client(t, data)
	created, err := c.CreateSession(t.Context(), &agentv1.CreateSessionRequest{
		Model:           "anthropic/claude-sonnet-4.5",
		Sandbox:         &agentv1.CreateSessionRequest_SandboxSpec{SandboxSpec: &sandboxv1.SandboxSpec{Driver: "local", WorkingDirectory: ws}},
		PermissionLevel: agentv1.PermissionLevel_PERMISSION_LEVEL_FULL,
		Settings:        &agentv1.ToolSettings{Permissions: &agentv1.PermissionRules{Ask: []string{"shell"}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	id := created.GetSession().GetSessionId()
	started, err := c.StartPrompt(t.Context(), &agentv1.StartPromptRequest{SessionId: id, Text: "APPROVAL-PROMPT"})
	if err != nil {
		t.Fatal(err)
	}
	var first string
	awaitEvent(t, c, id, func(ev *agentv1.AgentEvent) bool {
		first = ev.GetApprovalRequested().GetApprovalId()
		return first != ""
	})
	if err := s.cmd.Process.Kill(); err != nil { // SIGKILL as the call waits
		t.Fatal(err)
	}
	<-s.done
	s = startServe(t, data, env, "")
	c = s.client(t, data)
	// The continued prompt asks again; the answer lets it run.
	var again string
	awaitEvent(t, c, id, func(ev *agentv1.AgentEvent) bool {
		if a := ev.GetApprovalRequested().GetApprovalId(); a != "" && a != first {
			again = a
		}
		return again != ""
	})
	if _, err := c.Approve(t.Context(), &agentv1.ApproveRequest{SessionId: id, ApprovalId: again, Decision: agentv1.ApprovalDecision_APPROVAL_DECISION_ALLOW_ONCE}); err != nil {
		t.Fatalf("answer the approval asked again: %v", err)
	}
	if st := promptEnd(t, c, id, started.GetPromptId()).GetReport().GetStatus(); st != agentv1.PromptStatus_PROMPT_STATUS_COMPLETED {
		t.Errorf("the prompt ended %s, want COMPLETED", st)
	}
	if b, err := os.ReadFile(filepath.Join(ws, "asked.txt")); err != nil || string(b) != "7-asked\n" {
		t.Errorf("asked.txt: %q, %v", b, err)
	}
	// Every approval asked is resolved in the log.
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	st, err := c.StreamEvents(ctx, &agentv1.StreamEventsRequest{SessionId: id, FromSequence: 1})
	if err != nil {
		t.Fatal(err)
	}
	open := map[string]bool{}
	for {
		resp, err := st.Recv()
		if err != nil {
			break
		}
		if a := resp.GetEvent().GetApprovalRequested(); a != nil {
			open[a.GetApprovalId()] = true
		}
		if a := resp.GetEvent().GetApprovalResolved(); a != nil {
			delete(open, a.GetApprovalId())
		}
	}
	if len(open) > 0 {
		t.Errorf("approvals requested and never resolved in the log: %v (the killed process's was %s)", open, first)
	}
}
