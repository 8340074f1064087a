package agent

import (
	"errors"
	"testing"

	agentv1 "github.com/fabro-sh/fabro-go/gen/fabro/agent/v1"
	"github.com/fabro-sh/fabro-go/services/agent/internal/records"
)

// A record that lags the log (the process died after the prompt's
// prompt_completed was stored, before the record saying so was written)
// is repaired from the log at a restart, and its prompt is not run again.
// The service here has no gateway or sandbox: a prompt run again would
// fail loading the session, and leave the record naming it.
func TestContinueUnfinishedRepairsALaggingRecord(t *testing.T) {
	s := eventsServiceWith(t, Config{})
	ctx := t.Context()
	publish := func(ev *agentv1.AgentEvent) {
		t.Helper()
		f, err := s.bus.Publish(ctx, ev, "test")
		if err != nil {
			t.Fatal(err)
		}
		select {
		case <-f.Ok():
		case err := <-f.Err():
			t.Fatal(err)
		}
	}
	tests := []struct {
		name   string
		events []*agentv1.AgentEvent
		want   error // continueUnfinished's, errNoUnfinished or not
		repair bool
	}{
		{"ended in the log", []*agentv1.AgentEvent{
			{PromptId: "p_1", Event: &agentv1.AgentEvent_PromptStarted{PromptStarted: &agentv1.PromptStarted{Text: "hi"}}},
			{PromptId: "p_1", Event: &agentv1.AgentEvent_PromptCompleted{PromptCompleted: &agentv1.PromptCompleted{}}},
		}, errNoUnfinished, true},
		{"another prompt ended", []*agentv1.AgentEvent{
			{PromptId: "p_0", Event: &agentv1.AgentEvent_PromptCompleted{PromptCompleted: &agentv1.PromptCompleted{}}},
			{PromptId: "p_1", Event: &agentv1.AgentEvent_PromptStarted{PromptStarted: &agentv1.PromptStarted{Text: "hi"}}},
		}, nil, false},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			id := []string{"s_lag_a", "s_lag_b"}[i]
			rec := &agentv1.SessionRecord{FormatVersion: records.FormatVersion, UnfinishedPromptId: "p_1", UnfinishedPromptTurn: 1,
				Session: &agentv1.Session{SessionId: id, Principal: "user:alice", State: agentv1.SessionState_SESSION_STATE_SUSPENDED, PromptCount: 1}}
			if _, err := s.records.Put(ctx, rec, records.Any); err != nil {
				t.Fatal(err)
			}
			for seq, ev := range tt.events {
				ev.SessionId, ev.Sequence = id, uint64(seq+1)
				publish(ev)
			}
			err := s.continueUnfinished(ctx, id)
			if ok := errors.Is(err, errNoUnfinished); ok != (tt.want != nil) {
				t.Fatalf("continueUnfinished: %v, want errNoUnfinished %v", err, tt.want != nil)
			}
			got, _, err := s.records.Get(ctx, id)
			if err != nil {
				t.Fatal(err)
			}
			repaired := got.GetUnfinishedPromptId() == "" && got.GetSession().GetLastSequence() == uint64(len(tt.events))
			if repaired != tt.repair {
				t.Errorf("record repaired %v, want %v: unfinished %q, last sequence %d", repaired, tt.repair,
					got.GetUnfinishedPromptId(), got.GetSession().GetLastSequence())
			}
			if got.GetSession().GetPromptCount() != 1 {
				t.Errorf("prompt_count %d, want 1", got.GetSession().GetPromptCount())
			}
		})
	}
}
