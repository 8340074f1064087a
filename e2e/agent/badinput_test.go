package agent_test

import (
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	agentv1 "github.com/fabro-sh/fabro-go/gen/fabro/agent/v1"
	sandboxv1 "github.com/fabro-sh/fabro-go/gen/fabro/sandbox/v1"
	"github.com/fabro-sh/fabro-go/services/llmgateway/fakeprovider"
)

// TestCreateSessionErrors covers the codes CreateSession documents.
func TestCreateSessionErrors(t *testing.T) {
	st := newStack(t)
	_, sbID := st.workspace(t, nil)
	sb := &agentv1.CreateSessionRequest_SandboxId{SandboxId: sbID}
	tests := []struct {
		name string
		req  *agentv1.CreateSessionRequest
		want codes.Code
	}{
		{"unknown model", &agentv1.CreateSessionRequest{Model: "nosuch/model-9", Sandbox: sb}, codes.NotFound},
		{"unknown sandbox", &agentv1.CreateSessionRequest{Model: "anthropic/claude-sonnet-4.5", Sandbox: &agentv1.CreateSessionRequest_SandboxId{SandboxId: "sb_nope"}}, codes.NotFound},
		{"no sandbox", &agentv1.CreateSessionRequest{Model: "anthropic/claude-sonnet-4.5"}, codes.InvalidArgument},
		{"threshold 0", &agentv1.CreateSessionRequest{Model: "anthropic/claude-sonnet-4.5", Sandbox: sb, Options: &agentv1.AgentOptions{CompactionThresholdPercent: proto.Int32(0)}}, codes.InvalidArgument},
		{"negative max turns", &agentv1.CreateSessionRequest{Model: "anthropic/claude-sonnet-4.5", Sandbox: sb, Options: &agentv1.AgentOptions{MaxTurns: proto.Int32(-1)}}, codes.InvalidArgument},
		{"limit for a tool not in the profile", &agentv1.CreateSessionRequest{Model: "anthropic/claude-sonnet-4.5", Sandbox: sb,
			Options: &agentv1.AgentOptions{ToolOutputLimits: map[string]*agentv1.ToolOutputLimit{"apply_patch": {MaxChars: proto.Int64(10)}}}}, codes.InvalidArgument},
		{"unknown parent", &agentv1.CreateSessionRequest{Model: "anthropic/claude-sonnet-4.5", Sandbox: sb, ParentSessionId: "s_nope"}, codes.NotFound},
		{"bad sandbox spec", &agentv1.CreateSessionRequest{Model: "anthropic/claude-sonnet-4.5", Sandbox: &agentv1.CreateSessionRequest_SandboxSpec{SandboxSpec: &sandboxv1.SandboxSpec{Driver: "nosuchdriver"}}}, codes.InvalidArgument},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := st.agent.CreateSession(t.Context(), tc.req)
			if got := status.Code(err); got != tc.want {
				t.Fatalf("code = %v (%v), want %v", got, err, tc.want)
			}
		})
	}
}

// TestBadInputDuringRuns covers the bad-input table for running
// sessions.
func TestBadInputDuringRuns(t *testing.T) {
	tests := []struct {
		name  string
		setup func(t *testing.T, st *stack, sbID string)
		check func(t *testing.T, st *stack, id string, evs []*agentv1.AgentEvent)
	}{{
		name: "malformed tool-call JSON is an error result the model sees",
		setup: func(t *testing.T, st *stack, _ string) {
			st.fake.Enqueue(
				fakeprovider.Turn{ToolCalls: []fakeprovider.ToolCall{{ID: "c1", Name: "read_file", Arguments: `{"file_path": "a.txt"`}}},
				fakeprovider.Turn{Text: "I will fix my arguments next time."},
			)
		},
		check: func(t *testing.T, st *stack, _ string, evs []*agentv1.AgentEvent) {
			var done *agentv1.ToolCallCompleted
			for _, ev := range evs {
				if c := ev.GetToolCallCompleted(); c != nil {
					done = c
				}
			}
			if done == nil || !done.GetIsError() || done.GetErrorKind() != agentv1.ToolErrorKind_TOOL_ERROR_KIND_INVALID_ARGUMENTS {
				t.Fatalf("tool_call_completed = %v, want an invalid-arguments error", done)
			}
			if rep := lastReport(t, evs); rep.GetStatus() != agentv1.PromptStatus_PROMPT_STATUS_COMPLETED {
				t.Errorf("status = %v (%v), want COMPLETED", rep.GetStatus(), rep.GetError())
			}
			reqs := st.fake.Requests()
			if len(reqs) != 2 || !strings.Contains(string(reqs[1].Body), "validation failed") {
				t.Errorf("the model did not see the error result: %d requests", len(reqs))
			}
		},
	}, {
		name: "a sandbox that disappears mid-run ends the session with an error",
		setup: func(t *testing.T, st *stack, sbID string) {
			st.fake.Script(func(fakeprovider.Request) fakeprovider.Turn {
				if _, err := st.sandbox.DeleteSandbox(t.Context(), &sandboxv1.DeleteSandboxRequest{SandboxId: sbID}); err != nil {
					t.Error(err)
				}
				return fakeprovider.Turn{ToolCalls: []fakeprovider.ToolCall{{ID: "c1", Name: "read_file", Arguments: args(map[string]any{"file_path": "a.txt"})}}}
			})
		},
		check: func(t *testing.T, st *stack, id string, evs []*agentv1.AgentEvent) {
			var done *agentv1.ToolCallCompleted
			for _, ev := range evs {
				if c := ev.GetToolCallCompleted(); c != nil {
					done = c
				}
			}
			if done.GetErrorKind() != agentv1.ToolErrorKind_TOOL_ERROR_KIND_SANDBOX_UNAVAILABLE || !strings.Contains(done.GetOutput(), "no longer exists") {
				t.Errorf("tool result = %v, want the sandbox gone", done)
			}
			rep := lastReport(t, evs)
			if rep.GetStatus() != agentv1.PromptStatus_PROMPT_STATUS_FAILED || rep.GetError().GetKind() != agentv1.AgentErrorKind_AGENT_ERROR_KIND_SANDBOX_UNAVAILABLE {
				t.Errorf("report = %v", rep)
			}
			if got := eventTypes(evs[len(evs)-2:]); got[0] != "error" {
				t.Errorf("the prompt ends with %v, want error then prompt_completed", got)
			}
			all := st.followEvents(t, id, 1)
			end := all[len(all)-1].GetSessionEnded()
			if end.GetReason() != agentv1.SessionEndReason_SESSION_END_REASON_ERROR {
				t.Errorf("last event = %v, want session_ended with ERROR", all[len(all)-1])
			}
			_, err := st.agent.Prompt(t.Context(), &agentv1.PromptRequest{SessionId: id, Text: "again"})
			if err == nil {
				stream, _ := st.agent.Prompt(t.Context(), &agentv1.PromptRequest{SessionId: id, Text: "again"})
				_, err = stream.Recv()
			}
			if status.Code(err) != codes.FailedPrecondition {
				t.Errorf("prompt after the session ended: %v, want FailedPrecondition", err)
			}
		},
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			st := newStack(t)
			_, sbID := st.workspace(t, map[string]string{"a.txt": "alpha\n"})
			created, err := st.agent.CreateSession(t.Context(), &agentv1.CreateSessionRequest{
				Model: "anthropic/claude-sonnet-4.5", Sandbox: &agentv1.CreateSessionRequest_SandboxId{SandboxId: sbID}})
			if err != nil {
				t.Fatal(err)
			}
			tc.setup(t, st, sbID)
			id := created.GetSession().GetSessionId()
			tc.check(t, st, id, st.prompt(t, id, "Read a.txt."))
		})
	}
}

// TestPromptToClosedSession checks FAILED_PRECONDITION after CloseSession,
// and that closing twice succeeds.
func TestPromptToClosedSession(t *testing.T) {
	st := newStack(t)
	_, sbID := st.workspace(t, nil)
	created, err := st.agent.CreateSession(t.Context(), &agentv1.CreateSessionRequest{
		Model: "gemini/gemini-2.5-flash", Sandbox: &agentv1.CreateSessionRequest_SandboxId{SandboxId: sbID}})
	if err != nil {
		t.Fatal(err)
	}
	id := created.GetSession().GetSessionId()
	for range 2 {
		resp, err := st.agent.CloseSession(t.Context(), &agentv1.CloseSessionRequest{SessionId: id})
		if err != nil || resp.GetSession().GetState() != agentv1.SessionState_SESSION_STATE_CLOSED {
			t.Fatalf("close: %v %v", resp, err)
		}
	}
	stream, err := st.agent.Prompt(t.Context(), &agentv1.PromptRequest{SessionId: id, Text: "hello"})
	if err == nil {
		_, err = stream.Recv()
	}
	if status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("prompt to a closed session: %v, want FailedPrecondition", err)
	}
	for _, tc := range []struct {
		id   string
		want codes.Code
	}{{"", codes.InvalidArgument}, {"s_unknown", codes.NotFound}} {
		_, err := st.agent.GetHistory(t.Context(), &agentv1.GetHistoryRequest{SessionId: tc.id})
		if status.Code(err) != tc.want {
			t.Errorf("GetHistory(%q) = %v, want %v", tc.id, err, tc.want)
		}
	}
}
