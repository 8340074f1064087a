package cluster_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/testing/protocmp"

	agentv1 "github.com/fabro-sh/fabro-go/gen/fabro/agent/v1"
	llmv1 "github.com/fabro-sh/fabro-go/gen/fabro/llm/v1"
	"github.com/fabro-sh/fabro-go/platform/testkit"
	"github.com/fabro-sh/fabro-go/services/agent/internal/bus"
	"github.com/fabro-sh/fabro-go/services/agent/internal/cluster"
	"github.com/fabro-sh/fabro-go/services/agent/internal/records"
	"github.com/fabro-sh/fabro-go/services/agent/internal/records/recordstest"
	"github.com/fabro-sh/fabro-go/services/agent/natstest"
)

func logger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn}))
}

// deployment is a NATS JetStream to run a test against: the embedded
// single node (R1), or a three-node cluster (R3).
type deployment struct {
	name     string
	replicas int
	open     func(t *testing.T) (cfg bus.Config, c *natstest.Cluster)
}

var deployments = []deployment{
	{"embedded", 1, func(t *testing.T) (bus.Config, *natstest.Cluster) {
		return bus.Config{StoreDir: t.TempDir()}, nil
	}},
	{"cluster3", 3, func(t *testing.T) (bus.Config, *natstest.Cluster) {
		c := natstest.StartCluster(t, 3)
		return bus.Config{URL: c.URL(), Replicas: 3}, c
	}},
}

type env struct {
	bus   *bus.Bus
	store *cluster.Store
	nodes *natstest.Cluster
}

func open(t *testing.T, d deployment, cfg cluster.Config) env {
	t.Helper()
	bc, nodes := d.open(t)
	b, err := bus.Open(t.Context(), bc, logger(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	cfg.Replicas = d.replicas
	st, err := cluster.Open(t.Context(), b.JetStream(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	return env{bus: b, store: st, nodes: nodes}
}

func record(id string, text string) *agentv1.SessionRecord {
	return &agentv1.SessionRecord{
		FormatVersion: 1,
		Session:       &agentv1.Session{SessionId: id, State: agentv1.SessionState_SESSION_STATE_IDLE},
		Messages: []*llmv1.Message{{Role: llmv1.Role_ROLE_USER, Parts: []*llmv1.ContentPart{
			{Part: &llmv1.ContentPart_Text{Text: &llmv1.TextPart{Text: text}}}}}},
	}
}

// TestRecords runs the records.Store contract on both deployments.
func TestRecords(t *testing.T) {
	for _, d := range deployments {
		t.Run(d.name, func(t *testing.T) {
			recordstest.Run(t, open(t, d, cluster.Config{}).store.Records())
		})
	}
}

// TestLargeRecords checks a record bigger than one message: kept in the
// object store, read back whole, replaced from its revision only, and
// its object deleted with the replaced version and with the key.
func TestLargeRecords(t *testing.T) {
	ctx := t.Context()
	e := open(t, deployments[0], cluster.Config{MaxValue: 2048})
	recs := e.store.Records()
	big := strings.Repeat("x", 10_000)
	rev, err := recs.Put(ctx, record("s_big", big), 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := recs.Put(ctx, record("s_big", "stale"), rev+100); !errors.Is(err, records.ErrConflict) {
		t.Fatalf("write from a stale revision: %v, want ErrConflict", err)
	}
	rev, err = recs.Put(ctx, record("s_big", big+"y"), rev)
	if err != nil {
		t.Fatal(err)
	}
	got, gotRev, err := recs.Get(ctx, "s_big")
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(record("s_big", big+"y"), got, protocmp.Transform()); diff != "" || gotRev != rev {
		t.Fatalf("Get: revision %d want %d; (-want +got):\n%s", gotRev, rev, diff)
	}
	if n := objects(t, e); n != 1 {
		t.Fatalf("object store holds %d objects after a replace, want 1", n)
	}
	if _, err := recs.Put(ctx, record("s_big", big+"z"), records.Any); err != nil {
		t.Fatal(err)
	}
	if n := objects(t, e); n != 1 {
		t.Fatalf("object store holds %d objects after an overwrite, want 1", n)
	}
	if err := recs.Delete(ctx, "s_big"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := recs.Get(ctx, "s_big"); !errors.Is(err, records.ErrNotFound) {
		t.Fatalf("Get after Delete: %v, want ErrNotFound", err)
	}
	if n := objects(t, e); n != 0 {
		t.Fatalf("object store holds %d objects after the delete, want 0", n)
	}
}

func objects(t *testing.T, e env) int {
	t.Helper()
	obs, err := e.bus.JetStream().ObjectStore(t.Context(), cluster.LargeBucket)
	if err != nil {
		t.Fatal(err)
	}
	list, err := obs.List(t.Context())
	if err != nil && !strings.Contains(err.Error(), "no objects found") {
		t.Fatal(err)
	}
	return len(list)
}

// TestLeases checks ownership on both deployments: the current owner
// wins every conflict and is named by it; an owner that stops renewing
// loses the session to the server's expiry, which watchers see; a stale
// renewal fails.
func TestLeases(t *testing.T) {
	for _, d := range deployments {
		t.Run(d.name, func(t *testing.T) {
			ctx := t.Context()
			e := open(t, d, cluster.Config{LeaseTTL: time.Second})
			leases := e.store.Leases()
			free, err := leases.WatchFree(ctx)
			if err != nil {
				t.Fatal(err)
			}

			a, err := leases.Acquire(ctx, "s_1", "replica-a", "10.0.0.1:7703")
			if err != nil {
				t.Fatal(err)
			}
			_, err = leases.Acquire(ctx, "s_1", "replica-b", "10.0.0.2:7703")
			var held *cluster.HeldError
			if !errors.As(err, &held) || !errors.Is(err, cluster.ErrHeld) {
				t.Fatalf("Acquire of a held session: %v, want a HeldError", err)
			}
			if diff := cmp.Diff(cluster.Lease{SessionID: "s_1", Owner: "replica-a", Addr: "10.0.0.1:7703", Revision: a.Revision}, held.Lease); diff != "" {
				t.Fatalf("holder (-want +got):\n%s", diff)
			}
			// The owner acquiring again renews its own lease.
			a2, err := leases.Acquire(ctx, "s_1", "replica-a", "10.0.0.1:7703")
			if err != nil || a2.Revision <= a.Revision {
				t.Fatalf("re-acquire by the owner: %+v, %v", a2, err)
			}
			if _, err := leases.Renew(ctx, a); !errors.Is(err, cluster.ErrConflict) {
				t.Fatalf("renew from a stale revision: %v, want ErrConflict", err)
			}

			// Replica a stops renewing: the server expires the lease and
			// the watcher says so; b takes over; a's renewal fails.
			select {
			case id := <-free:
				if id != "s_1" {
					t.Fatalf("freed %q, want s_1", id)
				}
			case <-time.After(15 * time.Second):
				t.Fatal("no expiry seen")
			}
			// On a three-node cluster a Get may be answered by a node that
			// has not applied the expiry the watcher saw yet: await it.
			for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
				_, err := leases.Get(ctx, "s_1")
				if errors.Is(err, cluster.ErrNotFound) {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("Get of an expired lease 10 s after its expiry was seen: %v, want ErrNotFound", err)
				}
			}
			b, err := leases.Acquire(ctx, "s_1", "replica-b", "10.0.0.2:7703")
			if err != nil {
				t.Fatalf("takeover: %v", err)
			}
			if _, err := leases.Renew(ctx, a2); !errors.Is(err, cluster.ErrConflict) {
				t.Fatalf("the old owner's renewal: %v, want ErrConflict", err)
			}
			if err := leases.Release(ctx, a2); !errors.Is(err, cluster.ErrConflict) {
				t.Fatalf("the old owner's release: %v, want ErrConflict", err)
			}
			if err := leases.Release(ctx, b); err != nil {
				t.Fatal(err)
			}
			select {
			case id := <-free:
				if id != "s_1" {
					t.Fatalf("freed %q, want s_1", id)
				}
			case <-time.After(15 * time.Second):
				t.Fatal("no release seen")
			}
		})
	}
}

// TestKeeper checks the renewing holder: it keeps a lease past many TTLs,
// reports a lease another replica took as lost, and hands a released one
// over at once.
func TestKeeper(t *testing.T) {
	ctx := t.Context()
	e := open(t, deployments[0], cluster.Config{LeaseTTL: time.Second})
	leases := e.store.Leases()
	lost := make(chan string, 4)
	k := leases.Keep("replica-a", "a:1", func(id string, err error) {
		if !errors.Is(err, cluster.ErrConflict) {
			t.Errorf("lost %s: %v, want a conflict", id, err)
		}
		lost <- id
	}, logger(t))
	defer k.Close()
	for _, id := range []string{"s_kept", "s_stolen", "s_released"} {
		if _, err := k.Acquire(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
	// Kept: still a's after three TTLs.
	time.Sleep(3 * time.Second) // the time being tested: no condition to await
	if l, err := leases.Get(ctx, "s_kept"); err != nil || l.Owner != "replica-a" || !k.Holds("s_kept") {
		t.Fatalf("kept lease after 3 TTLs: %+v, %v, holds %v", l, err, k.Holds("s_kept"))
	}
	// Stolen: the key is replaced behind the keeper's back.
	for { // the keeper may renew between the Get and the Release
		cur, err := leases.Get(ctx, "s_stolen")
		if err != nil {
			t.Fatal(err)
		}
		if err = leases.Release(ctx, cur); err == nil {
			break
		} else if !errors.Is(err, cluster.ErrConflict) {
			t.Fatal(err)
		}
	}
	if _, err := leases.Acquire(ctx, "s_stolen", "replica-b", "b:1"); err != nil {
		t.Fatal(err)
	}
	select {
	case id := <-lost:
		if id != "s_stolen" {
			t.Fatalf("lost %s, want s_stolen", id)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the keeper did not report the stolen lease")
	}
	if k.Holds("s_stolen") {
		t.Fatal("the keeper still holds the stolen lease")
	}
	if err := k.Release(ctx, "s_released"); err != nil {
		t.Fatal(err)
	}
	if _, err := leases.Acquire(ctx, "s_released", "replica-b", "b:1"); err != nil {
		t.Fatalf("acquire after release: %v", err)
	}
}

// TestTaskListsConcurrent checks that concurrent changes of one tree's
// task list from several writers all survive.
func TestTaskListsConcurrent(t *testing.T) {
	e := open(t, deployments[0], cluster.Config{})
	tl := e.store.TaskLists()
	const writers, each = 4, 10
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			for i := range each {
				if _, err := tl.Update(t.Context(), "s_root", func(l *agentv1.TodoList) error {
					l.Items = append(l.Items, &agentv1.TodoItem{ItemId: fmt.Sprintf("%d-%d", w, i)})
					return nil
				}); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	l, _, err := tl.Get(t.Context(), "s_root")
	if err != nil {
		t.Fatal(err)
	}
	if len(l.GetItems()) != writers*each {
		t.Fatalf("%d items, want %d", len(l.GetItems()), writers*each)
	}
	if err := tl.Delete(t.Context(), "s_root"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := tl.Get(t.Context(), "s_root"); !errors.Is(err, cluster.ErrNotFound) {
		t.Fatalf("Get after Delete: %v", err)
	}
}

// TestNodeLoss writes a session's events to a three-node R3 cluster and
// stops the node leading the events stream in the middle: the stream
// holds 1..N exactly once, and the records and leases buckets still take
// writes.
func TestNodeLoss(t *testing.T) {
	ctx := t.Context()
	e := open(t, deployments[1], cluster.Config{LeaseTTL: 2 * time.Second})
	log := bus.NewLog(e.bus, "s_n", "", "s_n", 0, nil)
	const n = 400
	for i := 1; i <= n; i++ {
		if i == n/2 {
			if err := log.Flush(ctx); err != nil {
				t.Fatal(err)
			}
			leader := e.nodes.StreamLeader(bus.StreamName)
			if leader < 0 {
				t.Fatal("no stream leader")
			}
			e.nodes.Stop(leader)
			t.Logf("stopped node %d, the stream leader, after %d events", leader+1, i-1)
		}
		if _, err := log.Emit(&agentv1.AgentEvent{Event: &agentv1.AgentEvent_TextDelta{TextDelta: &agentv1.TextDelta{Delta: fmt.Sprint(i)}}}); err != nil {
			t.Fatal(err)
		}
	}
	fctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	if err := log.Flush(fctx); err != nil {
		t.Fatal(err)
	}
	// The two nodes left elect a new meta and stream leader (awaited: a
	// replay's consumer meanwhile has no responder).
	e.nodes.WaitReady()
	testkit.Eventually(t, 30*time.Second, func() error {
		if e.nodes.StreamLeader(bus.StreamName) < 0 {
			return errors.New("no node leads the stream")
		}
		return nil
	})
	// Each step has its own deadline: on a loaded machine the flush and
	// the election can use most of one shared minute.
	rctx, rcancel := context.WithTimeout(ctx, 60*time.Second)
	defer rcancel()
	var seqs []uint64
	if err := e.bus.Replay(rctx, "s_n", 1, n, func(ev *agentv1.AgentEvent) error {
		seqs = append(seqs, ev.GetSequence())
		if ev.GetTextDelta().GetDelta() != fmt.Sprint(ev.GetSequence()) {
			return fmt.Errorf("event %d carries %q", ev.GetSequence(), ev.GetTextDelta().GetDelta())
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	want := make([]uint64, n)
	for i := range want {
		want[i] = uint64(i + 1)
	}
	if diff := cmp.Diff(want, seqs); diff != "" {
		t.Fatalf("stream sequences (-want +got):\n%s", diff)
	}
	if last, err := e.bus.LastSequence(rctx, "s_n"); err != nil || last != n {
		t.Fatalf("LastSequence: %d, %v; want %d", last, err, n)
	}
	if _, err := e.store.Records().Put(rctx, record("s_n", "after"), 0); err != nil {
		t.Fatalf("record write with a node down: %v", err)
	}
	if _, err := e.store.Leases().Acquire(rctx, "s_n", "replica-a", "a:1"); err != nil {
		t.Fatalf("lease with a node down: %v", err)
	}
}

func TestConfigValidate(t *testing.T) {
	tests := []struct {
		name    string
		cfg     cluster.Config
		wantErr string
	}{
		{"defaults", cluster.Config{}, ""},
		{"a TTL with its default renewal", cluster.Config{LeaseTTL: 10 * time.Second}, ""},
		{"renewal a third of the TTL", cluster.Config{LeaseTTL: 3 * time.Second, LeaseRenewal: time.Second}, ""},
		{"renewal past a third of the TTL", cluster.Config{LeaseTTL: 3 * time.Second, LeaseRenewal: 1500 * time.Millisecond}, "does not fit the TTL"},
		{"renewal past the default TTL", cluster.Config{LeaseRenewal: 5 * time.Second}, "does not fit the TTL"},
		{"negative renewal", cluster.Config{LeaseRenewal: -time.Second}, "does not fit the TTL"},
		{"TTL too short", cluster.Config{LeaseTTL: 100 * time.Millisecond}, "under the minimum"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.cfg.Validate()
			if tt.wantErr == "" && err != nil || tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)) {
				t.Fatalf("Validate() = %v, want %q", err, tt.wantErr)
			}
		})
	}
}

// A replica holding many leases keeps every one, their renewals on a
// connection of their own (bus.Dial) and sent together: one at a time,
// a round of 200 can outlast the validity and fence the replica's own
// sessions.
func TestKeeperManyLeases(t *testing.T) {
	ctx := t.Context()
	bc, _ := deployments[0].open(t)
	b, err := bus.Open(ctx, bc, logger(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	nc, ljs, err := b.Dial("leases")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	// 2 s: with 1 s a machine loaded by two modules' race tests missed a
	// renewal round now and then.
	const ttl = 2 * time.Second
	st, err := cluster.Open(ctx, b.JetStream(), cluster.Config{LeaseTTL: ttl, LeaseJetStream: ljs})
	if err != nil {
		t.Fatal(err)
	}
	var lost atomic.Int32
	k := st.Leases().Keep("replica-a", "a:1", func(string, error) { lost.Add(1) }, logger(t))
	defer k.Close()
	const n = 200
	for i := range n {
		if _, err := k.Acquire(ctx, fmt.Sprintf("s_%03d", i)); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(3 * ttl) // three TTLs: the time being tested
	if l := lost.Load(); l != 0 {
		t.Fatalf("%d of %d leases lost while their owner lived", l, n)
	}
	for i := range n {
		if l, err := st.Leases().Get(ctx, fmt.Sprintf("s_%03d", i)); err != nil || l.Owner != "replica-a" {
			t.Fatalf("lease %d after three TTLs: %+v, %v", i, l, err)
		}
	}
}
