package auth

import (
	"errors"
	"fmt"
	"math"
	"path"
	"strconv"
	"strings"
	"time"
)

// Policy is what the LLM gateway lets a token do: a budget, rate limits and
// the models it may call. The zero Policy limits nothing.
type Policy struct {
	Budget *Budget `json:"budget,omitempty"`
	// RequestsPerMinute bounds the calls started per minute.
	RequestsPerMinute int32 `json:"requests_per_minute,omitempty"`
	// TokensPerMinute bounds the tokens (input plus output) used per
	// minute, counted after each call.
	TokensPerMinute int64 `json:"tokens_per_minute,omitempty"`
	// MaxConcurrent bounds the calls in progress at once (per replica).
	MaxConcurrent int32 `json:"max_concurrent,omitempty"`
	// Models are canonical model names or patterns with '*'
	// ("anthropic/*"); empty means every model.
	Models []string `json:"models,omitempty"`
}

// Budget is an amount per calendar period (UTC).
type Budget struct {
	USDMicros int64  `json:"usd_micros"`
	Period    Period `json:"period"`
	// Soft budgets are reported when crossed; hard ones refuse calls.
	Soft bool `json:"soft,omitempty"`
	// WarnPercent is where a warning is given; 0 means DefaultWarnPercent.
	WarnPercent int32 `json:"warn_percent,omitempty"`
}

// DefaultWarnPercent is a budget's warning threshold when none is set.
const DefaultWarnPercent = 80

// Warn is the spend, in USD micros, at which b warns.
func (b *Budget) Warn() int64 {
	p := int64(b.WarnPercent)
	if p <= 0 {
		p = DefaultWarnPercent
	}
	return b.USDMicros / 100 * p
}

// Period is a budget's calendar period.
type Period string

// The periods.
const (
	PeriodDay   Period = "day"
	PeriodWeek  Period = "week"
	PeriodMonth Period = "month"
)

// Bounds returns the period holding t (UTC): its start, and the start of the
// next one. Weeks start on Monday.
func (p Period) Bounds(t time.Time) (start, end time.Time) {
	t = t.UTC()
	day := time.Date(t.Year(), t.Month(), t.Day(), 0, 0, 0, 0, time.UTC)
	switch p {
	case PeriodWeek:
		start = day.AddDate(0, 0, -((int(day.Weekday()) + 6) % 7))
		return start, start.AddDate(0, 0, 7)
	case PeriodMonth:
		start = time.Date(t.Year(), t.Month(), 1, 0, 0, 0, 0, time.UTC)
		return start, start.AddDate(0, 1, 0)
	}
	return day, day.AddDate(0, 0, 1)
}

func (p Period) valid() bool { return p == PeriodDay || p == PeriodWeek || p == PeriodMonth }

// ParseBudget parses an amount per period: "50usd/month", "2.5usd/day",
// "$10/week".
func ParseBudget(s string) (Budget, error) {
	amount, period, ok := strings.Cut(strings.ToLower(strings.TrimSpace(s)), "/")
	if !ok {
		return Budget{}, fmt.Errorf("budget %q: want AMOUNTusd/PERIOD, e.g. 50usd/month", s)
	}
	amount = strings.TrimPrefix(strings.TrimSuffix(amount, "usd"), "$")
	v, err := strconv.ParseFloat(amount, 64)
	if err != nil || !(v > 0) || v > 1e9 {
		return Budget{}, fmt.Errorf("budget %q: the amount must be a positive number of US dollars, e.g. 50usd/month", s)
	}
	b := Budget{USDMicros: int64(math.Round(v * 1e6)), Period: Period(period)}
	if !b.Period.valid() {
		return Budget{}, fmt.Errorf("budget %q: the period must be day, week or month", s)
	}
	return b, nil
}

// String formats b as ParseBudget reads it.
func (b Budget) String() string {
	return strconv.FormatFloat(float64(b.USDMicros)/1e6, 'f', -1, 64) + "usd/" + string(b.Period)
}

// Validate reports the first field of p that is not usable, by its name in
// TokenPolicy.
func (p *Policy) Validate() (field string, err error) {
	if p == nil {
		return "", nil
	}
	if b := p.Budget; b != nil {
		switch {
		case b.USDMicros <= 0:
			return "budget.amount_usd_micros", errors.New("a budget's amount must be positive")
		case !b.Period.valid():
			return "budget.period", errors.New("a budget needs a period: day, week or month")
		case b.WarnPercent < 0 || b.WarnPercent > 100:
			return "budget.warn_percent", errors.New("warn_percent must be 0 to 100")
		}
	}
	switch {
	case p.RequestsPerMinute < 0:
		return "requests_per_minute", errors.New("requests_per_minute must not be negative")
	case p.TokensPerMinute < 0:
		return "tokens_per_minute", errors.New("tokens_per_minute must not be negative")
	case p.MaxConcurrent < 0:
		return "max_concurrent_calls", errors.New("max_concurrent_calls must not be negative")
	}
	for _, m := range p.Models {
		if err := ValidModelPattern(m); err != nil {
			return "models", err
		}
	}
	return "", nil
}

// ValidModelPattern reports whether m is a model name or pattern a policy
// may list: "provider/model", '*' matching within a part.
func ValidModelPattern(m string) error {
	prov, model, ok := strings.Cut(m, "/")
	if !ok || prov == "" || model == "" || strings.ContainsAny(m, "?[]\\ ") || len(m) > 200 {
		return fmt.Errorf("model pattern %q: want provider/model, '*' as a wildcard (anthropic/*)", m)
	}
	if _, err := path.Match(m, ""); err != nil {
		return fmt.Errorf("model pattern %q: %v", m, err)
	}
	return nil
}

// AllowsModel reports whether p lets its token call the canonical model
// "provider/model". '*' matches any run of characters, '/' included, so
// "anthropic/*" covers models whose ids have slashes.
func (p *Policy) AllowsModel(canonical string) bool {
	if p == nil || len(p.Models) == 0 {
		return true
	}
	for _, m := range p.Models {
		if globMatch(m, canonical) {
			return true
		}
	}
	return false
}

// globMatch matches s against pattern, where '*' matches any run.
func globMatch(pattern, s string) bool {
	star := strings.IndexByte(pattern, '*')
	if star < 0 {
		return pattern == s
	}
	if !strings.HasPrefix(s, pattern[:star]) {
		return false
	}
	s, pattern = s[star:], pattern[star+1:]
	if pattern == "" {
		return true
	}
	for i := 0; i <= len(s); i++ {
		if globMatch(pattern, s[i:]) {
			return true
		}
	}
	return false
}

// Limited reports whether p limits anything.
func (p *Policy) Limited() bool {
	return p != nil && (p.Budget != nil || p.RequestsPerMinute > 0 || p.TokensPerMinute > 0 || p.MaxConcurrent > 0 || len(p.Models) > 0)
}

// GetModels is p's model list; nil for a nil policy.
func (p *Policy) GetModels() []string {
	if p == nil {
		return nil
	}
	return p.Models
}
