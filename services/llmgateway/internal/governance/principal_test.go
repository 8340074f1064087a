package governance

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/fabro-sh/fabro-go/platform/auth"
)

// TestPrincipalLimitsAcrossTokens: a principal's limits bound all of its
// tokens together (50 concurrent callers over three tokens), each token's
// own limit still applies, a call its principal refuses takes nothing from
// its token's count, and another principal is not touched.
func TestPrincipalLimitsAcrossTokens(t *testing.T) {
	url, _ := startNATS(t, t.TempDir())
	for _, tt := range []struct{ name, url string }{{"memory", ""}, {"nats", url}} {
		t.Run(tt.name, func(t *testing.T) {
			ctx := context.Background()
			clk := newClock()
			e := newEngine(t, tt.url, clk.now)
			alice := &auth.Policy{RequestsPerMinute: 12}
			subj := func(tok string, p *auth.Policy) Subject {
				return Subject{TokenID: tok, Principal: "user:alice", Policy: p, PrincipalPolicy: alice}
			}
			toks := []Subject{subj("a1", nil), subj("a2", nil), subj("a3", &auth.Policy{RequestsPerMinute: 2})}
			var ok, limited atomic.Int32
			var wg sync.WaitGroup
			for i := range 50 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					tk, err := e.Check(ctx, toks[i%3], "m/x")
					if err == nil {
						ok.Add(1)
						tk.Done(ctx, 0, 0, "m/x")
						return
					}
					r := refusal(t, err, ReasonRequests)
					if !strings.Contains(r.Message, "principal user:alice") && !strings.Contains(r.Message, "this token") {
						t.Errorf("refusal names neither: %q", r.Message)
					}
					limited.Add(1)
				}()
			}
			wg.Wait()
			if ok.Load() != 12 || limited.Load() != 38 {
				t.Errorf("admitted %d, limited %d; want 12 and 38 (the principal's 12 per minute)", ok.Load(), limited.Load())
			}
			if u, _ := e.RateUsage(toks[0]); u.RequestsLimit != 12 || u.RequestsRemaining != 0 {
				t.Errorf("a1's usage %+v: the principal's limit has none left", u)
			}
			// Another principal with the same kind of tokens: untouched.
			if _, err := e.Check(ctx, Subject{TokenID: "b1", Principal: "user:bob", PrincipalPolicy: &auth.Policy{RequestsPerMinute: 12}}, "m/x"); err != nil {
				t.Errorf("bob: %v", err)
			}
		})
	}
}

// TestPrincipalRefusalCountsNothing: a call refused by the principal's
// limit leaves the token's own window as it was.
func TestPrincipalRefusalCountsNothing(t *testing.T) {
	ctx := context.Background()
	clk := newClock()
	e := newEngine(t, "", clk.now)
	tokPolicy := &auth.Policy{RequestsPerMinute: 5}
	s := Subject{TokenID: "t", Principal: "user:carol", Policy: tokPolicy, PrincipalPolicy: &auth.Policy{MaxConcurrent: 1}}
	held, err := e.Check(ctx, s, "m/x")
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		r := refusal(t, mustFail(e.Check(ctx, s, "m/x")), ReasonConcurrency)
		if !strings.Contains(r.Message, "principal user:carol") {
			t.Errorf("message %q does not name the principal", r.Message)
		}
	}
	held.Done(ctx, 0, 0, "m/x")
	if u, _ := e.RateUsage(Subject{TokenID: "t", Policy: tokPolicy}); u.RequestsRemaining != 4 {
		t.Errorf("token's requests remaining %d, want 4 (only the admitted call counted)", u.RequestsRemaining)
	}
}

// TestPrincipalBudgetAndModels: spend of all a principal's tokens counts
// against its budget (in the budget's own period); its model list applies
// to a token without one.
func TestPrincipalBudgetAndModels(t *testing.T) {
	ctx := context.Background()
	clk := newClock()
	e := newEngine(t, "", clk.now)
	pp := &auth.Policy{Budget: &auth.Budget{USDMicros: 1000, Period: auth.PeriodDay}, Models: []string{"anthropic/*"}}
	a := Subject{TokenID: "d1", Principal: "user:dave", PrincipalPolicy: pp}
	b := Subject{TokenID: "d2", Principal: "user:dave", PrincipalPolicy: pp}
	r := refusal(t, mustFail(e.Check(ctx, a, "openai/gpt-5")), ReasonModel)
	if !strings.Contains(r.Message, "principal user:dave") || !strings.Contains(r.Message, "openai/gpt-5") {
		t.Errorf("message %q", r.Message)
	}
	tk, err := e.Check(ctx, a, "anthropic/claude")
	if err != nil {
		t.Fatal(err)
	}
	tk.Done(ctx, 10, 600, "anthropic/claude")
	tk, err = e.Check(ctx, b, "anthropic/claude")
	if err != nil {
		t.Fatalf("under the budget: %v", err)
	}
	tk.Done(ctx, 10, 600, "anthropic/claude") // crosses it: 1200 of 1000
	r = refusal(t, mustFail(e.Check(ctx, a, "anthropic/claude")), ReasonBudget)
	if !strings.Contains(r.Message, "principal user:dave") {
		t.Errorf("message %q", r.Message)
	}
	if got := e.Spend("user", "user:dave", auth.PeriodDay); got != 1200 {
		t.Errorf("day spend %d, want 1200", got)
	}
	if got := e.Spend("user", "user:dave", auth.PeriodMonth); got != 1200 {
		t.Errorf("month spend %d, want 1200 (still attributed by month)", got)
	}
	if got := e.Spend("tok", "d1", auth.PeriodMonth); got != 600 {
		t.Errorf("d1's spend %d, want 600", got)
	}
	clk.add(24 * 60 * 60 * 1e9) // the next day: the budget renews
	if _, err := e.Check(ctx, a, "anthropic/claude"); err != nil {
		t.Errorf("next day: %v", err)
	}
}
