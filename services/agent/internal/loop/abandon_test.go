package loop

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	agentv1 "github.com/fabro-sh/fabro-go/gen/fabro/agent/v1"
	llmv1 "github.com/fabro-sh/fabro-go/gen/fabro/llm/v1"
)

// TestAbandon: an abandoned prompt completes every call it left running
// as INTERRUPTED and ends CANCELLED with the reason given, calling no
// model; a prompt that runs meanwhile keeps it from starting (ErrBusy).
func TestAbandon(t *testing.T) {
	m := &scripted{turn: func(int, *llmv1.Request) *llmv1.Response {
		t.Error("an abandoned prompt called the model")
		return text("no")
	}}
	rec := &recorder{}
	a := New(m, noop{}, rec, Options{}, nil)
	left := []*agentv1.ToolCallStarted{{ToolCallId: "c1", ToolName: "shell"}, {ToolCallId: "c2", ToolName: "read_file"}}
	rep, err := a.Abandon(t.Context(), "p1", Resumption{Turn: 3, Interrupted: left}, "the process restarted")
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"tool_call_completed", "tool_call_completed", "prompt_completed"}, rec.types()); diff != "" {
		t.Errorf("events (-want +got):\n%s", diff)
	}
	for i, ev := range rec.evs[:2] {
		c := ev.GetToolCallCompleted()
		if c.GetToolCallId() != left[i].GetToolCallId() || c.GetErrorKind() != agentv1.ToolErrorKind_TOOL_ERROR_KIND_INTERRUPTED || !c.GetIsError() {
			t.Errorf("completion %d: %v; want %s INTERRUPTED", i, c, left[i].GetToolCallId())
		}
		if ev.GetPromptId() != "p1" {
			t.Errorf("completion %d under prompt %q", i, ev.GetPromptId())
		}
	}
	if rep.GetStatus() != agentv1.PromptStatus_PROMPT_STATUS_CANCELLED || rep.GetError().GetKind() != agentv1.AgentErrorKind_AGENT_ERROR_KIND_INTERRUPTED ||
		rep.GetError().GetMessage() != "the process restarted" || rep.GetPromptId() != "p1" || rep.GetTurns() != 2 {
		t.Errorf("report: %v", rep)
	}
	if got := rec.evs[2].GetPromptCompleted().GetReport(); got != rep {
		t.Errorf("prompt_completed carries %v, Abandon returned %v", got, rep)
	}

	// A running prompt holds the agent.
	block := make(chan struct{})
	m2 := &scripted{block: block, turn: func(int, *llmv1.Request) *llmv1.Response { return text("done") }}
	started := make(chan struct{})
	rec2 := &recorder{on: func(ev *agentv1.AgentEvent) {
		if ev.GetTurnStarted() != nil {
			close(started)
		}
	}}
	b := New(m2, noop{}, rec2, Options{}, nil)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _ = b.Prompt(t.Context(), "p2", "hi", false)
	}()
	<-started
	if _, err := b.Abandon(t.Context(), "p3", Resumption{}, "x"); err != ErrBusy {
		t.Errorf("Abandon while a prompt runs: %v, want ErrBusy", err)
	}
	close(block)
	<-done
}
