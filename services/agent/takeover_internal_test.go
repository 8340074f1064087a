package agent

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	agentv1 "github.com/fabro-sh/fabro-go/gen/fabro/agent/v1"
	"github.com/fabro-sh/fabro-go/services/agent/internal/cluster"
	"github.com/fabro-sh/fabro-go/services/agent/internal/records"
)

// flakyRecords fails every Get with a transient error (the records bucket
// unreachable) until failures run out, then answers from the store.
type flakyRecords struct {
	records.Store
	mu       sync.Mutex
	failures int // -1: forever
	gets     int
}

var errBucketDown = errors.New("nats: timeout")

func (f *flakyRecords) Get(ctx context.Context, id string) (*agentv1.SessionRecord, records.Revision, error) {
	f.mu.Lock()
	f.gets++
	fail := f.failures != 0
	if f.failures > 0 {
		f.failures--
	}
	f.mu.Unlock()
	if fail {
		return nil, 0, errBucketDown
	}
	return f.Store.Get(ctx, id)
}

func (f *flakyRecords) count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.gets
}

func testReplica(t *testing.T, store records.Store) *replica {
	svc := &Service{records: store, sessions: map[string]*session{}, logger: slog.New(slog.NewTextHandler(t.Output(), nil))}
	r := &replica{svc: svc, logger: svc.logger, inflight: map[string]bool{}}
	svc.replica = r
	return r
}

func fileRecords(t *testing.T) records.Store {
	st, err := records.NewFile(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// A takeover whose records.Get fails goes on trying (it returned at the
// first failure, stranding the session) until the failure is one no retry
// changes; and it gives up after takeoverPersistence when the failure
// lasts, leaving the session to the sweep.
func TestTakeOverRetries(t *testing.T) {
	tests := []struct {
		name     string
		failures int
		wantGets func(int) bool
		wantTook time.Duration // fake time the takeover ran
	}{
		{"recovers after three failures", 3, func(n int) bool { return n == 4 }, 0},
		{"gives up when the failure lasts", -1, func(n int) bool { return n > 10 }, takeoverPersistence},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				// The record is missing: the fourth Get answers ErrNotFound,
				// which settles the takeover.
				store := &flakyRecords{Store: fileRecords(t), failures: tt.failures}
				r := testReplica(t, store)
				start := time.Now()
				r.takeOver(t.Context(), "s1")
				if n := store.count(); !tt.wantGets(n) {
					t.Errorf("records.Get called %d times", n)
				}
				if took := time.Since(start); took < tt.wantTook || took > tt.wantTook+3*time.Second {
					t.Errorf("the takeover ran %s, want about %s", took, tt.wantTook)
				}
			})
		})
	}
}

// The watcher and the sweep finding the same session start one takeover.
func TestSpawnTakeOverOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := &flakyRecords{Store: fileRecords(t), failures: -1}
		r := testReplica(t, store)
		ctx, cancel := context.WithCancel(t.Context())
		for range 5 {
			r.spawnTakeOver(ctx, "s1")
		}
		synctest.Wait() // the one takeover sleeps between attempts
		if n := store.count(); n != 1 {
			t.Errorf("%d takeovers started, want 1", n)
		}
		cancel()
		r.workers.Wait()
	})
}

// The sweep finds the sessions with an unfinished prompt that no replica
// holds (a subagent's too: its prompt is ended), and nothing else.
func TestOwnerless(t *testing.T) {
	store := fileRecords(t)
	type rec struct {
		id, parent, prompt string
		state              agentv1.SessionState
		leased             bool
	}
	for _, r := range []rec{
		{id: "s_ownerless", prompt: "p1", state: agentv1.SessionState_SESSION_STATE_RUNNING},
		{id: "s_leased", prompt: "p2", state: agentv1.SessionState_SESSION_STATE_RUNNING, leased: true},
		{id: "s_idle", state: agentv1.SessionState_SESSION_STATE_IDLE},
		{id: "s_closed", prompt: "p3", state: agentv1.SessionState_SESSION_STATE_CLOSED},
		{id: "s_child", parent: "s_ownerless", prompt: "p4", state: agentv1.SessionState_SESSION_STATE_RUNNING},
		{id: "s_ownerless2", prompt: "p5", state: agentv1.SessionState_SESSION_STATE_SUSPENDED},
	} {
		if _, err := store.Put(t.Context(), &agentv1.SessionRecord{FormatVersion: records.FormatVersion,
			Session:            &agentv1.Session{SessionId: r.id, ParentSessionId: r.parent, State: r.state},
			UnfinishedPromptId: r.prompt}, 0); err != nil {
			t.Fatal(err)
		}
	}
	r := testReplica(t, store)
	r.leaseOf = func(_ context.Context, id string) (cluster.Lease, error) {
		if id == "s_leased" {
			return cluster.Lease{SessionID: id, Owner: "other"}, nil
		}
		return cluster.Lease{}, cluster.ErrNotFound
	}
	got := r.ownerless(t.Context())
	slices.Sort(got)
	if want := []string{"s_child", "s_ownerless", "s_ownerless2"}; !slices.Equal(got, want) {
		t.Errorf("ownerless = %v, want %v", got, want)
	}
}

func TestSweepInterval(t *testing.T) {
	for _, tt := range []struct{ ttl, want time.Duration }{
		{300 * time.Millisecond, 5 * time.Second},
		{3 * time.Second, 15 * time.Second},
		{time.Minute, 30 * time.Second},
	} {
		if got := sweepInterval(tt.ttl); got != tt.want {
			t.Errorf("sweepInterval(%s) = %s, want %s", tt.ttl, got, tt.want)
		}
	}
}
