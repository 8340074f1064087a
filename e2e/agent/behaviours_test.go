package agent_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	agentv1 "github.com/fabro-sh/fabro-go/gen/fabro/agent/v1"
	"github.com/fabro-sh/fabro-go/services/agent"
	"github.com/fabro-sh/fabro-go/services/llmgateway/fakeprovider"
)

// TestTaskListSharedWithSubagents: a subagent's TaskCreate lands in the
// root's list (one list per tree), and the list is restored on resume.
func TestTaskListSharedWithSubagents(t *testing.T) {
	st := newStack(t)
	_, sbID := st.workspace(t, nil)
	st.fake.Script(func(r fakeprovider.Request) fakeprovider.Turn {
		body := string(r.Body)
		switch {
		case !strings.Contains(body, "PARENT-PROMPT"): // the child
			if strings.Contains(body, "created successfully") {
				return fakeprovider.Turn{Text: "child done"}
			}
			return fakeprovider.Turn{ToolCalls: []fakeprovider.ToolCall{{ID: "t2", Name: "TaskCreate", Arguments: args(map[string]any{"subject": "CHILD-TASK", "description": "from the child"})}}}
		case strings.Contains(body, "completed (success"):
			return fakeprovider.Turn{Text: "parent done"}
		case spawnedID.MatchString(body):
			id := spawnedID.FindStringSubmatch(body)[1]
			return fakeprovider.Turn{ToolCalls: []fakeprovider.ToolCall{{ID: "w1", Name: "wait", Arguments: args(map[string]any{"agent_id": id})}}}
		case strings.Contains(body, "created successfully"):
			return fakeprovider.Turn{ToolCalls: []fakeprovider.ToolCall{{ID: "sp1", Name: "spawn_agent", Arguments: args(map[string]any{"task": "add a task"})}}}
		}
		return fakeprovider.Turn{ToolCalls: []fakeprovider.ToolCall{{ID: "t1", Name: "TaskCreate", Arguments: args(map[string]any{"subject": "ROOT-TASK", "description": "from the root"})}}}
	})
	created, err := st.agent.CreateSession(t.Context(), &agentv1.CreateSessionRequest{
		Model: "anthropic/claude-sonnet-4.5", Sandbox: &agentv1.CreateSessionRequest_SandboxId{SandboxId: sbID},
		Options: &agentv1.AgentOptions{Subagents: &agentv1.SubagentOptions{Enabled: true}},
	})
	if err != nil {
		t.Fatal(err)
	}
	id := created.GetSession().GetSessionId()
	if rep := lastReport(t, st.prompt(t, id, "PARENT-PROMPT")); rep.GetOutput() != "parent done" {
		t.Fatalf("report %v", rep)
	}
	subjects := func() []string {
		t.Helper()
		snap, err := st.agent.GetSnapshot(t.Context(), &agentv1.GetSnapshotRequest{SessionId: id})
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, l := range snap.GetSnapshot().GetTodoLists() {
			for _, it := range l.GetItems() {
				out = append(out, it.GetItemId()+":"+it.GetSubject())
			}
		}
		return out
	}
	want := "1:ROOT-TASK 2:CHILD-TASK"
	if got := strings.Join(subjects(), " "); got != want {
		t.Fatalf("root's tasks = %q, want %q (one list for the tree)", got, want)
	}
	if _, err := st.agent.CloseSession(t.Context(), &agentv1.CloseSessionRequest{SessionId: id}); err != nil {
		t.Fatal(err)
	}
	if _, err := st.agent.ResumeSession(t.Context(), &agentv1.ResumeSessionRequest{SessionId: id}); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(subjects(), " "); got != want {
		t.Errorf("tasks after resume = %q, want %q", got, want)
	}
}

// TestPlanRestoredOnResume: the update_plan plan survives a resume.
func TestPlanRestoredOnResume(t *testing.T) {
	st := newStack(t)
	_, sbID := st.workspace(t, nil)
	st.fake.Enqueue(
		fakeprovider.Turn{ToolCalls: []fakeprovider.ToolCall{{ID: "p1", Name: "update_plan", Arguments: args(map[string]any{"plan": []map[string]any{{"step": "STEP-ONE", "status": "in_progress"}}})}}},
		fakeprovider.Turn{Text: "planned"},
	)
	id := st.session(t, sbID, nil, "")
	st.prompt(t, id, "plan")
	if _, err := st.agent.CloseSession(t.Context(), &agentv1.CloseSessionRequest{SessionId: id}); err != nil {
		t.Fatal(err)
	}
	if _, err := st.agent.ResumeSession(t.Context(), &agentv1.ResumeSessionRequest{SessionId: id}); err != nil {
		t.Fatal(err)
	}
	snap, err := st.agent.GetSnapshot(t.Context(), &agentv1.GetSnapshotRequest{SessionId: id})
	if err != nil {
		t.Fatal(err)
	}
	l := snap.GetSnapshot().GetTodoLists()
	if len(l) != 1 || len(l[0].GetItems()) != 1 || l[0].GetItems()[0].GetSubject() != "STEP-ONE" {
		t.Errorf("plan after resume = %v", l)
	}
}

// TestProfileAndPermissionsInPrompt: a model without a profile takes its
// provider's, reported in the route; the system prompt says what the level
// allows and, at read-only, never tells the model to edit or run.
func TestProfileAndPermissionsInPrompt(t *testing.T) {
	st := newStack(t)
	_, sbID := st.workspace(t, nil)
	tests := []struct {
		model   string
		level   agentv1.PermissionLevel
		profile agentv1.AgentProfile
		want    []string
		notWant []string
	}{
		{"xai/grok-4", agentv1.PermissionLevel_PERMISSION_LEVEL_FULL, agentv1.AgentProfile_AGENT_PROFILE_OPENAI,
			[]string{"Permission level: full", "run the project's checks with the shell", "apply_patch"}, nil},
		{"anthropic/claude-sonnet-4.5", agentv1.PermissionLevel_PERMISSION_LEVEL_READ_ONLY, agentv1.AgentProfile_AGENT_PROFILE_ANTHROPIC,
			[]string{"Permission level: read-only", "read-only tools"}, []string{"edit_file", "make focused edits", "shell", "Task tools"}},
		{"openai/gpt-5", agentv1.PermissionLevel_PERMISSION_LEVEL_READ_ONLY, agentv1.AgentProfile_AGENT_PROFILE_OPENAI,
			[]string{"Permission level: read-only"}, []string{"apply_patch", "make focused edits", "with the shell", "update_plan"}},
		{"gemini/gemini-2.5-flash", agentv1.PermissionLevel_PERMISSION_LEVEL_READ_WRITE, agentv1.AgentProfile_AGENT_PROFILE_GEMINI,
			[]string{"Permission level: read-write", "cannot run shell commands", "edit_file"}, []string{"with the shell when"}},
	}
	for _, tc := range tests {
		t.Run(tc.model+"/"+tc.level.String(), func(t *testing.T) {
			created, err := st.agent.CreateSession(t.Context(), &agentv1.CreateSessionRequest{
				Model: tc.model, Sandbox: &agentv1.CreateSessionRequest_SandboxId{SandboxId: sbID}, PermissionLevel: tc.level})
			if err != nil {
				t.Fatal(err)
			}
			snap, err := st.agent.GetSnapshot(t.Context(), &agentv1.GetSnapshotRequest{SessionId: created.GetSession().GetSessionId()})
			if err != nil {
				t.Fatal(err)
			}
			if p := snap.GetSnapshot().GetSession().GetRoute().GetProfile(); p != tc.profile {
				t.Errorf("route profile = %v, want %v", p, tc.profile)
			}
			sys := snap.GetSnapshot().GetSystemPrompt()
			for _, w := range tc.want {
				if !strings.Contains(sys, w) {
					t.Errorf("system prompt lacks %q:\n%s", w, sys)
				}
			}
			for _, w := range tc.notWant {
				if strings.Contains(sys, w) {
					t.Errorf("system prompt has %q:\n%s", w, sys)
				}
			}
		})
	}
}

// TestWebFetchPromptUsesSmallModel: web_fetch's prompt is answered by the
// provider's cheapest model, not the session's.
func TestWebFetchPromptUsesSmallModel(t *testing.T) {
	page := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		fmt.Fprint(w, "hi")
	}))
	t.Cleanup(page.Close)
	st := newStack(t, func(c *agent.Config) { c.WebFetchPrivateNetwork = true }) // the page is on 127.0.0.1
	_, sbID := st.workspace(t, nil)
	st.fake.Enqueue(
		fakeprovider.Turn{ToolCalls: []fakeprovider.ToolCall{{ID: "c1", Name: "web_fetch", Arguments: args(map[string]any{"url": page.URL, "prompt": "what does it say?"})}}},
		fakeprovider.Turn{Text: "the page says hi"}, // the summary
		fakeprovider.Turn{Text: "done"},
	)
	created, err := st.agent.CreateSession(t.Context(), &agentv1.CreateSessionRequest{
		Model: "anthropic/claude-opus-4.1", Sandbox: &agentv1.CreateSessionRequest_SandboxId{SandboxId: sbID},
		PermissionLevel: agentv1.PermissionLevel_PERMISSION_LEVEL_FULL})
	if err != nil {
		t.Fatal(err)
	}
	evs := st.prompt(t, created.GetSession().GetSessionId(), "fetch it")
	var out string
	for _, ev := range evs {
		if c := ev.GetToolCallCompleted(); c != nil {
			out = c.GetOutput()
		}
	}
	if !strings.Contains(out, "the page says hi") {
		t.Fatalf("web_fetch output %q, want the summary", out)
	}
	reqs := st.fake.Requests()
	if len(reqs) != 3 {
		t.Fatalf("%d provider requests, want 3 (turn, summary, turn)", len(reqs))
	}
	if body := string(reqs[1].Body); !strings.Contains(body, "claude-haiku-4-5") || strings.Contains(body, "claude-opus") {
		t.Errorf("the summary request went to %s, want the small model claude-haiku-4-5", body[:min(len(body), 200)])
	}
	if body := string(reqs[2].Body); !strings.Contains(body, "claude-opus") {
		t.Errorf("the session's next turn went to %s, want its own model", body[:min(len(body), 200)])
	}
}
