package agent_test

import (
	"fmt"
	"io"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	agentv1 "github.com/fabro-sh/fabro-go/gen/fabro/agent/v1"
	"github.com/fabro-sh/fabro-go/platform/auth"
	"github.com/fabro-sh/fabro-go/platform/testkit"
	"github.com/fabro-sh/fabro-go/services/agent"
	"github.com/fabro-sh/fabro-go/services/llmgateway/fakeprovider"
)

// TestPolicyGovernsDrivers: a prompt started by alice's unlimited token,
// driven on by her token limited to openai/* (a FollowUp, a Steer), takes
// no further anthropic turn: the turn that carries the limited token's
// text is governed by it, and refused. Before, the turns stayed under the
// starter's token, and the limited one drove the session's anthropic model.
func TestPolicyGovernsDrivers(t *testing.T) {
	for _, tc := range []struct {
		name  string
		drive func(t *testing.T, st *stack, token, id string) error
	}{
		{"follow-up", func(t *testing.T, st *stack, token, id string) error {
			_, err := st.agent.FollowUp(bearer(t.Context(), token), &agentv1.FollowUpRequest{SessionId: id, Text: "and more"})
			return err
		}},
		{"steer", func(t *testing.T, st *stack, token, id string) error {
			_, err := st.agent.Steer(bearer(t.Context(), token), &agentv1.SteerRequest{SessionId: id, Text: "and more"})
			return err
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := newStackAuth(t, auth.OpenStore(t.TempDir()+"/tokens.json"))
			limited, _, err := st.tokens.IssueWithPolicy("alice", auth.RoleUser, &auth.Policy{Models: []string{"openai/*"}})
			if err != nil {
				t.Fatal(err)
			}
			free, _, err := st.tokens.Issue("alice", auth.RoleUser)
			if err != nil {
				t.Fatal(err)
			}
			id, _ := st.createAs(t, free) // anthropic/claude-sonnet-4.5
			entered, release := make(chan struct{}), make(chan struct{})
			var calls atomic.Int32
			st.fake.Script(func(fakeprovider.Request) fakeprovider.Turn {
				if calls.Add(1) == 1 {
					close(entered)
					<-release
					// A tool call: the prompt takes another turn, which
					// carries steering as well as a follow-up.
					return fakeprovider.Turn{ToolCalls: []fakeprovider.ToolCall{{ID: "c1", Name: "read_file", Arguments: args(map[string]any{"file_path": "none.txt"})}}}
				}
				return fakeprovider.Turn{Text: "answer"}
			})
			started, err := st.agent.StartPrompt(bearer(t.Context(), free), &agentv1.StartPromptRequest{SessionId: id, Text: "go"})
			if err != nil {
				t.Fatal(err)
			}
			<-entered
			if err := tc.drive(t, st, limited, id); err != nil {
				t.Fatal(err)
			}
			close(release)
			stream, err := st.agent.StreamEvents(bearer(t.Context(), free), &agentv1.StreamEventsRequest{SessionId: id, PromptId: started.GetPromptId(), Follow: true, FromSequence: started.GetFromSequence()})
			if err != nil {
				t.Fatal(err)
			}
			var evs []*agentv1.AgentEvent
			for len(evs) == 0 || evs[len(evs)-1].GetPromptCompleted() == nil {
				resp, err := stream.Recv()
				if err != nil {
					t.Fatalf("events: %v", err)
				}
				evs = append(evs, resp.GetEvent())
			}
			if n := calls.Load(); n != 1 {
				t.Errorf("the model was called %d times, want 1 (the limited token's turn refused)", n)
			}
			if r := lastReport(t, evs); r.GetError() == nil || !strings.Contains(r.GetError().GetMessage(), "may not call model") {
				t.Errorf("report %v, want the limited token's model refused", r)
			}
		})
	}
}

// TestRestartKeepsGovernance: a session's record names the token that
// governs its running prompt, and a prompt continued after a restart whose
// token was revoked meanwhile ends FAILED, saying so, with no model call;
// before, it was continued under no token at all.
func TestRestartKeepsGovernance(t *testing.T) {
	// Its setup (a clean stop, then the mid-prompt record written back) is
	// now, rightly, a record that lags the log: the restart repairs it from
	// the stop's prompt_completed and runs nothing. It needs a kill -9 setup
	// (e2e/crash) to reach the revoked-token path again.
	t.Skip("setup invalidated by the lagging-record repair (restart.go repairFinished); to be rewritten as a kill -9 case")
	tokens := auth.OpenStore(t.TempDir() + "/tokens.json")
	st := newStackAuth(t, tokens, func(c *agent.Config) { c.Tokens = tokens })
	tok, entry, err := st.tokens.Issue("alice", auth.RoleUser)
	if err != nil {
		t.Fatal(err)
	}
	id, _ := st.createAs(t, tok)
	entered, release := make(chan struct{}), make(chan struct{})
	var calls atomic.Int32
	st.fake.Script(func(fakeprovider.Request) fakeprovider.Turn {
		if calls.Add(1) == 1 {
			close(entered)
			<-release
		}
		return fakeprovider.Turn{Text: "answer"}
	})
	started, err := st.agent.StartPrompt(bearer(t.Context(), tok), &agentv1.StartPromptRequest{SessionId: id, Text: "go"})
	if err != nil {
		t.Fatal(err)
	}
	<-entered
	rec := st.record(t, id)
	if rec.GetUnfinishedPromptTokenId() != entry.ID || rec.GetUnfinishedPromptTokenPrincipal() != "user:alice" {
		t.Fatalf("record names token %q of %q, want %q of user:alice", rec.GetUnfinishedPromptTokenId(), rec.GetUnfinishedPromptTokenPrincipal(), entry.ID)
	}
	// A crash: the record as it was mid-prompt survives the process.
	crashed, err := os.ReadFile(st.recordPath(id))
	if err != nil {
		t.Fatal(err)
	}
	st.stop()
	close(release)
	if err := os.WriteFile(st.recordPath(id), crashed, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := st.tokens.Revoke(entry.ID); err != nil {
		t.Fatal(err)
	}
	before := calls.Load()
	st.cfg.ResumeOnStart = true
	st.startAgent(t)
	admin, _, err := st.tokens.Issue("root", auth.RoleAdmin)
	if err != nil {
		t.Fatal(err)
	}
	// The continued prompt ends: the session's log has, after the
	// shutdown's end of the prompt, the restart's.
	var ended *agentv1.PromptReport
	testkit.Eventually(t, 30*time.Second, func() error {
		stream, err := st.agent.StreamEvents(bearer(t.Context(), admin), &agentv1.StreamEventsRequest{SessionId: id})
		if err != nil {
			return err
		}
		for ended = nil; ; {
			resp, err := stream.Recv()
			if err == io.EOF {
				break
			}
			if err != nil {
				return err
			}
			if r := resp.GetEvent().GetPromptCompleted().GetReport(); r != nil && resp.GetEvent().GetPromptId() == started.GetPromptId() {
				ended = r
			}
		}
		if !strings.Contains(ended.GetError().GetMessage(), "revoked") {
			return fmt.Errorf("the prompt's last end is %v", ended)
		}
		return nil
	})
	if ended.GetStatus() != agentv1.PromptStatus_PROMPT_STATUS_FAILED || !strings.Contains(ended.GetError().GetMessage(), "revoked") ||
		!strings.Contains(ended.GetError().GetMessage(), entry.ID) {
		t.Errorf("the continued prompt ended %v, want FAILED naming the revoked token", ended)
	}
	if n := calls.Load(); n != before {
		t.Errorf("the model was called %d more times after the restart, want none", n-before)
	}
}
