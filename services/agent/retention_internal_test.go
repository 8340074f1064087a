package agent

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	agentv1 "github.com/fabro-sh/fabro-go/gen/fabro/agent/v1"
	"github.com/fabro-sh/fabro-go/platform/auth"
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

// gatedRecords holds the first Get (or Delete) of one session id, once
// armed, until the test lets it go: a resume or a purge stopped at the
// point where the other can overlap it.
type gatedRecords struct {
	records.Store
	id          string
	onGet       bool          // gate Get; else Delete
	armed       atomic.Bool   // the next matching call is held
	reached     chan struct{} // closed when it is
	proceed     chan struct{} // closed to let it go
	reachedOnce sync.Once
}

func (g *gatedRecords) gate(id string, get bool) {
	if id == g.id && get == g.onGet && g.armed.CompareAndSwap(true, false) {
		g.reachedOnce.Do(func() { close(g.reached) })
		<-g.proceed
	}
}

func (g *gatedRecords) Get(ctx context.Context, id string) (*agentv1.SessionRecord, records.Revision, error) {
	g.gate(id, true)
	return g.Store.Get(ctx, id)
}

func (g *gatedRecords) Delete(ctx context.Context, id string) error {
	g.gate(id, false)
	return g.Store.Delete(ctx, id)
}

// The retention's purge and a ResumeSession of the same closed session
// never overlap: a purge that fires while a resume reads the record keeps
// the session, and a resume while the purge runs is NOT_FOUND (it neither
// loads a session whose events go nor writes a purged record back).
func TestExpireClosedRacesResume(t *testing.T) {
	tests := []struct {
		name      string
		gateGet   bool // hold the resume's read (else the purge's delete)
		wantPurge int
	}{
		{"purge while a resume reads the record", true, 0},
		{"resume while the purge runs", false, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := eventsServiceWith(t, Config{})
			ctx := t.Context()
			now := time.Now()
			rec := &agentv1.SessionRecord{FormatVersion: records.FormatVersion, Session: &agentv1.Session{
				SessionId: "s_old", Principal: "user:alice", State: agentv1.SessionState_SESSION_STATE_CLOSED, UpdateTime: timestamppb.New(now.Add(-2 * time.Hour))}}
			if _, err := s.records.Put(ctx, rec, records.Any); err != nil {
				t.Fatal(err)
			}
			g := &gatedRecords{Store: s.records, id: "s_old", onGet: tt.gateGet, reached: make(chan struct{}), proceed: make(chan struct{})}
			g.armed.Store(true)
			s.records = g
			resumed := make(chan error, 1)
			purged := make(chan int, 1)
			resume := func() {
				_, err := s.ResumeSession(as("alice", auth.RoleUser), &agentv1.ResumeSessionRequest{SessionId: "s_old"})
				resumed <- err
			}
			purge := func() { purged <- s.expireClosed(ctx, now, time.Hour) }
			if tt.gateGet {
				go resume()
				<-g.reached
				purge() // the resume holds the session: nothing waits here
			} else {
				go purge()
				<-g.reached
				resume()
			}
			close(g.proceed)
			err, n := <-resumed, <-purged
			if n != tt.wantPurge {
				t.Errorf("expireClosed purged %d, want %d", n, tt.wantPurge)
			}
			_, _, gerr := s.records.Get(ctx, "s_old")
			if kept := gerr == nil; kept != (tt.wantPurge == 0) {
				t.Errorf("record kept %v, want %v (%v)", kept, tt.wantPurge == 0, gerr)
			}
			// The resume gets as far as the gateway (none here: UNAVAILABLE)
			// only when the purge kept the session.
			wantCode := map[bool]codes.Code{true: codes.Unavailable, false: codes.NotFound}[tt.wantPurge == 0]
			if status.Code(err) != wantCode {
				t.Errorf("ResumeSession: %v, want %s", err, wantCode)
			}
		})
	}
}
