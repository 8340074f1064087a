package catalog

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	llmv1 "github.com/fabro-sh/fabro-go/gen/fabro/llm/v1"
)

// Route is a resolved selector: where a request goes.
type Route struct {
	Provider *llmv1.Provider
	Model    *llmv1.Model
	// Passthrough is true for a model name the catalog does not know, sent
	// verbatim to a provider that allows it.
	Passthrough bool
}

// Canonical is "provider/model".
func (r Route) Canonical() string { return r.Provider.GetProviderId() + "/" + r.Model.GetModelId() }

// APIModel is the model name sent upstream.
func (r Route) APIModel() string {
	if m := r.Model.GetApiModel(); m != "" {
		return m
	}
	return r.Model.GetModelId()
}

// ErrEmptySelector is returned for an empty selector.
var ErrEmptySelector = errors.New("catalog: empty model selector")

// NotFoundError is an unknown selector, with near matches.
type NotFoundError struct {
	Selector string
	Hints    []string
}

func (e *NotFoundError) Error() string {
	msg := fmt.Sprintf("unknown model %q", e.Selector)
	if len(e.Hints) > 0 {
		msg += "; did you mean " + strings.Join(e.Hints, ", ") + "?"
	}
	return msg
}

// DisabledError is a selector naming a disabled provider or model.
type DisabledError struct {
	Selector string
	Provider string
	Model    string // empty when the provider is disabled
}

func (e *DisabledError) Error() string {
	if e.Model == "" {
		return fmt.Sprintf("model %q: provider %s is disabled in the catalog", e.Selector, e.Provider)
	}
	return fmt.Sprintf("model %q: %s/%s is disabled in the catalog", e.Selector, e.Provider, e.Model)
}

// Resolve resolves a selector: "provider/model" (model id, alias or
// upstream name within that provider), a model id, an alias, or a provider
// id (its default model). A bare id or alias offered by several providers
// picks the first enabled one by provider id.
func (c *Catalog) Resolve(selector string) (Route, error) {
	selector = strings.TrimSpace(selector)
	if selector == "" {
		return Route{}, ErrEmptySelector
	}
	if prov, name, ok := strings.Cut(selector, "/"); ok {
		p, ok := c.providers[prov]
		if !ok {
			return Route{}, &NotFoundError{Selector: selector, Hints: c.hints(selector)}
		}
		if !p.GetEnabled() {
			return Route{}, &DisabledError{Selector: selector, Provider: prov}
		}
		if m := c.inProvider(prov, name); m != nil {
			return c.route(selector, m)
		}
		if p.GetAllowPassthrough() && name != "" {
			return Route{Provider: p, Model: &llmv1.Model{ModelId: name, ProviderId: prov}, Passthrough: true}, nil
		}
		return Route{}, &NotFoundError{Selector: selector, Hints: c.hints(selector)}
	}
	for _, cands := range [][]*llmv1.Model{c.byID[selector], c.byAlias[selector]} {
		if len(cands) == 0 {
			continue
		}
		for _, m := range cands {
			if c.usable(m) {
				return c.route(selector, m)
			}
		}
		return c.route(selector, cands[0]) // all disabled: say so
	}
	if p, ok := c.providers[selector]; ok {
		if !p.GetEnabled() {
			return Route{}, &DisabledError{Selector: selector, Provider: p.GetProviderId()}
		}
		if d := p.GetDefaultModel(); d != "" {
			return c.Resolve(p.GetProviderId() + "/" + d)
		}
	}
	return Route{}, &NotFoundError{Selector: selector, Hints: c.hints(selector)}
}

// inProvider finds name among one provider's model ids, aliases and
// upstream names.
func (c *Catalog) inProvider(prov, name string) *llmv1.Model {
	if m, ok := c.models[prov+"/"+name]; ok {
		return m
	}
	for _, m := range c.sorted {
		if m.GetProviderId() == prov && (slices.Contains(m.GetAliases(), name) || m.GetApiModel() == name) {
			return m
		}
	}
	return nil
}

func (c *Catalog) route(selector string, m *llmv1.Model) (Route, error) {
	p := c.providers[m.GetProviderId()]
	if !p.GetEnabled() {
		return Route{}, &DisabledError{Selector: selector, Provider: p.GetProviderId()}
	}
	if !m.GetEnabled() {
		return Route{}, &DisabledError{Selector: selector, Provider: p.GetProviderId(), Model: m.GetModelId()}
	}
	return Route{Provider: p, Model: m}, nil
}

// hints returns up to 5 enabled selectors close to s: by edit distance, or
// sharing a prefix or substring.
func (c *Catalog) hints(s string) []string {
	type cand struct {
		sel  string
		dist int
	}
	low := strings.ToLower(s)
	_, bare, hasSlash := strings.Cut(low, "/")
	var cands []cand
	seen := map[string]bool{}
	add := func(sel, key string) {
		if seen[sel] {
			return
		}
		target := low
		if !hasSlash && strings.Contains(key, "/") {
			_, key, _ = strings.Cut(key, "/")
		}
		if hasSlash && !strings.Contains(key, "/") {
			target = bare
		}
		d := levenshtein(target, strings.ToLower(key))
		limit := max(2, len(target)/4)
		if d <= limit || (len(target) >= 3 && strings.Contains(strings.ToLower(key), target)) {
			seen[sel] = true
			cands = append(cands, cand{sel, d})
		}
	}
	for _, m := range c.sorted {
		if !c.usable(m) {
			continue
		}
		full := m.GetProviderId() + "/" + m.GetModelId()
		add(full, full)
		for _, a := range m.GetAliases() {
			add(a, a)
		}
	}
	slices.SortStableFunc(cands, func(a, b cand) int {
		if a.dist != b.dist {
			return a.dist - b.dist
		}
		return cmpStrings(a.sel, b.sel)
	})
	var out []string
	for _, cd := range cands {
		if len(out) == 5 {
			break
		}
		out = append(out, cd.sel)
	}
	return out
}

// levenshtein is the edit distance between a and b, by bytes.
func levenshtein(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
