package agent

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"slices"
	"testing"
	"time"

	agentv1 "github.com/fabro-sh/fabro-go/gen/fabro/agent/v1"
	"github.com/fabro-sh/fabro-go/services/agent/internal/records"
)

// seedRecords writes n closed session records, as n earlier runs leave.
func seedRecords(b *testing.B, dataDir string, n int) {
	b.Helper()
	store, err := records.NewFile(filepath.Join(dataDir, "agent", "sessions"))
	if err != nil {
		b.Fatal(err)
	}
	for range n {
		rec := &agentv1.SessionRecord{FormatVersion: records.FormatVersion, Session: &agentv1.Session{
			SessionId: newSessionID(), State: agentv1.SessionState_SESSION_STATE_CLOSED, LastSequence: 40}}
		if _, err := store.Put(context.Background(), rec, 0); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkStartup measures the agent service's start-up and shutdown in
// `fabro exec`'s configuration (in-process NATS, events in memory) on a
// data directory with no earlier session record and on one with 10,000,
// alternately in the same run; ratio is the median of the second over the
// median of the first (goal: at most 1.1).
func BenchmarkStartup(b *testing.B) {
	empty, full := b.TempDir(), b.TempDir()
	seedRecords(b, full, 10000)
	logger := slog.New(slog.DiscardHandler)
	start := func(dir string) time.Duration {
		t0 := time.Now()
		svc, err := New(context.Background(), Config{DataDir: dir, LLMAddr: "127.0.0.1:1", SandboxAddr: "127.0.0.1:1", MemoryEvents: true}, logger)
		if err != nil {
			b.Fatal(err)
		}
		if err := svc.Close(); err != nil {
			b.Fatal(err)
		}
		return time.Since(t0)
	}
	start(empty) // warm the process (first-use allocations, TLS of nothing)
	start(full)
	// Medians of alternating pairs: the machine is shared, and a median
	// is not moved by the odd slow start of either kind.
	var base, seeded []time.Duration
	for b.Loop() {
		base = append(base, start(empty))
		seeded = append(seeded, start(full))
	}
	mb, ms := median(base), median(seeded)
	b.ReportMetric(float64(mb.Microseconds()), "µs/start(0-records)")
	b.ReportMetric(float64(ms.Microseconds()), "µs/start(10000-records)")
	b.ReportMetric(float64(ms)/float64(mb), "ratio")
	fmt.Fprintf(b.Output(), "start-up (median of %d): %v with 0 records, %v with 10,000 (ratio %.3f)\n", len(base), mb, ms, float64(ms)/float64(mb))
}

func median(d []time.Duration) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	return s[len(s)/2]
}
