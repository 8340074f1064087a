package agent_test

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	agentv1 "github.com/fabro-sh/fabro-go/gen/fabro/agent/v1"
	"github.com/fabro-sh/fabro-go/platform/grpcerr"
	"github.com/fabro-sh/fabro-go/services/llmgateway/fakeprovider"
)

// TestCheckpointRewind: a turn that changes the workspace through each
// file-changing tool (edit_file, apply_patch, write_file, a shell rm)
// records a checkpoint through the real agent on the local driver; the
// diff shows the change; rewinding to turn 0 puts the files back and,
// with conversation, the history; a user's change since is refused
// without force, listing the file, and overwritten with it.
func TestCheckpointRewind(t *testing.T) {
	const patch = "*** Begin Patch\n*** Update File: hello.txt\n@@\n-hello world\n+hello fabro\n*** End Patch\n"
	tests := []struct {
		name, model string
		call        func(dir string) fakeprovider.ToolCall
		changed     string // the file the turn changes
		after       string // its content after the turn ("" gone)
	}{
		{"edit_file", "anthropic/claude-sonnet-4.5", func(dir string) fakeprovider.ToolCall {
			return fakeprovider.ToolCall{ID: "c1", Name: "edit_file", Arguments: args(map[string]any{"file_path": "hello.txt", "old_string": "world", "new_string": "fabro"})}
		}, "hello.txt", "hello fabro\n"},
		{"apply_patch", "openai/gpt-5", func(dir string) fakeprovider.ToolCall {
			return fakeprovider.ToolCall{ID: "c1", Name: "apply_patch", Arguments: args(map[string]any{"patch": patch})}
		}, "hello.txt", "hello fabro\n"},
		{"write_file", "anthropic/claude-sonnet-4.5", func(dir string) fakeprovider.ToolCall {
			return fakeprovider.ToolCall{ID: "c1", Name: "write_file", Arguments: args(map[string]any{"file_path": filepath.Join(dir, "hello.txt"), "content": "rewritten\n"})}
		}, "hello.txt", "rewritten\n"},
		{"shell rm", "anthropic/claude-sonnet-4.5", func(dir string) fakeprovider.ToolCall {
			return fakeprovider.ToolCall{ID: "c1", Name: "shell", Arguments: args(map[string]any{"command": "rm hello.txt"})}
		}, "hello.txt", ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			st := newStack(t)
			ctx := t.Context()
			dir, sbID := st.workspace(t, map[string]string{"hello.txt": "hello world\n", "keep.txt": "untouched\n"})
			created, err := st.agent.CreateSession(ctx, &agentv1.CreateSessionRequest{
				Model: tc.model, Sandbox: &agentv1.CreateSessionRequest_SandboxId{SandboxId: sbID},
				PermissionLevel: agentv1.PermissionLevel_PERMISSION_LEVEL_FULL,
			})
			if err != nil {
				t.Fatal(err)
			}
			id := created.GetSession().GetSessionId()
			st.fake.Enqueue(fakeprovider.Turn{ToolCalls: []fakeprovider.ToolCall{tc.call(dir)}}, fakeprovider.Turn{Text: "done"})
			evs := st.prompt(t, id, "change it")
			var created1 *agentv1.Checkpoint
			for _, ev := range evs {
				if c := ev.GetToolCallCompleted(); c != nil && c.GetIsError() {
					t.Fatalf("tool %s failed: %s", c.GetToolName(), c.GetOutput())
				}
				if c := ev.GetCheckpointCreated(); c != nil {
					created1 = c.GetCheckpoint()
				}
			}
			if created1 == nil || created1.GetTurn() != 1 || !slices.Contains(created1.GetFiles(), tc.changed) {
				t.Fatalf("checkpoint_created = %v, want turn 1 naming %s", created1, tc.changed)
			}
			if got := readOr(t, filepath.Join(dir, tc.changed)); got != tc.after {
				t.Fatalf("after the turn %s = %q, want %q", tc.changed, got, tc.after)
			}

			list, err := st.agent.ListCheckpoints(ctx, &agentv1.ListCheckpointsRequest{SessionId: id})
			if err != nil {
				t.Fatal(err)
			}
			var turns []int32
			for _, c := range list.GetCheckpoints() {
				turns = append(turns, c.GetTurn())
			}
			// Turn 2 only answered: it changed nothing and has none.
			if !slices.Equal(turns, []int32{0, 1}) {
				t.Fatalf("checkpoints of turns %v, want [0 1]", turns)
			}
			diff, err := st.agent.DiffCheckpoint(ctx, &agentv1.DiffCheckpointRequest{SessionId: id, Turn: proto.Int32(1)})
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(diff.GetDiff(), "-hello world") || !strings.Contains(diff.GetDiff(), "a/hello.txt") {
				t.Errorf("diff of turn 1:\n%s", diff.GetDiff())
			}

			// The user changes keep.txt, which the restore does not touch,
			// and the restore keeps it; a change to hello.txt is refused.
			if err := os.WriteFile(filepath.Join(dir, "keep.txt"), []byte("the user's\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dir, tc.changed), []byte("the user's too\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			_, err = st.agent.RestoreCheckpoint(ctx, &agentv1.RestoreCheckpointRequest{SessionId: id, Turn: 0, Conversation: true})
			if status.Code(err) != codes.FailedPrecondition || grpcerr.ReasonOf(err) != "CHECKPOINT_USER_CHANGES" || !strings.Contains(status.Convert(err).Message(), tc.changed) {
				t.Fatalf("restore over the user's change: %v, want FAILED_PRECONDITION naming %s", err, tc.changed)
			}
			if got := readOr(t, filepath.Join(dir, tc.changed)); got != "the user's too\n" {
				t.Fatalf("the refused restore changed %s: %q", tc.changed, got)
			}
			res, err := st.agent.RestoreCheckpoint(ctx, &agentv1.RestoreCheckpointRequest{SessionId: id, Turn: 0, Conversation: true, Force: true})
			if err != nil {
				t.Fatal(err)
			}
			if got := readOr(t, filepath.Join(dir, "hello.txt")); got != "hello world\n" {
				t.Errorf("after the rewind hello.txt = %q, want the original", got)
			}
			if got := readOr(t, filepath.Join(dir, "keep.txt")); got != "the user's\n" {
				t.Errorf("the rewind changed keep.txt, which no turn touched: %q", got)
			}
			if res.GetHistoryLength() != 0 {
				t.Errorf("history length after rewinding the conversation to turn 0 = %d, want 0", res.GetHistoryLength())
			}
			h, err := st.agent.GetHistory(ctx, &agentv1.GetHistoryRequest{SessionId: id})
			if err != nil {
				t.Fatal(err)
			}
			if len(h.GetMessages()) != 0 {
				t.Errorf("history after the rewind has %d messages, want 0", len(h.GetMessages()))
			}
			var restored *agentv1.CheckpointRestored
			for _, ev := range st.streamEvents(t, id, 1) {
				if r := ev.GetCheckpointRestored(); r != nil {
					restored = r
				}
			}
			if restored == nil || restored.GetTurn() != 0 || !restored.GetConversation() || !restored.GetForced() || !slices.Contains(restored.GetFiles(), "hello.txt") {
				t.Errorf("checkpoint_restored = %v", restored)
			}

			// The session goes on: the next turn that changes a file is
			// checkpointed under a new turn number.
			st.fake.Enqueue(fakeprovider.Turn{ToolCalls: []fakeprovider.ToolCall{{ID: "c2", Name: "shell", Arguments: args(map[string]any{"command": "echo new > new.txt"})}}}, fakeprovider.Turn{Text: "done"})
			st.prompt(t, id, "again")
			list, err = st.agent.ListCheckpoints(ctx, &agentv1.ListCheckpointsRequest{SessionId: id})
			if err != nil {
				t.Fatal(err)
			}
			if n := len(list.GetCheckpoints()); n != 3 || list.GetCheckpoints()[2].GetTurn() != 3 {
				t.Errorf("checkpoints after another prompt: %v, want turns 0, 1, 3", list.GetCheckpoints())
			}
		})
	}
}

// readOr is a file's content, "" when it does not exist.
func readOr(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if os.IsNotExist(err) {
		return ""
	}
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
