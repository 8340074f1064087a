package bus

import (
	"errors"
	"testing"
	"time"

	agentv1 "github.com/fabro-sh/fabro-go/gen/fabro/agent/v1"
	"github.com/fabro-sh/fabro-go/platform/testkit"
)

// TestFenceDropsHeldEvents checks that a fenced log (its session now
// another replica's) never republishes the events it held through an
// outage: after NATS returns the stream has only what was stored before,
// and LastSequence, where the new owner continues, says so.
func TestFenceDropsHeldEvents(t *testing.T) {
	b := open(t, Config{StoreDir: t.TempDir(), Writer: WriterConfig{AckTimeout: 200 * time.Millisecond}})
	log := NewLog(b, "s_f", "", "s_f", 0, nil)
	for i := 1; i <= 3; i++ {
		if _, err := log.Emit(delta(i)); err != nil {
			t.Fatal(err)
		}
	}
	if err := log.Flush(t.Context()); err != nil {
		t.Fatal(err)
	}
	restartEmbedded(t, b, func() {
		// NATS is down: these are held for a republish, then the session
		// is fenced.
		for i := 4; i <= 6; i++ {
			if _, err := log.Emit(delta(i)); err != nil {
				t.Fatal(err)
			}
		}
		log.Fence(errors.New("lease lost"))
	})
	if err := log.Flush(t.Context()); !errors.Is(err, ErrFenced) {
		t.Fatalf("Flush of a fenced log: %v, want ErrFenced", err)
	}
	if _, err := log.Emit(delta(7)); !errors.Is(err, ErrFenced) {
		t.Fatalf("Emit on a fenced log: %v, want ErrFenced", err)
	}
	testkit.Eventually(t, 30*time.Second, func() error {
		if !b.connected() {
			return errors.New("the bus has not reconnected")
		}
		return nil
	})
	// The new owner's events 4.. go in; none of the old owner's did.
	next := NewLog(b, "s_f", "", "s_f", 3, nil)
	for i := 4; i <= 5; i++ {
		if _, err := next.Emit(delta(i)); err != nil {
			t.Fatal(err)
		}
	}
	if err := next.Flush(t.Context()); err != nil {
		t.Fatal(err)
	}
	checkOnce(t, b, "s_f", 5)
	if last, err := b.LastSequence(t.Context(), "s_f"); err != nil || last != 5 {
		t.Fatalf("LastSequence: %d, %v; want 5", last, err)
	}
	if last, err := b.LastSequence(t.Context(), "s_none"); err != nil || last != 0 {
		t.Fatalf("LastSequence of a session with no events: %d, %v; want 0", last, err)
	}
}

// TestIncarnationsNeverDedupe: each incarnation of a session's writer has
// its own deduplication ids. A republish by one incarnation is dropped as
// a copy; an event of another incarnation under a sequence already stored
// (a writer started from a record that lagged the log) is not silently
// dropped as a copy of the old one, and LastSequence sees the log's end
// whatever the record said.
func TestIncarnationsNeverDedupe(t *testing.T) {
	b := open(t, Config{StoreDir: t.TempDir()})
	old := NewLog(b, "s_i", "", "s_i", 0, nil)
	old.SetIncarnation("a")
	for i := 1; i <= 3; i++ {
		if _, err := old.Emit(delta(i)); err != nil {
			t.Fatal(err)
		}
	}
	if err := old.Flush(t.Context()); err != nil {
		t.Fatal(err)
	}
	publish := func(seq uint64, inc string) bool {
		t.Helper()
		f, err := b.Publish(t.Context(), &agentv1.AgentEvent{SessionId: "s_i", Sequence: seq, Event: delta(int(seq)).Event}, inc)
		if err != nil {
			t.Fatal(err)
		}
		select {
		case ack := <-f.Ok():
			return ack.Duplicate
		case err := <-f.Err():
			t.Fatal(err)
		case <-time.After(10 * time.Second):
			t.Fatal("no ack")
		}
		return false
	}
	if !publish(2, "a") {
		t.Error("a republish by the same incarnation was stored again")
	}
	if publish(2, "b") {
		t.Error("another incarnation's event 2 was dropped as a copy of the stored one")
	}
	if last, err := b.LastSequence(t.Context(), "s_i"); err != nil || last != 3 {
		t.Fatalf("LastSequence: %d, %v; want 3", last, err)
	}
}

// TestReplaysLeaveNoConsumer: every replay, and every LastSequence, deletes
// the consumer it made when it ends, whether it read to the end or its
// caller stopped it, so a storm of replays cannot fill the stream's
// consumer limit.
func TestReplaysLeaveNoConsumer(t *testing.T) {
	b := open(t, Config{StoreDir: t.TempDir()})
	log := NewLog(b, "s_r", "", "s_r", 0, nil)
	for i := 1; i <= 5; i++ {
		if _, err := log.Emit(delta(i)); err != nil {
			t.Fatal(err)
		}
	}
	if err := log.Flush(t.Context()); err != nil {
		t.Fatal(err)
	}
	stop := errors.New("enough")
	for i := range 50 {
		if got := replay(t, b, "s_r", 5); len(got) != 5 {
			t.Fatalf("replay %d: %d events", i, len(got))
		}
		if err := b.Replay(t.Context(), "s_r", 1, 5, func(*agentv1.AgentEvent) error { return stop }); !errors.Is(err, stop) {
			t.Fatalf("stopped replay: %v", err)
		}
		if _, err := b.LastSequence(t.Context(), "s_r"); err != nil {
			t.Fatal(err)
		}
	}
	stream, err := b.js.Stream(t.Context(), StreamName)
	if err != nil {
		t.Fatal(err)
	}
	info, err := stream.Info(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if n := info.State.Consumers; n != 0 {
		t.Errorf("%d consumers left after 150 replays, want 0", n)
	}
}
