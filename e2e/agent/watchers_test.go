package agent_test

import (
	"context"
	"testing"
	"time"

	agentv1 "github.com/fabro-sh/fabro-go/gen/fabro/agent/v1"
)

// watchWithin runs a StreamEvents call that must end by itself within d
// (a watcher that hangs fails the test instead of the suite).
func (st *stack) watchWithin(t *testing.T, d time.Duration, req *agentv1.StreamEventsRequest) []*agentv1.AgentEvent {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), d)
	defer cancel()
	stream, err := st.agent.StreamEvents(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	var evs []*agentv1.AgentEvent
	for {
		resp, err := stream.Recv()
		if err != nil {
			if ctx.Err() != nil {
				t.Fatalf("StreamEvents(%v) did not end within %s (it had sent %d events)", req, d, len(evs))
			}
			return evs
		}
		evs = append(evs, resp.GetEvent())
	}
}

// TestWatchersEndRight: StreamEvents with a prompt id from any sequence
// after that prompt ended returns at once with what it has (possibly
// nothing), with and without follow and include_subagents; from before its
// end it ends with its prompt_completed. Without a prompt id, follow goes
// on live, past a session_ended of an earlier close the session was
// resumed from.
func TestWatchersEndRight(t *testing.T) {
	st := newStack(t)
	_, sbID := st.workspace(t, nil)
	id := st.create(t, sbID, nil)
	first := st.promptText(t, id, "first")
	p1, end1 := first[0].GetPromptId(), first[len(first)-1].GetSequence()
	second := st.promptText(t, id, "second")
	end2 := second[len(second)-1].GetSequence()

	for _, c := range []struct {
		name string
		from uint64
		tree bool
		want int // events of p1 sent
	}{
		{"just past its end", end1 + 1, false, 0},
		{"past its end and another prompt's", end2 + 1, false, 0},
		{"past its end, with subagents", end1 + 1, true, 0},
		{"at its end", end1, false, 1},
		{"from the start", 1, false, len(first)},
		{"from the start, with subagents", 1, true, len(first)},
	} {
		t.Run(c.name, func(t *testing.T) {
			evs := st.watchWithin(t, 10*time.Second, &agentv1.StreamEventsRequest{SessionId: id, PromptId: p1, FromSequence: c.from,
				Follow: true, IncludeSubagents: c.tree})
			if len(evs) != c.want {
				t.Fatalf("%d events, want %d: %v", len(evs), c.want, eventTypes(evs))
			}
			if c.want > 0 && evs[len(evs)-1].GetPromptCompleted() == nil {
				t.Errorf("the watch ends with %v, not the prompt's prompt_completed", evs[len(evs)-1])
			}
		})
	}

	// Close and resume: the log now holds a session_ended, which a live
	// follower without a prompt id replays and goes past.
	if _, err := st.agent.CloseSession(t.Context(), &agentv1.CloseSessionRequest{SessionId: id}); err != nil {
		t.Fatal(err)
	}
	if _, err := st.agent.ResumeSession(t.Context(), &agentv1.ResumeSessionRequest{SessionId: id}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	stream, err := st.agent.StreamEvents(ctx, &agentv1.StreamEventsRequest{SessionId: id, FromSequence: 1, Follow: true})
	if err != nil {
		t.Fatal(err)
	}
	live := make(chan string, 1)
	go func() {
		defer close(live)
		for {
			resp, err := stream.Recv()
			if err != nil {
				return
			}
			if ps := resp.GetEvent().GetPromptStarted(); ps != nil && ps.GetText() == "third" {
				live <- resp.GetEvent().GetPromptId()
				return
			}
		}
	}()
	third := st.promptText(t, id, "third")
	if got, ok := <-live; !ok || got != third[0].GetPromptId() {
		t.Errorf("the follower without a prompt id stopped before the resumed session's next prompt (got %q, ok %v)", got, ok)
	}
}
