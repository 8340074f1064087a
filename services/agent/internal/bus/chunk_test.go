package bus

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/testing/protocmp"

	agentv1 "github.com/fabro-sh/fabro-go/gen/fabro/agent/v1"
)

func text(s string) *agentv1.AgentEvent {
	return &agentv1.AgentEvent{Event: &agentv1.AgentEvent_TextDelta{TextDelta: &agentv1.TextDelta{Delta: s}}}
}

// TestLargeEvents checks that events over the server's 1 MiB maximum
// payload are stored as chunks and replayed whole, also when two
// sessions' chunks interleave in the stream.
func TestLargeEvents(t *testing.T) {
	b := open(t, Config{StoreDir: t.TempDir()})
	if mp := b.nc.MaxPayload(); mp != 1<<20 {
		t.Fatalf("server max payload %d, want the default 1 MiB", mp)
	}
	a, c := NewLog(b, "s_a", "", "s_a", 0, nil), NewLog(b, "s_c", "", "s_c", 0, nil)
	want := map[string][]*agentv1.AgentEvent{}
	for i, e := range []struct {
		log *Log
		id  string
		ev  *agentv1.AgentEvent
	}{
		{a, "s_a", text("small")},
		{a, "s_a", text(strings.Repeat("a", 5<<20))},
		{c, "s_c", text(strings.Repeat("c", 3<<20+17))},
		{a, "s_a", text(strings.Repeat("b", 1<<20))},
		{c, "s_c", text("after")},
	} {
		if _, err := e.log.Emit(e.ev); err != nil {
			t.Fatalf("emit %d: %v", i, err)
		}
		want[e.id] = append(want[e.id], e.ev)
	}
	for _, l := range []*Log{a, c} {
		if err := l.Flush(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
	if diff := cmp.Diff(want["s_a"], replay(t, b, "s_a", 3), protocmp.Transform()); diff != "" {
		t.Errorf("replay of s_a (-want +got):\n%s", diff)
	}
	var many []*agentv1.AgentEvent
	if err := b.ReplayMany(t.Context(), []string{"s_a", "s_c"}, func(ev *agentv1.AgentEvent) error {
		many = append(many, ev)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	byID := map[string][]*agentv1.AgentEvent{}
	for _, ev := range many {
		byID[ev.GetSessionId()] = append(byID[ev.GetSessionId()], ev)
	}
	if diff := cmp.Diff(want, byID, protocmp.Transform()); diff != "" {
		t.Errorf("ReplayMany (-want +got):\n%s", diff)
	}
	st, err := b.js.Stream(t.Context(), StreamName)
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	// 1 + 6 + 2 chunks for s_a, 4 + 1 for s_c.
	if got := info.State.Msgs; got != 14 {
		t.Errorf("the stream holds %d messages, want 14 (chunks)", got)
	}
}

// TestRetention checks the configured limits reach the stream and that a
// replay from a sequence the stream dropped fails with *ExpiredError.
func TestRetention(t *testing.T) {
	b := open(t, Config{StoreDir: t.TempDir(), Writer: WriterConfig{MaxAge: time.Hour, MaxBytes: 64 << 10}})
	st, err := b.js.Stream(t.Context(), StreamName)
	if err != nil {
		t.Fatal(err)
	}
	if cfg := st.CachedInfo().Config; cfg.MaxAge != time.Hour || cfg.MaxBytes != 64<<10 || cfg.Duplicates > time.Hour {
		t.Errorf("stream limits: max age %s, max bytes %d, duplicates %s", cfg.MaxAge, cfg.MaxBytes, cfg.Duplicates)
	}
	gone := NewLog(b, "s_gone", "", "s_gone", 0, nil)
	if _, err := gone.Emit(text("first")); err != nil {
		t.Fatal(err)
	}
	if err := gone.Flush(t.Context()); err != nil {
		t.Fatal(err)
	}
	old := NewLog(b, "s_old", "", "s_old", 0, nil)
	for range 300 {
		if _, err := old.Emit(text(strings.Repeat("x", 1000))); err != nil {
			t.Fatal(err)
		}
	}
	if err := old.Flush(t.Context()); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	nop := func(*agentv1.AgentEvent) error { return nil }
	var exp *ExpiredError
	if err := b.Replay(ctx, "s_old", 1, 300, nop); !errors.As(err, &exp) || exp.From != 1 || exp.Oldest <= 1 {
		t.Fatalf("replay of s_old from 1: %v, want ExpiredError with the oldest retained", err)
	}
	var n int
	if err := b.Replay(ctx, "s_old", exp.Oldest, 300, func(*agentv1.AgentEvent) error { n++; return nil }); err != nil || n != int(300-exp.Oldest+1) {
		t.Fatalf("replay of s_old from the oldest retained %d: %d events, %v", exp.Oldest, n, err)
	}
	if err := b.Replay(ctx, "s_gone", 1, 1, nop); !errors.As(err, &exp) || exp.Oldest != 0 {
		t.Fatalf("replay of a session with no retained event: %v, want ExpiredError", err)
	}
}
