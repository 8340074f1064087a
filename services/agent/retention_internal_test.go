package agent

import (
	"slices"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	agentv1 "github.com/fabro-sh/fabro-go/gen/fabro/agent/v1"
	"github.com/fabro-sh/fabro-go/services/agent/internal/records"
)

// TestExpireClosed: a closed tree past the retention loses its events and
// records; a recent one, a suspended one, and a closed root whose
// subagent is suspended keep theirs. Time is passed in, so the retention
// is an hour and nothing waits.
func TestExpireClosed(t *testing.T) {
	s := eventsServiceWith(t, Config{})
	ctx := t.Context()
	now := time.Now()
	old, recent := now.Add(-2*time.Hour), now.Add(-time.Minute)
	closed, suspended := agentv1.SessionState_SESSION_STATE_CLOSED, agentv1.SessionState_SESSION_STATE_SUSPENDED
	sessions := []struct {
		id, parent string
		state      agentv1.SessionState
		updated    time.Time
		kept       bool
	}{
		{"s_old", "", closed, old, false},
		{"s_old_child", "s_old", closed, recent, false}, // goes with its root
		{"s_recent", "", closed, recent, true},
		{"s_suspended", "", suspended, old, true},
		{"s_mixed", "", closed, old, true},
		{"s_mixed_child", "s_mixed", suspended, old, true}, // can be resumed: its tree stays
	}
	for _, c := range sessions {
		rec := &agentv1.SessionRecord{FormatVersion: records.FormatVersion, Session: &agentv1.Session{
			SessionId: c.id, ParentSessionId: c.parent, Principal: "user:alice", State: c.state, UpdateTime: timestamppb.New(c.updated)}}
		if _, err := s.records.Put(ctx, rec, records.Any); err != nil {
			t.Fatal(err)
		}
		for seq := uint64(1); seq <= 3; seq++ {
			f, err := s.bus.Publish(ctx, &agentv1.AgentEvent{SessionId: c.id, Sequence: seq,
				Event: &agentv1.AgentEvent_SessionEnded{SessionEnded: &agentv1.SessionEnded{}}}, "test")
			if err != nil {
				t.Fatal(err)
			}
			select {
			case <-f.Ok():
			case err := <-f.Err():
				t.Fatal(err)
			}
		}
	}
	if n := s.expireClosed(ctx, now, time.Hour); n != 2 {
		t.Errorf("expireClosed purged %d sessions, want 2", n)
	}
	for _, c := range sessions {
		_, _, err := s.records.Get(ctx, c.id)
		last, lerr := s.bus.LastSequence(ctx, c.id)
		if lerr != nil {
			t.Fatal(lerr)
		}
		if kept := err == nil; kept != c.kept {
			t.Errorf("%s: record kept %v, want %v (%v)", c.id, kept, c.kept, err)
		}
		if want := map[bool]uint64{true: 3, false: 0}[c.kept]; last != want {
			t.Errorf("%s: last stored sequence %d, want %d", c.id, last, want)
		}
	}
	// The next sweep finds nothing more.
	if n := s.expireClosed(ctx, now, time.Hour); n != 0 {
		t.Errorf("a second sweep purged %d", n)
	}
	// The s_alice and s_bob fixtures have no update time: never expired.
	ids, _ := s.records.List(ctx, "", 100)
	if !slices.Contains(ids, "s_alice") {
		t.Errorf("records left %v", ids)
	}
}
