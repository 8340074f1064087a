package llmgateway

import (
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/fabro-sh/fabro-go/platform/auth"
	"github.com/fabro-sh/fabro-go/services/llmgateway/fakeprovider"
)

// TestGovernancePrincipalLimits: the -llm-principal-limits file bounds a
// user's tokens together: with 3 requests a minute for user:alice, her
// two tokens make 3 calls between them and the fourth is the API's 429
// naming the principal, with no upstream request; bob is not limited.
func TestGovernancePrincipalLimits(t *testing.T) {
	file := filepath.Join(t.TempDir(), "principals.json")
	if err := os.WriteFile(file, []byte(`{"user:alice": {"rpm": 3}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	g := newGovernedStack(t, func(c *Config) { c.PrincipalLimitsFile = file })
	g.fp.Script(func(fakeprovider.Request) fakeprovider.Turn {
		return fakeprovider.Turn{Text: "ok", Usage: fakeprovider.Usage{Input: 1, Output: 1}}
	})
	a1, a2 := g.token(t, "alice", nil), g.token(t, "alice", &auth.Policy{RequestsPerMinute: 100})
	bob := g.token(t, "bob", nil)
	call := func(tok string) (*http.Response, string) {
		resp, body := post(t, g.base+"/anthropic/v1/messages", map[string]string{"x-api-key": tok, "anthropic-version": "2023-06-01"},
			`{"model":"anthropic/claude-sonnet-4.5","max_tokens":16,"messages":[{"role":"user","content":"hi"}]}`)
		return resp, string(body)
	}
	for i, tok := range []string{a1, a2, a1} {
		if resp, body := call(tok); resp.StatusCode != http.StatusOK {
			t.Fatalf("call %d: %d %s", i+1, resp.StatusCode, body)
		}
	}
	resp, body := call(a2)
	if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") == "" ||
		!strings.Contains(body, `"rate_limit_error"`) || !strings.Contains(body, "principal user:alice") {
		t.Errorf("alice's fourth call: %d Retry-After %q %s", resp.StatusCode, resp.Header.Get("Retry-After"), body)
	}
	// The headers show the tighter of the token's and the principal's.
	if got := resp.Header.Get("anthropic-ratelimit-requests-limit"); got != "3" {
		t.Errorf("anthropic-ratelimit-requests-limit = %q, want the principal's 3", got)
	}
	if resp, body := call(bob); resp.StatusCode != http.StatusOK {
		t.Errorf("bob: %d %s", resp.StatusCode, body)
	}
	if n := len(g.fp.Requests()); n != 4 {
		t.Errorf("%d upstream requests, want 4", n)
	}
}

func TestParsePrincipalLimits(t *testing.T) {
	got, err := ParsePrincipalLimits([]byte(`{"user:alice": {"budget": "100usd/month", "budget_warn": 90, "rpm": 120, "tpm": 200000,
		"max_concurrent": 8, "models": ["anthropic/*"]}, "service:ci": {"budget": "5usd/day", "budget_soft": true}}`))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]*auth.Policy{
		"user:alice": {Budget: &auth.Budget{USDMicros: 100_000_000, Period: auth.PeriodMonth, WarnPercent: 90}, RequestsPerMinute: 120,
			TokensPerMinute: 200000, MaxConcurrent: 8, Models: []string{"anthropic/*"}},
		"service:ci": {Budget: &auth.Budget{USDMicros: 5_000_000, Period: auth.PeriodDay, Soft: true}},
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("limits (-want +got):\n%s", d)
	}
	for _, tt := range []struct{ in, want string }{
		{`[]`, "want a JSON object"},
		{`{"alice": {"rpm": 1}}`, `"alice": a principal is ROLE:NAME`},
		{`{"user:alice": {"budget": "5eur/month"}}`, "user:alice: budget:"},
		{`{"user:alice": {"budget": "5usd/year"}}`, "the period must be day, week or month"},
		{`{"user:alice": {"budget_soft": true}}`, "budget_soft and budget_warn need a budget"},
		{`{"user:alice": {"budget": "5usd/day", "budget_warn": 101}}`, "warn_percent"},
		{`{"user:alice": {"rpm": -1}}`, "rpm must be"},
		{`{"user:alice": {"tpm": -1}}`, "tpm must be"},
		{`{"user:alice": {"max_concurrent": 9999999999}}`, "max_concurrent must be"},
		{`{"user:alice": {"models": [""]}}`, "user:alice: models:"},
		{`{"user:alice": {"rmp": 1}}`, `unknown field "rmp"`},
	} {
		if _, err := ParsePrincipalLimits([]byte(tt.in)); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: error %v, want one saying %q", tt.in, err, tt.want)
		}
	}
}

// BenchmarkGovernanceOverhead: one request at a time through the shipped
// server's Anthropic endpoint, alternately with a token without a policy
// (governance counts spend only) and with one whose token and principal
// both have every limit; reports both p50s, the difference and the ratio.
func BenchmarkGovernanceOverhead(b *testing.B) {
	file := filepath.Join(b.TempDir(), "principals.json")
	if err := os.WriteFile(file, []byte(`{"user:limited": {"budget": "1000000usd/month", "rpm": 1000000000, "tpm": 1000000000000, "max_concurrent": 1000, "models": ["anthropic/*"]}}`), 0o600); err != nil {
		b.Fatal(err)
	}
	g := newGovernedStack(b, func(c *Config) { c.PrincipalLimitsFile = file })
	g.fp.Script(func(fakeprovider.Request) fakeprovider.Turn {
		return fakeprovider.Turn{Text: "ok", Usage: fakeprovider.Usage{Input: 10, Output: 2}}
	})
	off := g.token(b, "free", nil)
	on := g.token(b, "limited", &auth.Policy{Budget: &auth.Budget{USDMicros: 1 << 50, Period: auth.PeriodMonth}, RequestsPerMinute: 1 << 30,
		TokensPerMinute: 1 << 50, MaxConcurrent: 1000, Models: []string{"anthropic/*"}})
	const body = `{"model":"anthropic/claude-sonnet-4.5","max_tokens":16,"messages":[{"role":"user","content":"hi"}]}`
	call := func(tok string) time.Duration {
		t0 := time.Now()
		resp, out := post(b, g.base+"/anthropic/v1/messages", map[string]string{"x-api-key": tok, "anthropic-version": "2023-06-01"}, body)
		d := time.Since(t0)
		if resp.StatusCode != http.StatusOK {
			b.Fatalf("%d %s", resp.StatusCode, out)
		}
		return d
	}
	for range 50 {
		call(off)
		call(on)
	}
	var offs, ons []time.Duration
	for b.Loop() {
		offs, ons = append(offs, call(off)), append(ons, call(on))
	}
	b.ReportMetric(us(pct(offs, .5)), "off-p50-µs")
	b.ReportMetric(us(pct(ons, .5)), "on-p50-µs")
	b.ReportMetric(us(pct(ons, .5)-pct(offs, .5)), "added-p50-µs")
	b.ReportMetric(float64(pct(ons, .5))/float64(pct(offs, .5)), "p50-ratio")
}
