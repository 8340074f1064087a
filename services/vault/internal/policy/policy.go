// Package policy decides which calling service may resolve which secret.
// Everything is denied unless a rule allows it, and a deny pattern beats an
// allow pattern.
package policy

import (
	"encoding/json"
	"fmt"
	"os"
	"path"
	"slices"
)

// Rule lists the name patterns (path.Match syntax, e.g. "*_API_KEY") one
// service may and may not resolve.
type Rule struct {
	Allow []string `json:"allow"`
	Deny  []string `json:"deny,omitempty"`
}

// Policy maps a service identity to its rule.
type Policy map[string]Rule

// Default is what each of fabro's own services needs: the gateway reads
// provider keys, the agent its web search key, the sandbox its cloud key.
func Default() Policy {
	return Policy{
		"llmgateway": {Allow: []string{"*_API_KEY", "AWS_*"}, Deny: []string{"DAYTONA_*", "BRAVE_SEARCH_API_KEY"}},
		"agent":      {Allow: []string{"BRAVE_SEARCH_API_KEY"}},
		"sandbox":    {Allow: []string{"DAYTONA_*"}},
	}
}

// Load reads a policy from a JSON file shaped like
// {"llmgateway": {"allow": ["*_API_KEY"], "deny": []}}.
func Load(file string) (Policy, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("read policy: %w", err)
	}
	var p Policy
	if err := json.Unmarshal(data, &p); err != nil {
		return nil, fmt.Errorf("parse policy %s: %w", file, err)
	}
	return p, p.Validate()
}

// Validate checks that every pattern is well formed.
func (p Policy) Validate() error {
	for svc, r := range p {
		for _, pat := range slices.Concat(r.Allow, r.Deny) {
			if _, err := path.Match(pat, ""); err != nil {
				return fmt.Errorf("policy for %s: bad pattern %q: %w", svc, pat, err)
			}
		}
	}
	return nil
}

// Allows reports whether service may resolve name.
func (p Policy) Allows(service, name string) bool {
	r, ok := p[service]
	if !ok {
		return false
	}
	return matchAny(r.Allow, name) && !matchAny(r.Deny, name)
}

func matchAny(patterns []string, name string) bool {
	for _, pat := range patterns {
		if ok, _ := path.Match(pat, name); ok {
			return true
		}
	}
	return false
}
