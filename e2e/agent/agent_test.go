package agent_test

import (
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/testing/protocmp"

	agentv1 "github.com/fabro-sh/fabro-go/gen/fabro/agent/v1"
	"github.com/fabro-sh/fabro-go/services/llmgateway/fakeprovider"
)

// TestTrajectory runs a scripted read, edit, shell, answer trajectory in
// each wire codec through the real gateway and sandbox, and checks the
// files on disk, the event sequence and the report.
func TestTrajectory(t *testing.T) {
	const patch = "*** Begin Patch\n*** Update File: hello.txt\n@@\n-hello world\n+hello fabro\n*** End Patch\n"
	tests := []struct {
		codec, model string
		edit         fakeprovider.ToolCall
	}{
		{"anthropic-messages", "anthropic/claude-sonnet-4.5", fakeprovider.ToolCall{ID: "call_2", Name: "edit_file",
			Arguments: args(map[string]any{"file_path": "hello.txt", "old_string": "world", "new_string": "fabro"})}},
		{"openai-responses", "openai/gpt-5", fakeprovider.ToolCall{ID: "call_2", Name: "apply_patch", Arguments: args(map[string]any{"patch": patch})}},
		{"openai-chat", "openrouter/openrouter-gpt-5", fakeprovider.ToolCall{ID: "call_2", Name: "apply_patch", Arguments: args(map[string]any{"patch": patch})}},
		{"gemini-generate", "gemini/gemini-2.5-flash", fakeprovider.ToolCall{ID: "call_2", Name: "edit_file",
			Arguments: args(map[string]any{"file_path": "hello.txt", "old_string": "world", "new_string": "fabro"})}},
		{"bedrock-converse", "bedrock/bedrock-claude-sonnet-4.5", fakeprovider.ToolCall{ID: "call_2", Name: "edit_file",
			Arguments: args(map[string]any{"file_path": "hello.txt", "old_string": "world", "new_string": "fabro"})}},
	}
	for _, tc := range tests {
		t.Run(tc.codec, func(t *testing.T) {
			st := newStack(t)
			dir, sbID := st.workspace(t, map[string]string{"hello.txt": "hello world\n", "AGENTS.md": "Always be brief.\n"})
			st.fake.Enqueue(
				fakeprovider.Turn{ToolCalls: []fakeprovider.ToolCall{{ID: "call_1", Name: "read_file", Arguments: args(map[string]any{"file_path": "hello.txt"})}}, Usage: fakeprovider.Usage{Input: 100, Output: 10}},
				fakeprovider.Turn{ToolCalls: []fakeprovider.ToolCall{tc.edit}, Usage: fakeprovider.Usage{Input: 120, Output: 20}},
				fakeprovider.Turn{ToolCalls: []fakeprovider.ToolCall{{ID: "call_3", Name: "shell", Arguments: args(map[string]any{"command": `echo "$(cat hello.txt)!" > shout.txt`})}}, Usage: fakeprovider.Usage{Input: 140, Output: 10}},
				fakeprovider.Turn{Text: "Done: the greeting now says hello fabro.", Usage: fakeprovider.Usage{Input: 160, Output: 12}},
			)
			created, err := st.agent.CreateSession(t.Context(), &agentv1.CreateSessionRequest{
				Model: tc.model, Sandbox: &agentv1.CreateSessionRequest_SandboxId{SandboxId: sbID},
				PermissionLevel: agentv1.PermissionLevel_PERMISSION_LEVEL_FULL,
			})
			if err != nil {
				t.Fatal(err)
			}
			id := created.GetSession().GetSessionId()
			evs := st.prompt(t, id, "Change the greeting to fabro and shout it into shout.txt.")

			want := []string{"prompt_started", "user_input",
				"turn_started", "assistant_message", "tool_call_started", "tool_call_completed",
				"turn_started", "assistant_message", "tool_call_started", "tool_call_completed",
				"turn_started", "assistant_message", "tool_call_started", "tool_call_completed",
				"turn_started", "text_delta*", "assistant_message", "prompt_completed"}
			if diff := cmp.Diff(want, eventTypes(evs)); diff != "" {
				t.Errorf("event types (-want +got):\n%s", diff)
			}
			checkGapless(t, evs, 4) // memory_loaded, skills_discovered, session_started came first
			for _, ev := range evs {
				if c := ev.GetToolCallCompleted(); c != nil && c.GetIsError() {
					t.Errorf("tool %s failed: %s", c.GetToolName(), c.GetOutput())
				}
				if ev.GetSessionId() != id || ev.GetRootSessionId() != id || ev.GetPromptId() == "" {
					t.Errorf("bad envelope: %v", ev)
				}
			}
			rep := lastReport(t, evs)
			wantRep := &agentv1.PromptReport{
				Status: agentv1.PromptStatus_PROMPT_STATUS_COMPLETED, Output: "Done: the greeting now says hello fabro.",
				Turns: 4, ToolCalls: 3, FilesTouched: []string{"hello.txt"},
			}
			if diff := cmp.Diff(wantRep, rep, protocmp.Transform(), protocmp.IgnoreFields(&agentv1.PromptReport{}, "prompt_id", "usage", "cost", "timing", "route")); diff != "" {
				t.Errorf("report (-want +got):\n%s", diff)
			}
			if got := rep.GetUsage().GetInputTokens() + rep.GetUsage().GetCacheReadTokens(); got != 520 {
				t.Errorf("input tokens = %d, want 520", got)
			}
			for name, want := range map[string]string{"hello.txt": "hello fabro\n", "shout.txt": "hello fabro!\n"} {
				b, err := os.ReadFile(filepath.Join(dir, name))
				if err != nil || string(b) != want {
					t.Errorf("%s = %q, %v; want %q", name, b, err, want)
				}
			}
			if n := len(st.fake.Requests()); n != 4 {
				t.Errorf("the model got %d requests, want 4", n)
			}

			// The whole log replays from JetStream, gap-free, memory first.
			replay := st.streamEvents(t, id, 1)
			checkGapless(t, replay, 1)
			if got := eventTypes(replay[:3]); !cmp.Equal(got, []string{"memory_loaded", "skills_discovered", "session_started"}) {
				t.Errorf("session opens with %v", got)
			}
			if mem := replay[0].GetMemoryLoaded().GetMemory(); len(mem.GetFiles()) != 1 || mem.GetFiles()[0].GetPath() != "AGENTS.md" {
				t.Errorf("memory = %v, want AGENTS.md", mem)
			}
		})
	}
}

// streamEvents replays a session's events without following.
func (st *stack) streamEvents(t testing.TB, id string, from uint64) []*agentv1.AgentEvent {
	return st.events(t, &agentv1.StreamEventsRequest{SessionId: id, FromSequence: from})
}

// followEvents replays and follows a session's events until session_ended.
func (st *stack) followEvents(t testing.TB, id string, from uint64) []*agentv1.AgentEvent {
	return st.events(t, &agentv1.StreamEventsRequest{SessionId: id, FromSequence: from, Follow: true})
}

func (st *stack) events(t testing.TB, req *agentv1.StreamEventsRequest) []*agentv1.AgentEvent {
	t.Helper()
	stream, err := st.agent.StreamEvents(t.Context(), req)
	if err != nil {
		t.Fatal(err)
	}
	var evs []*agentv1.AgentEvent
	for {
		resp, err := stream.Recv()
		if err == io.EOF {
			return evs
		}
		if err != nil {
			t.Fatal(err)
		}
		evs = append(evs, resp.GetEvent())
	}
}
