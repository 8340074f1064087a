package llmgateway

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"strings"

	"github.com/fabro-sh/fabro-go/platform/auth"
)

// principalLimit is one principal's entry in the -llm-principal-limits
// file, in the words of `fabro token create`'s flags.
type principalLimit struct {
	Budget        string   `json:"budget"` // "100usd/month"
	BudgetSoft    bool     `json:"budget_soft"`
	BudgetWarn    int      `json:"budget_warn"` // percent; 0: the default
	RPM           int64    `json:"rpm"`
	TPM           int64    `json:"tpm"`
	MaxConcurrent int64    `json:"max_concurrent"`
	Models        []string `json:"models"`
}

// LoadPrincipalLimits reads a principal limits file: a JSON object from
// principals ("user:alice") to their limits, which bound all of that
// principal's tokens together, each token's own policy still applying:
//
//	{"user:alice": {"budget": "100usd/month", "rpm": 120, "tpm": 200000,
//	  "max_concurrent": 8, "models": ["anthropic/*"]}}
//
// Errors name the principal and the field.
func LoadPrincipalLimits(path string) (map[string]*auth.Policy, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("principal limits: %w", err)
	}
	return ParsePrincipalLimits(b)
}

// ParsePrincipalLimits parses what LoadPrincipalLimits reads.
func ParsePrincipalLimits(b []byte) (map[string]*auth.Policy, error) {
	var raw map[string]principalLimit
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&raw); err != nil {
		return nil, fmt.Errorf("principal limits: want a JSON object of principals (\"user:alice\") to limits: %w", err)
	}
	out := make(map[string]*auth.Policy, len(raw))
	for who, l := range raw {
		role, name, ok := strings.Cut(who, ":")
		if !ok || role == "" || name == "" {
			return nil, fmt.Errorf("principal limits: %q: a principal is ROLE:NAME, e.g. user:alice", who)
		}
		p := &auth.Policy{}
		if l.Budget != "" {
			bu, err := auth.ParseBudget(l.Budget)
			if err != nil {
				return nil, fmt.Errorf("principal limits: %s: budget: %w", who, err)
			}
			bu.Soft, bu.WarnPercent = l.BudgetSoft, int32(max(0, min(l.BudgetWarn, math.MaxInt32)))
			p.Budget = &bu
		} else if l.BudgetSoft || l.BudgetWarn != 0 {
			return nil, fmt.Errorf("principal limits: %s: budget_soft and budget_warn need a budget", who)
		}
		switch {
		case l.RPM < 0 || l.RPM > math.MaxInt32:
			return nil, fmt.Errorf("principal limits: %s: rpm must be a number of requests per minute, not %d", who, l.RPM)
		case l.TPM < 0:
			return nil, fmt.Errorf("principal limits: %s: tpm must be a number of tokens per minute, not %d", who, l.TPM)
		case l.MaxConcurrent < 0 || l.MaxConcurrent > math.MaxInt32:
			return nil, fmt.Errorf("principal limits: %s: max_concurrent must be a number of calls, not %d", who, l.MaxConcurrent)
		}
		p.RequestsPerMinute, p.TokensPerMinute, p.MaxConcurrent = int32(l.RPM), l.TPM, int32(l.MaxConcurrent)
		for _, m := range l.Models {
			if err := auth.ValidModelPattern(m); err != nil {
				return nil, fmt.Errorf("principal limits: %s: models: %w", who, err)
			}
		}
		p.Models = l.Models
		if field, err := p.Validate(); err != nil {
			return nil, fmt.Errorf("principal limits: %s: %s: %w", who, field, err)
		}
		out[who] = p
	}
	return out, nil
}
