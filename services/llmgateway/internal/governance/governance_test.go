package governance

import (
	"context"
	"errors"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/fabro-sh/fabro-go/platform/auth"
)

// startNATS runs an embedded NATS with JetStream on a random port, its
// store in dir; the returned stop shuts it down.
func startNATS(t testing.TB, dir string) (url string, stop func()) {
	t.Helper()
	ns, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: dir, NoSigs: true, NoLog: true})
	if err != nil {
		t.Fatal(err)
	}
	ns.Start()
	if !ns.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats not ready")
	}
	var once sync.Once
	stop = func() { once.Do(func() { ns.Shutdown(); ns.WaitForShutdown() }) }
	t.Cleanup(stop)
	return ns.ClientURL(), stop
}

func newEngine(t testing.TB, url string, now func() time.Time) *Engine {
	t.Helper()
	var js jetstream.JetStream
	if url != "" {
		nc, err := nats.Connect(url)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(nc.Close)
		if js, err = jetstream.New(nc); err != nil {
			t.Fatal(err)
		}
	}
	e, err := New(context.Background(), Options{JetStream: js, Now: now, FlushInterval: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	return e
}

// fixedClock is a settable clock.
type fixedClock struct{ t atomic.Int64 }

func newClock() *fixedClock {
	c := &fixedClock{}
	c.t.Store(time.Date(2026, 12, 2, 10, 0, 5, 0, time.UTC).UnixNano())
	return c
}
func (c *fixedClock) now() time.Time      { return time.Unix(0, c.t.Load()).UTC() }
func (c *fixedClock) add(d time.Duration) { c.t.Add(int64(d)) }

func refusal(t *testing.T, err error, want Reason) *Refusal {
	t.Helper()
	var r *Refusal
	if !errors.As(err, &r) || r.Reason != want {
		t.Fatalf("error %v, want a %s refusal", err, want)
	}
	return r
}

// await polls cond until it holds or 10 s pass.
func await(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestModelAllowList(t *testing.T) {
	e := newEngine(t, "", nil)
	s := Subject{TokenID: "t1", Principal: "alice", Policy: &auth.Policy{Models: []string{"anthropic/*", "openai/gpt-5"}}}
	for _, tt := range []struct {
		model string
		ok    bool
	}{{"anthropic/claude-sonnet-4-5", true}, {"openai/gpt-5", true}, {"openai/gpt-5-mini", false}, {"gemini/gemini-2.5-pro", false}, {"openrouter/anthropic/claude", false}} {
		tk, err := e.Check(context.Background(), s, tt.model)
		if tt.ok != (err == nil) {
			t.Errorf("Check(%s): %v, want allowed %v", tt.model, err, tt.ok)
		}
		if err != nil {
			if r := refusal(t, err, ReasonModel); r.RetryAfter != 0 {
				t.Errorf("model refusal has retry after %v", r.RetryAfter)
			}
		}
		tk.Done(context.Background(), 0, 0, tt.model)
	}
}

// TestBudgetCrossedByACall: a call admitted under the budget may cross it
// (its cost is known only after it); the next call is refused until the
// period renews; a soft budget refuses nothing.
func TestBudgetCrossedByACall(t *testing.T) {
	ctx := context.Background()
	clk := newClock()
	e := newEngine(t, "", clk.now)
	hard := Subject{TokenID: "hard", Principal: "alice", Policy: &auth.Policy{Budget: &auth.Budget{USDMicros: 1000, Period: auth.PeriodDay}}}
	soft := Subject{TokenID: "soft", Principal: "alice", Policy: &auth.Policy{Budget: &auth.Budget{USDMicros: 1000, Period: auth.PeriodDay, Soft: true}}}
	for _, s := range []Subject{hard, soft} {
		tk, err := e.Check(ctx, s, "m/x")
		if err != nil {
			t.Fatal(err)
		}
		tk.Done(ctx, 10, 1500, "m/x")
	}
	r := refusal(t, mustFail(e.Check(ctx, hard, "m/x")), ReasonBudget)
	if want := 14*time.Hour - 5*time.Second; r.RetryAfter != want {
		t.Errorf("retry after %v, want %v (the next UTC day)", r.RetryAfter, want)
	}
	if _, err := e.Check(ctx, soft, "m/x"); err != nil {
		t.Errorf("soft budget refused: %v", err)
	}
	if got := e.Spend("user", "alice", auth.PeriodMonth); got != 3000 {
		t.Errorf("alice spent %d, want 3000", got)
	}
	if got := e.Spend("model", "m/x", auth.PeriodMonth); got != 3000 {
		t.Errorf("model spent %d, want 3000", got)
	}
	clk.add(14 * time.Hour)
	if _, err := e.Check(ctx, hard, "m/x"); err != nil {
		t.Errorf("the next day: %v", err)
	}
}

func mustFail(_ *Ticket, err error) error { return err }

// TestRequestsPerMinuteConcurrent: 50 callers at once against 10 requests
// a minute, on one replica: exactly 10 admitted.
func TestRequestsPerMinuteConcurrent(t *testing.T) {
	url, _ := startNATS(t, t.TempDir())
	for _, tt := range []struct{ name, url string }{{"memory", ""}, {"nats", url}} {
		t.Run(tt.name, func(t *testing.T) {
			clk := newClock()
			e := newEngine(t, tt.url, clk.now)
			s := Subject{TokenID: "rpm-" + tt.name, Policy: &auth.Policy{RequestsPerMinute: 10, MaxConcurrent: 50}}
			var ok, limited atomic.Int32
			var wg sync.WaitGroup
			for range 50 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					tk, err := e.Check(context.Background(), s, "m/x")
					var r *Refusal
					switch {
					case err == nil:
						ok.Add(1)
						tk.Done(context.Background(), 0, 0, "m/x")
					case errors.As(err, &r) && r.Reason == ReasonRequests && r.RetryAfter == 55*time.Second:
						limited.Add(1)
					default:
						t.Errorf("unexpected: %v", err)
					}
				}()
			}
			wg.Wait()
			if ok.Load() != 10 || limited.Load() != 40 {
				t.Errorf("admitted %d, limited %d; want 10 and 40", ok.Load(), limited.Load())
			}
			clk.add(time.Minute)
			if _, err := e.Check(context.Background(), s, "m/x"); err != nil {
				t.Errorf("next minute: %v", err)
			}
		})
	}
}

func TestConcurrencyAndTokensPerMinute(t *testing.T) {
	ctx := context.Background()
	clk := newClock()
	e := newEngine(t, "", clk.now)
	s := Subject{TokenID: "c", Policy: &auth.Policy{MaxConcurrent: 2, TokensPerMinute: 100}}
	a, _ := e.Check(ctx, s, "m/x")
	b, _ := e.Check(ctx, s, "m/x")
	refusal(t, mustFail(e.Check(ctx, s, "m/x")), ReasonConcurrency)
	a.Done(ctx, 60, 0, "m/x")
	a.Done(ctx, 60, 0, "m/x") // twice: counted once
	c, err := e.Check(ctx, s, "m/x")
	if err != nil {
		t.Fatalf("after one ended: %v", err)
	}
	b.Done(ctx, 50, 0, "m/x")
	c.Done(ctx, 0, 0, "m/x")
	refusal(t, mustFail(e.Check(ctx, s, "m/x")), ReasonTokens)
	if u, _ := e.RateUsage(s); u.TokensRemaining != 0 || u.TokensLimit != 100 {
		t.Errorf("usage %+v", u)
	}
}

// TestSharedAcrossReplicas: two engines on one NATS; what one counts, the
// other refuses on.
func TestSharedAcrossReplicas(t *testing.T) {
	ctx := context.Background()
	url, _ := startNATS(t, t.TempDir())
	clk := newClock()
	a, b := newEngine(t, url, clk.now), newEngine(t, url, clk.now)
	s := Subject{TokenID: "shared", Principal: "bob", Policy: &auth.Policy{Budget: &auth.Budget{USDMicros: 5000, Period: auth.PeriodMonth}, RequestsPerMinute: 4}}
	for _, e := range []*Engine{a, b} {
		tk, err := e.Check(ctx, s, "m/x")
		if err != nil {
			t.Fatal(err)
		}
		tk.Done(ctx, 1, 2000, "m/x")
	}
	await(t, "both replicas to see 4000 spent", func() bool {
		return a.Spend("tok", "shared", auth.PeriodMonth) == 4000 && b.Spend("tok", "shared", auth.PeriodMonth) == 4000
	})
	await(t, "both replicas to see 2 requests", func() bool {
		ua, _ := a.RateUsage(s)
		ub, _ := b.RateUsage(s)
		return ua.RequestsRemaining == 2 && ub.RequestsRemaining == 2
	})
	tk, err := a.Check(ctx, s, "m/x")
	if err != nil {
		t.Fatal(err)
	}
	tk.Done(ctx, 1, 2000, "m/x") // 6000 > 5000
	await(t, "replica b to refuse", func() bool {
		_, err := b.Check(ctx, s, "m/x")
		var r *Refusal
		return errors.As(err, &r) && r.Reason == ReasonBudget
	})
}

// TestCompareAndSetUnderContention: increments from two replicas racing on
// one key all land.
func TestCompareAndSetUnderContention(t *testing.T) {
	ctx := context.Background()
	url, _ := startNATS(t, t.TempDir())
	a, b := newEngine(t, url, nil), newEngine(t, url, nil)
	s := Subject{TokenID: "race", Principal: "carol"}
	var wg sync.WaitGroup
	for _, e := range []*Engine{a, b} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 200 {
				tk, _ := e.Check(ctx, s, "m/x")
				tk.Done(ctx, 0, 3, "m/x")
				if err := e.Flush(ctx); err != nil {
					t.Error(err)
				}
			}
		}()
	}
	wg.Wait()
	await(t, "1200 on both", func() bool {
		return a.Spend("user", "carol", auth.PeriodMonth) == 1200 && b.Spend("user", "carol", auth.PeriodMonth) == 1200
	})
}

// TestStateSurvivesRestart: the gateway and NATS both restart; the spent
// token is refused by the new engine's first check.
func TestStateSurvivesRestart(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	url, stop := startNATS(t, dir)
	s := Subject{TokenID: "restart", Policy: &auth.Policy{Budget: &auth.Budget{USDMicros: 100, Period: auth.PeriodWeek}}}
	a := newEngine(t, url, nil)
	tk, err := a.Check(ctx, s, "m/x")
	if err != nil {
		t.Fatal(err)
	}
	tk.Done(ctx, 1, 150, "m/x")
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	stop()
	url, _ = startNATS(t, dir)
	b := newEngine(t, url, nil)
	refusal(t, mustFail(b.Check(ctx, s, "m/x")), ReasonBudget)
	if got := b.Spend("tok", "restart", auth.PeriodWeek); got != 150 {
		t.Errorf("spent %d after restart, want 150", got)
	}
}

// BenchmarkCheck is the governance cost per call (Check and Done) beside
// the same loop without governance, in one run; p50 is reported.
func BenchmarkCheck(b *testing.B) {
	ctx := context.Background()
	url, _ := startNATS(b, b.TempDir())
	policy := &auth.Policy{Budget: &auth.Budget{USDMicros: 1 << 60, Period: auth.PeriodMonth}, RequestsPerMinute: 1 << 30,
		TokensPerMinute: 1 << 60, MaxConcurrent: 1 << 20, Models: []string{"anthropic/*", "openai/*"}}
	for _, bb := range []struct {
		name string
		url  string
		s    *Subject
	}{
		{"baseline", "", nil},
		{"no-policy", url, &Subject{TokenID: "np", Principal: "alice"}},
		{"policy-memory", "", &Subject{TokenID: "pm", Principal: "alice", Policy: policy}},
		{"policy-nats", url, &Subject{TokenID: "pn", Principal: "alice", Policy: policy}},
		{"policy-and-principal-nats", url, &Subject{TokenID: "pp", Principal: "user:alice", Policy: policy, PrincipalPolicy: policy}},
	} {
		b.Run(bb.name, func(b *testing.B) {
			var e *Engine
			if bb.s != nil {
				e = newEngine(b, bb.url, nil)
			}
			lat := make([]time.Duration, 0, b.N)
			b.ResetTimer()
			for b.Loop() {
				t0 := time.Now()
				if e != nil {
					tk, err := e.Check(ctx, *bb.s, "anthropic/claude-sonnet-4-5")
					if err != nil {
						b.Fatal(err)
					}
					tk.Done(ctx, 1200, 4200, "anthropic/claude-sonnet-4-5")
				}
				lat = append(lat, time.Since(t0))
			}
			sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
			if len(lat) > 0 {
				b.ReportMetric(float64(lat[len(lat)/2].Nanoseconds()), "p50-ns")
			}
		})
	}
}
