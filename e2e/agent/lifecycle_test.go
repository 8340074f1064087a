package agent_test

import (
	"io"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	agentv1 "github.com/fabro-sh/fabro-go/gen/fabro/agent/v1"
	llmv1 "github.com/fabro-sh/fabro-go/gen/fabro/llm/v1"
	"github.com/fabro-sh/fabro-go/services/llmgateway/fakeprovider"
)

func (st *stack) create(t *testing.T, sbID string, opts *agentv1.AgentOptions) string {
	t.Helper()
	created, err := st.agent.CreateSession(t.Context(), &agentv1.CreateSessionRequest{
		Model: "anthropic/claude-sonnet-4.5", Sandbox: &agentv1.CreateSessionRequest_SandboxId{SandboxId: sbID}, Options: opts})
	if err != nil {
		t.Fatal(err)
	}
	return created.GetSession().GetSessionId()
}

// TestResumeSession closes a session, resumes it, and checks that the
// sequence continues, session_started says resumed, and the next prompt
// goes to the model with the earlier conversation.
func TestResumeSession(t *testing.T) {
	st := newStack(t)
	_, sbID := st.workspace(t, nil)
	id := st.create(t, sbID, nil)
	st.fake.Enqueue(fakeprovider.Turn{Text: "FIRST-ANSWER"})
	st.prompt(t, id, "FIRST-PROMPT")
	closed, err := st.agent.CloseSession(t.Context(), &agentv1.CloseSessionRequest{SessionId: id})
	if err != nil {
		t.Fatal(err)
	}
	last := closed.GetSession().GetLastSequence()

	if _, err := st.agent.ResumeSession(t.Context(), &agentv1.ResumeSessionRequest{SessionId: "s_none"}); status.Code(err) != codes.NotFound {
		t.Errorf("resume unknown: %v, want NotFound", err)
	}
	resumed, err := st.agent.ResumeSession(t.Context(), &agentv1.ResumeSessionRequest{SessionId: id})
	if err != nil {
		t.Fatal(err)
	}
	if resumed.GetSession().GetState() != agentv1.SessionState_SESSION_STATE_IDLE {
		t.Errorf("resumed state %v", resumed.GetSession().GetState())
	}
	if _, err := st.agent.ResumeSession(t.Context(), &agentv1.ResumeSessionRequest{SessionId: id}); status.Code(err) != codes.FailedPrecondition {
		t.Errorf("resume a loaded session: %v, want FailedPrecondition", err)
	}
	st.fake.Enqueue(fakeprovider.Turn{Text: "SECOND-ANSWER"})
	evs := st.prompt(t, id, "SECOND-PROMPT")
	if rep := lastReport(t, evs); rep.GetOutput() != "SECOND-ANSWER" {
		t.Fatalf("report %v", rep)
	}
	reqs := st.fake.Requests()
	body := string(reqs[len(reqs)-1].Body)
	for _, want := range []string{"FIRST-PROMPT", "FIRST-ANSWER", "SECOND-PROMPT"} {
		if !strings.Contains(body, want) {
			t.Errorf("the resumed prompt's request lacks %s", want)
		}
	}
	all := st.streamEvents(t, id, 1)
	checkGapless(t, all, 1)
	restart := all[last+2] // memory_loaded, skills_discovered, then session_started
	if s := restart.GetSessionStarted(); s == nil || !s.GetResumed() || restart.GetSequence() != last+3 {
		t.Errorf("event after the close = %v, want session_started resumed at %d", restart, last+3)
	}
	h, err := st.agent.GetHistory(t.Context(), &agentv1.GetHistoryRequest{SessionId: id})
	if err != nil || len(h.GetMessages()) != 4 {
		t.Errorf("history %d messages (%v), want 4", len(h.GetMessages()), err)
	}
}

// TestWallClockTimeout checks that a prompt past its wall-clock timeout
// ends with WALL_CLOCK_TIMEOUT, promptly, and the session stays usable.
func TestWallClockTimeout(t *testing.T) {
	st := newStack(t)
	_, sbID := st.workspace(t, nil)
	id := st.create(t, sbID, &agentv1.AgentOptions{WallClockTimeout: durationpb.New(300 * time.Millisecond)})
	st.fake.Enqueue(fakeprovider.Turn{Text: strings.Repeat("slow ", 100), ChunkRunes: 5, ChunkDelay: 50 * time.Millisecond})
	start := time.Now()
	rep := lastReport(t, st.prompt(t, id, "take your time"))
	if rep.GetStatus() != agentv1.PromptStatus_PROMPT_STATUS_WALL_CLOCK_TIMEOUT {
		t.Fatalf("status %v (%v), want WALL_CLOCK_TIMEOUT", rep.GetStatus(), rep.GetError())
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("the prompt took %v to time out", d)
	}
	if rep := lastReport(t, st.promptText(t, id, "again")); rep.GetStatus() != agentv1.PromptStatus_PROMPT_STATUS_COMPLETED {
		t.Errorf("next prompt %v", rep)
	}
}

// TestTurnReplay checks that a stream failing after visible output is
// replayed: llm_retry, assistant_output_replace, then the whole answer.
func TestTurnReplay(t *testing.T) {
	for _, kind := range []fakeprovider.FaultKind{fakeprovider.FaultMidStreamError, fakeprovider.FaultConnectionReset} {
		t.Run(map[fakeprovider.FaultKind]string{fakeprovider.FaultMidStreamError: "mid-stream error", fakeprovider.FaultConnectionReset: "connection reset"}[kind], func(t *testing.T) {
			st := newStack(t)
			_, sbID := st.workspace(t, nil)
			id := st.create(t, sbID, nil)
			st.fake.Enqueue(
				fakeprovider.Turn{Text: "partial partial partial", ChunkRunes: 4, Fault: &fakeprovider.Fault{Kind: kind, AfterChunks: 6}},
				fakeprovider.Turn{Text: "the whole answer"},
			)
			evs := st.prompt(t, id, "answer")
			rep := lastReport(t, evs)
			if rep.GetStatus() != agentv1.PromptStatus_PROMPT_STATUS_COMPLETED || rep.GetOutput() != "the whole answer" || rep.GetTurns() != 1 {
				t.Fatalf("report %v", rep)
			}
			var partial strings.Builder
			for _, ev := range evs {
				if ev.GetAssistantOutputReplace() != nil {
					break
				}
				partial.WriteString(ev.GetTextDelta().GetDelta())
			}
			if !strings.HasPrefix(partial.String(), "part") {
				t.Errorf("no partial output before the failure: %q", partial.String())
			}
			types := eventTypes(evs)
			want := []string{"prompt_started", "user_input", "turn_started", "text_delta*", "llm_retry", "assistant_output_replace", "text_delta*", "assistant_message", "prompt_completed"}
			if strings.Join(types, " ") != strings.Join(want, " ") {
				t.Errorf("events %v, want %v", types, want)
			}
			for _, ev := range evs {
				if r := ev.GetLlmRetry(); r != nil && (r.GetPhase() != agentv1.LlmRetryPhase_LLM_RETRY_PHASE_CONSUME || r.GetAttempt() != 2) {
					t.Errorf("llm_retry %v", r)
				}
			}
			h, _ := st.agent.GetHistory(t.Context(), &agentv1.GetHistoryRequest{SessionId: id})
			if msgs := h.GetMessages(); len(msgs) != 2 || msgs[1].GetRole() != llmv1.Role_ROLE_ASSISTANT || strings.Contains(msgs[1].String(), "partial") {
				t.Errorf("history keeps the failed attempt: %v", msgs)
			}
		})
	}
}

// TestStreamEventsLateJoiner replays from a sequence number, refuses one
// past the next, and follows a running session to its end.
func TestStreamEventsLateJoiner(t *testing.T) {
	st := newStack(t)
	_, sbID := st.workspace(t, nil)
	id := st.create(t, sbID, nil)
	evs := st.promptText(t, id, "first")
	committed := evs[len(evs)-1].GetSequence()

	from5 := st.streamEvents(t, id, 5)
	checkGapless(t, from5, 5)
	if got := from5[len(from5)-1].GetSequence(); got != committed {
		t.Errorf("replay from 5 ends at %d, want %d", got, committed)
	}
	stream, err := st.agent.StreamEvents(t.Context(), &agentv1.StreamEventsRequest{SessionId: id, FromSequence: committed + 2})
	if err == nil {
		_, err = stream.Recv()
	}
	if status.Code(err) != codes.OutOfRange {
		t.Errorf("from past the next sequence: %v, want OutOfRange", err)
	}

	// A follower joining mid-session sees the rest, then session_ended.
	// The second prompt starts only once the follower has had every
	// committed event, so what it gets next can only come live.
	follower, err := st.agent.StreamEvents(t.Context(), &agentv1.StreamEventsRequest{SessionId: id, FromSequence: committed - 1, Follow: true})
	if err != nil {
		t.Fatal(err)
	}
	var caughtUp []*agentv1.AgentEvent
	for len(caughtUp) == 0 || caughtUp[len(caughtUp)-1].GetSequence() < committed {
		resp, err := follower.Recv()
		if err != nil {
			t.Fatalf("the follower's replay up to %d: %v", committed, err)
		}
		caughtUp = append(caughtUp, resp.GetEvent())
	}
	got := make(chan []*agentv1.AgentEvent, 1)
	go func() {
		evs := caughtUp
		for {
			resp, err := follower.Recv()
			if err != nil {
				if err != io.EOF {
					t.Errorf("the follower: %v", err)
				}
				got <- evs
				return
			}
			evs = append(evs, resp.GetEvent())
		}
	}()
	st.promptText(t, id, "second")
	if _, err := st.agent.CloseSession(t.Context(), &agentv1.CloseSessionRequest{SessionId: id}); err != nil {
		t.Fatal(err)
	}
	select {
	case follow := <-got:
		checkGapless(t, follow, committed-1)
		if follow[len(follow)-1].GetSessionEnded() == nil {
			t.Errorf("follow ends with %v", follow[len(follow)-1])
		}
		n := 0
		for _, ev := range follow {
			if ev.GetPromptStarted() != nil {
				n++
			}
		}
		if n != 1 {
			t.Errorf("the follower saw %d prompt_started, want the second prompt's only", n)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the follower did not end after session_ended")
	}
}

// TestListSessions checks ListSessions: newest first, pages, the state
// filter, and bad page arguments.
func TestListSessions(t *testing.T) {
	st := newStack(t)
	_, sbID := st.workspace(t, nil)
	var ids []string
	for range 3 {
		created, err := st.agent.CreateSession(t.Context(), &agentv1.CreateSessionRequest{
			Model: "gemini/gemini-2.5-flash", Sandbox: &agentv1.CreateSessionRequest_SandboxId{SandboxId: sbID}})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, created.GetSession().GetSessionId())
	}
	list := func(req *agentv1.ListSessionsRequest) ([]string, string) {
		t.Helper()
		resp, err := st.agent.ListSessions(t.Context(), req)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, s := range resp.GetSessions() {
			got = append(got, s.GetSessionId())
		}
		return got, resp.GetNextPageToken()
	}
	page1, next := list(&agentv1.ListSessionsRequest{PageSize: 2})
	if diff := cmp.Diff([]string{ids[2], ids[1]}, page1); diff != "" || next == "" {
		t.Errorf("page 1 (-want +got), next %q:\n%s", next, diff)
	}
	page2, next := list(&agentv1.ListSessionsRequest{PageSize: 2, PageToken: next})
	if diff := cmp.Diff([]string{ids[0]}, page2); diff != "" || next != "" {
		t.Errorf("page 2 (-want +got), next %q:\n%s", next, diff)
	}
	if _, err := st.agent.CloseSession(t.Context(), &agentv1.CloseSessionRequest{SessionId: ids[1]}); err != nil {
		t.Fatal(err)
	}
	closed, _ := list(&agentv1.ListSessionsRequest{States: []agentv1.SessionState{agentv1.SessionState_SESSION_STATE_CLOSED}})
	if diff := cmp.Diff([]string{ids[1]}, closed); diff != "" {
		t.Errorf("closed sessions (-want +got):\n%s", diff)
	}
	for _, req := range []*agentv1.ListSessionsRequest{{PageSize: -1}, {PageToken: "not-a-token"}} {
		if _, err := st.agent.ListSessions(t.Context(), req); status.Code(err) != codes.InvalidArgument {
			t.Errorf("ListSessions(%v) = %v, want InvalidArgument", req, err)
		}
	}
}
