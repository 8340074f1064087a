package agent

import (
	"context"
	"log/slog"
	"path/filepath"
	"sync"
	"testing"

	agentv1 "github.com/fabro-sh/fabro-go/gen/fabro/agent/v1"
	"github.com/fabro-sh/fabro-go/services/agent/internal/records"
)

// countingStore counts record reads.
type countingStore struct {
	records.Store
	mu   sync.Mutex
	gets int
}

func (c *countingStore) Get(ctx context.Context, id string) (*agentv1.SessionRecord, records.Revision, error) {
	c.mu.Lock()
	c.gets++
	c.mu.Unlock()
	return c.Store.Get(ctx, id)
}

func (c *countingStore) count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.gets
}

// TestStartReadsNoRecord: start-up reads no session record, however many
// there are; a session is read when a call names it, and one a previous
// run left open is then SUSPENDED. (No other service is needed: the agent
// dials the gateway and the sandbox service lazily.)
func TestStartReadsNoRecord(t *testing.T) {
	dir := t.TempDir()
	inner, err := records.NewFile(filepath.Join(dir, "agent", "sessions"))
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, st := range []agentv1.SessionState{agentv1.SessionState_SESSION_STATE_IDLE, agentv1.SessionState_SESSION_STATE_CLOSED, agentv1.SessionState_SESSION_STATE_RUNNING} {
		id := newSessionID()
		ids = append(ids, id)
		if _, err := inner.Put(t.Context(), &agentv1.SessionRecord{FormatVersion: records.FormatVersion, Session: &agentv1.Session{SessionId: id, State: st}}, 0); err != nil {
			t.Fatal(err)
		}
	}
	counting := &countingStore{Store: inner}
	svc, err := New(t.Context(), Config{DataDir: dir, LLMAddr: "127.0.0.1:1", SandboxAddr: "127.0.0.1:1", MemoryEvents: true, Records: counting}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer svc.Close()
	if n := counting.count(); n != 0 {
		t.Fatalf("start-up read %d records, want none", n)
	}
	want := []agentv1.SessionState{agentv1.SessionState_SESSION_STATE_SUSPENDED, agentv1.SessionState_SESSION_STATE_CLOSED, agentv1.SessionState_SESSION_STATE_SUSPENDED}
	for i, id := range ids {
		resp, err := svc.GetSession(t.Context(), &agentv1.GetSessionRequest{SessionId: id})
		if err != nil {
			t.Fatal(err)
		}
		if got := resp.GetSession().GetState(); got != want[i] {
			t.Errorf("session %d: %v, want %v", i, got, want[i])
		}
	}
	if n := counting.count(); n != len(ids) {
		t.Errorf("GetSession read %d records, want %d", n, len(ids))
	}
}
