package bus

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	agentv1 "github.com/fabro-sh/fabro-go/gen/fabro/agent/v1"
)

func open(t *testing.T, cfg Config) *Bus {
	t.Helper()
	b, err := Open(t.Context(), cfg, slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn})))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

func replay(t *testing.T, b *Bus, id string, to uint64) []*agentv1.AgentEvent {
	t.Helper()
	// Generous: right after a NATS restart a loaded machine takes seconds
	// before JetStream answers a consumer's creation.
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	var evs []*agentv1.AgentEvent
	if err := b.Replay(ctx, id, 1, to, func(ev *agentv1.AgentEvent) error {
		evs = append(evs, ev)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return evs
}

// TestLogEnvelopeAndDedupe checks the envelope the log stamps (session
// ids, a gap-free sequence, a time), that a second publish of an event's
// message id is dropped by JetStream, and that a bus connected to an
// external server by URL shares the stream.
func TestLogEnvelopeAndDedupe(t *testing.T) {
	b := open(t, Config{StoreDir: t.TempDir(), Listen: "127.0.0.1:-1"})
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	log := NewLog(b, "s_child", "s_parent", "s_root", 0, func() time.Time { return at })
	for _, ev := range []*agentv1.AgentEvent{
		{Event: &agentv1.AgentEvent_TextDelta{TextDelta: &agentv1.TextDelta{Delta: "a"}}},
		{Event: &agentv1.AgentEvent_TextDelta{TextDelta: &agentv1.TextDelta{Delta: "b"}}},
		{Event: &agentv1.AgentEvent_LoopDetected{LoopDetected: &agentv1.LoopDetected{PatternLength: 1}}},
	} {
		if _, err := log.Emit(ev); err != nil {
			t.Fatal(err)
		}
	}
	if err := log.Flush(t.Context()); err != nil {
		t.Fatal(err)
	}

	// A retried publish of event 2 (same session, same sequence) is a
	// duplicate, not a fourth event.
	dup := &agentv1.AgentEvent{SessionId: "s_child", Sequence: 2, Event: &agentv1.AgentEvent_TextDelta{TextDelta: &agentv1.TextDelta{Delta: "b again"}}}
	f, err := b.Publish(context.Background(), dup, "")
	if err != nil {
		t.Fatal(err)
	}
	select {
	case ack := <-f.Ok():
		if !ack.Duplicate {
			t.Errorf("a second publish of message id %s was stored", MsgID("s_child", 2))
		}
	case err := <-f.Err():
		t.Fatal(err)
	case <-time.After(10 * time.Second):
		t.Fatal("no ack")
	}

	for _, bus := range []*Bus{b} {
		evs := replay(t, bus, "s_child", 3)
		var got []string
		for i, ev := range evs {
			if ev.GetSequence() != uint64(i+1) || ev.GetSessionId() != "s_child" || ev.GetParentSessionId() != "s_parent" ||
				ev.GetRootSessionId() != "s_root" || !ev.GetTime().AsTime().Equal(at) {
				t.Errorf("event %d envelope: %v", i, ev)
			}
			got = append(got, EventType(ev)+":"+ev.GetTextDelta().GetDelta())
		}
		if diff := cmp.Diff([]string{"text_delta:a", "text_delta:b", "loop_detected:"}, got); diff != "" {
			t.Errorf("stored events (-want +got):\n%s", diff)
		}
	}
	info, err := b.js.Stream(t.Context(), StreamName)
	if err != nil {
		t.Fatal(err)
	}
	if n := info.CachedInfo().State.Msgs; n != 3 {
		t.Errorf("the stream holds %d messages, want 3", n)
	}
}

func TestSubjects(t *testing.T) {
	if got := Subject("s_1", "tool_call_completed"); got != "fabro.agent.v1.sessions.s_1.events.tool_call_completed" {
		t.Errorf("Subject = %q", got)
	}
	if got := SessionFilter("s_1"); got != "fabro.agent.v1.sessions.s_1.events.>" {
		t.Errorf("SessionFilter = %q", got)
	}
	if got := MsgID("s_1", 42); got != "s_1:42" {
		t.Errorf("MsgID = %q", got)
	}
	types := EventTypes()
	if len(types) == 0 || types[0] != "session_started" {
		t.Errorf("EventTypes = %v", types)
	}
}
