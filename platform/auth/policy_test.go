package auth_test

import (
	"path/filepath"
	"testing"
	"time"

	gocmp "github.com/google/go-cmp/cmp"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/testing/protocmp"

	authv1 "github.com/fabro-sh/fabro-go/gen/fabro/auth/v1"
	"github.com/fabro-sh/fabro-go/platform/auth"
)

// TestTokenPolicyRoundTrip: a policy given to CreateToken is kept in the
// store, returned by GetToken, and served to the gateway by token id.
func TestTokenPolicyRoundTrip(t *testing.T) {
	store := auth.OpenStore(filepath.Join(t.TempDir(), "tokens.json"))
	ts := auth.NewTokenService(store)
	want := &authv1.TokenPolicy{Budget: &authv1.Budget{AmountUsdMicros: 50_000_000, Period: authv1.BudgetPeriod_BUDGET_PERIOD_MONTH, WarnPercent: 90},
		RequestsPerMinute: 60, TokensPerMinute: 1000, MaxConcurrentCalls: 3, Models: []string{"anthropic/*"}}
	resp, err := ts.CreateToken(t.Context(), &authv1.CreateTokenRequest{Role: authv1.Role_ROLE_USER, Name: "bot", Policy: want})
	if err != nil {
		t.Fatal(err)
	}
	got, err := ts.GetToken(t.Context(), &authv1.GetTokenRequest{TokenId: resp.GetToken().GetTokenId()})
	if err != nil {
		t.Fatal(err)
	}
	if d := gocmp.Diff(want, got.GetToken().GetPolicy(), protocmp.Transform()); d != "" {
		t.Errorf("policy (-want +got):\n%s", d)
	}
	p := auth.OpenStore(store.Path()).Policy(resp.GetToken().GetTokenId())
	if p == nil || p.Budget.USDMicros != 50_000_000 || !p.AllowsModel("anthropic/claude-opus-4") || p.AllowsModel("openai/gpt-5") {
		t.Errorf("store policy %+v", p)
	}
	plain, _ := ts.CreateToken(t.Context(), &authv1.CreateTokenRequest{Role: authv1.Role_ROLE_USER, Name: "plain"})
	if store.Policy(plain.GetToken().GetTokenId()) != nil || plain.GetToken().GetPolicy() != nil {
		t.Error("a token without a policy has one")
	}
}

func TestTokenPolicyInvalid(t *testing.T) {
	ts := auth.NewTokenService(auth.OpenStore(filepath.Join(t.TempDir(), "tokens.json")))
	for _, tt := range []struct {
		field  string
		policy *authv1.TokenPolicy
	}{
		{"policy.budget.period", &authv1.TokenPolicy{Budget: &authv1.Budget{AmountUsdMicros: 5}}},
		{"policy.budget.amount_usd_micros", &authv1.TokenPolicy{Budget: &authv1.Budget{Period: authv1.BudgetPeriod_BUDGET_PERIOD_DAY}}},
		{"policy.budget.warn_percent", &authv1.TokenPolicy{Budget: &authv1.Budget{AmountUsdMicros: 5, Period: authv1.BudgetPeriod_BUDGET_PERIOD_DAY, WarnPercent: 101}}},
		{"policy.requests_per_minute", &authv1.TokenPolicy{RequestsPerMinute: -1}},
		{"policy.models", &authv1.TokenPolicy{Models: []string{"gpt-5"}}},
	} {
		_, err := ts.CreateToken(t.Context(), &authv1.CreateTokenRequest{Role: authv1.Role_ROLE_USER, Name: "x", Policy: tt.policy})
		if status.Code(err) != codes.InvalidArgument || fieldOf(err) != tt.field {
			t.Errorf("%s: %v", tt.field, err)
		}
	}
}

func TestParseBudgetAndPeriods(t *testing.T) {
	b, err := auth.ParseBudget("50usd/month")
	if err != nil || b.USDMicros != 50_000_000 || b.Period != auth.PeriodMonth || b.String() != "50usd/month" {
		t.Errorf("%+v %v", b, err)
	}
	for _, bad := range []string{"", "50", "-1usd/day", "0usd/day", "fiveusd/day", "5usd/year", "NaNusd/day"} {
		if _, err := auth.ParseBudget(bad); err == nil {
			t.Errorf("ParseBudget(%q) accepted", bad)
		}
	}
	wed := time.Date(2026, 12, 2, 15, 0, 0, 0, time.UTC)
	for _, tt := range []struct {
		p          auth.Period
		start, end string
	}{{auth.PeriodDay, "2026-12-02", "2026-12-03"}, {auth.PeriodWeek, "2026-11-30", "2026-12-07"}, {auth.PeriodMonth, "2026-12-01", "2027-01-01"}} {
		s, e := tt.p.Bounds(wed)
		if s.Format(time.DateOnly) != tt.start || e.Format(time.DateOnly) != tt.end {
			t.Errorf("%s: %v %v", tt.p, s, e)
		}
	}
}

func fieldOf(err error) string {
	for _, d := range status.Convert(err).Details() {
		if br, ok := d.(*errdetails.BadRequest); ok && len(br.GetFieldViolations()) > 0 {
			return br.GetFieldViolations()[0].GetField()
		}
	}
	return ""
}
