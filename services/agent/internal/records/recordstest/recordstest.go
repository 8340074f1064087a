// Package recordstest checks that a records.Store keeps the contract, so
// that every implementation (files, a JetStream bucket) runs the same test.
package recordstest

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/testing/protocmp"

	agentv1 "github.com/fabro-sh/fabro-go/gen/fabro/agent/v1"
	"github.com/fabro-sh/fabro-go/services/agent/internal/records"
)

// Record is a minimal valid record of id.
func Record(id string) *agentv1.SessionRecord {
	return &agentv1.SessionRecord{FormatVersion: records.FormatVersion, Session: &agentv1.Session{SessionId: id, State: agentv1.SessionState_SESSION_STATE_IDLE}}
}

// Run checks store, which must start empty.
func Run(t *testing.T, store records.Store) {
	ctx := t.Context()
	if _, _, err := store.Get(ctx, "s_none"); !errors.Is(err, records.ErrNotFound) {
		t.Fatalf("Get of a missing record: %v, want ErrNotFound", err)
	}
	rev, err := store.Put(ctx, Record("s_a"), 0)
	if err != nil {
		t.Fatalf("Put (create): %v", err)
	}
	if _, err := store.Put(ctx, Record("s_a"), 0); !errors.Is(err, records.ErrConflict) {
		t.Fatalf("a second create: %v, want ErrConflict", err)
	}
	closed := Record("s_a")
	closed.Session.State = agentv1.SessionState_SESSION_STATE_CLOSED
	rev2, err := store.Put(ctx, closed, rev)
	if err != nil {
		t.Fatalf("Put at the current revision: %v", err)
	}
	if rev2 == rev {
		t.Fatalf("Put kept revision %d", rev)
	}
	if _, err := store.Put(ctx, Record("s_a"), rev); !errors.Is(err, records.ErrConflict) {
		t.Fatalf("Put at a stale revision: %v, want ErrConflict", err)
	}
	got, gotRev, err := store.Get(ctx, "s_a")
	if err != nil {
		t.Fatal(err)
	}
	if gotRev != rev2 {
		t.Errorf("Get revision %d, want %d", gotRev, rev2)
	}
	if d := cmp.Diff(closed, got, protocmp.Transform()); d != "" {
		t.Errorf("Get (-want +got):\n%s", d)
	}
	if _, err := store.Put(ctx, proto.CloneOf(closed), records.Any); err != nil {
		t.Fatalf("Put with Any: %v", err)
	}

	for i := range 5 {
		if _, err := store.Put(ctx, Record(fmt.Sprintf("s_b%d", i)), 0); err != nil {
			t.Fatal(err)
		}
	}
	// List may lag behind Put: a clustered store lists from a replica,
	// which catches up within moments. The listing must converge to every
	// record, in order, each page continuing the last.
	want := []string{"s_b4", "s_b3", "s_b2", "s_b1", "s_b0", "s_a"}
	var all []string
	for deadline := time.Now().Add(10 * time.Second); ; {
		all = nil
		before := ""
		for {
			page, err := store.List(ctx, before, 2)
			if err != nil {
				t.Fatal(err)
			}
			all = append(all, page...)
			if len(page) < 2 {
				break
			}
			before = page[len(page)-1]
		}
		if cmp.Equal(want, all) || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if d := cmp.Diff(want, all); d != "" {
		t.Errorf("List pages (-want +got):\n%s", d)
	}

	if err := store.Delete(ctx, "s_a"); err != nil {
		t.Fatal(err)
	}
	if err := store.Delete(ctx, "s_a"); err != nil {
		t.Fatalf("deleting a deleted record: %v", err)
	}
	if _, _, err := store.Get(ctx, "s_a"); !errors.Is(err, records.ErrNotFound) {
		t.Fatalf("Get after Delete: %v, want ErrNotFound", err)
	}
	if _, err := store.Put(ctx, Record("s_a"), 0); err != nil {
		t.Fatalf("create after Delete: %v", err)
	}
	concurrentWriters(t, store)
}

// concurrentWriters checks compare-and-set under contention: writers
// that each read a record, change it and write it with the revision they
// read, again from a fresh read on a conflict, lose no change; and a
// write with a revision read before another writer's is refused.
func concurrentWriters(t *testing.T, store records.Store) {
	ctx := t.Context()
	const writers, each = 8, 10
	if _, err := store.Put(ctx, Record("s_cas"), 0); err != nil {
		t.Fatal(err)
	}
	_, before, err := store.Get(ctx, "s_cas")
	if err != nil {
		t.Fatal(err)
	}
	errs := make(chan error, writers)
	var wg sync.WaitGroup
	for range writers {
		wg.Go(func() {
			for range each {
				for {
					rec, rev, err := store.Get(ctx, "s_cas")
					if err != nil {
						errs <- err
						return
					}
					rec.Session.PromptCount++
					_, err = store.Put(ctx, rec, rev)
					if err == nil {
						break
					}
					if !errors.Is(err, records.ErrConflict) {
						errs <- err
						return
					}
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("a writer: %v", err)
	}
	got, _, err := store.Get(ctx, "s_cas")
	if err != nil {
		t.Fatal(err)
	}
	if n := got.GetSession().GetPromptCount(); n != writers*each {
		t.Errorf("after %d compare-and-set increments the count is %d: changes were overwritten", writers*each, n)
	}
	if _, err := store.Put(ctx, Record("s_cas"), before); !errors.Is(err, records.ErrConflict) {
		t.Errorf("a write with a revision read before %d other writes: %v, want ErrConflict", writers*each, err)
	}
}
