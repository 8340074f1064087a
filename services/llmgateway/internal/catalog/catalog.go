// Package catalog holds the gateway's providers and models: a built-in
// catalog embedded in the binary with an operator overlay on top, and the
// resolution of a model selector to one provider and model.
//
// A catalog file is JSON with two tables keyed by id:
//
//	{"providers": {"<id>": <fabro.llm.v1.Provider as protojson>},
//	 "models":    {"<provider>/<model id>": <fabro.llm.v1.Model as protojson>}}
//
// Layers merge key by key, later wins: an overlay entry for an existing id
// changes only the fields it names (objects such as extraHeaders merge too,
// lists are replaced), and a null entry or field removes it. Entries that
// do not say "enabled" are enabled.
package catalog

import (
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"os"
	"slices"
	"strings"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	llmv1 "github.com/fabro-sh/fabro-go/gen/fabro/llm/v1"
)

//go:embed catalog.json
var builtin []byte

// Catalog is an immutable, validated set of providers and models.
type Catalog struct {
	providers map[string]*llmv1.Provider
	models    map[string]*llmv1.Model   // by "provider/id"
	byID      map[string][]*llmv1.Model // by model id, sorted by provider
	byAlias   map[string][]*llmv1.Model // by alias, sorted by provider
	sorted    []*llmv1.Model            // by provider, then id
	defaults  Defaults
	checked   string
	// configured are the providers a layer after the first (the
	// operator's overlay) names.
	configured map[string]bool
}

// Configured reports whether the operator's overlay names the provider,
// as against one the built-in catalog lists for everybody (Ollama and vLLM
// on their default local ports, for one).
func (c *Catalog) Configured(id string) bool { return c.configured[id] }

// Defaults returns the catalog's named models (later layers override each
// field they set).
func (c *Catalog) Defaults() Defaults { return c.defaults }

// Checked is the date the catalog's data was last checked.
func (c *Catalog) Checked() string { return c.checked }

// Load returns the built-in catalog with the overlay file on top; an empty
// path means no overlay.
func Load(overlayPath string) (*Catalog, error) {
	layers := [][]byte{builtin}
	if overlayPath != "" {
		b, err := os.ReadFile(overlayPath)
		if err != nil {
			return nil, fmt.Errorf("catalog overlay: %w", err)
		}
		layers = append(layers, b)
	}
	return Parse(layers...)
}

// file is a catalog layer before merging.
type file struct {
	Providers map[string]json.RawMessage `json:"providers"`
	Models    map[string]json.RawMessage `json:"models"`
	// Checked is the date the data was last checked against the
	// providers' documentation; Defaults names the agent's models.
	Checked  string    `json:"checked"`
	Defaults *Defaults `json:"defaults"`
}

// Defaults are the models the catalog, not the agent's code, names: the
// default model, the small model for summaries and prompts over fetched
// pages, and the probe model. Each is a selector.
type Defaults struct {
	Model      string `json:"model"`
	SmallModel string `json:"smallModel"`
	ProbeModel string `json:"probeModel"`
}

// Parse merges the layers, in order, into a catalog and validates it.
func Parse(layers ...[]byte) (*Catalog, error) {
	providers := map[string]map[string]any{}
	models := map[string]map[string]any{}
	var defaults Defaults
	var checked string
	configured := map[string]bool{}
	for i, layer := range layers {
		var f file
		if err := json.Unmarshal(layer, &f); err != nil {
			return nil, fmt.Errorf("catalog layer %d: %w", i, err)
		}
		if f.Checked != "" {
			checked = f.Checked
		}
		if d := f.Defaults; d != nil {
			defaults.Model = cmpOr(d.Model, defaults.Model)
			defaults.SmallModel = cmpOr(d.SmallModel, defaults.SmallModel)
			defaults.ProbeModel = cmpOr(d.ProbeModel, defaults.ProbeModel)
		}
		if i > 0 {
			for id := range f.Providers {
				configured[id] = true
			}
		}
		if err := mergeTable(providers, f.Providers); err != nil {
			return nil, fmt.Errorf("catalog layer %d providers: %w", i, err)
		}
		if err := mergeTable(models, f.Models); err != nil {
			return nil, fmt.Errorf("catalog layer %d models: %w", i, err)
		}
	}

	c := &Catalog{
		defaults:   defaults,
		checked:    checked,
		configured: configured,
		providers:  map[string]*llmv1.Provider{},
		models:     map[string]*llmv1.Model{},
		byID:       map[string][]*llmv1.Model{},
		byAlias:    map[string][]*llmv1.Model{},
	}
	for id, fields := range providers {
		if id == "" || strings.Contains(id, "/") {
			return nil, fmt.Errorf("catalog: provider id %q must be non-empty without '/'", id)
		}
		p := &llmv1.Provider{}
		if err := decode(fields, p); err != nil {
			return nil, fmt.Errorf("catalog: provider %s: %w", id, err)
		}
		p.ProviderId = id
		if err := validateProvider(p); err != nil {
			return nil, fmt.Errorf("catalog: provider %s: %w", id, err)
		}
		c.providers[id] = p
	}
	for key, fields := range models {
		prov, id, ok := strings.Cut(key, "/")
		if !ok || prov == "" || id == "" || strings.Contains(id, "/") {
			return nil, fmt.Errorf("catalog: model key %q must be \"provider/model\" with no other '/'", key)
		}
		m := &llmv1.Model{}
		if err := decode(fields, m); err != nil {
			return nil, fmt.Errorf("catalog: model %s: %w", key, err)
		}
		m.ModelId, m.ProviderId = id, prov
		if _, ok := c.providers[prov]; !ok {
			return nil, fmt.Errorf("catalog: model %s: unknown provider %q", key, prov)
		}
		c.models[key] = m
		c.sorted = append(c.sorted, m)
		c.byID[id] = append(c.byID[id], m)
		for _, a := range m.GetAliases() {
			c.byAlias[a] = append(c.byAlias[a], m)
		}
	}
	byProviderID := func(a, b *llmv1.Model) int {
		return cmpStrings(a.GetProviderId()+"/"+a.GetModelId(), b.GetProviderId()+"/"+b.GetModelId())
	}
	slices.SortFunc(c.sorted, byProviderID)
	for _, l := range c.byID {
		slices.SortFunc(l, byProviderID)
	}
	for _, l := range c.byAlias {
		slices.SortFunc(l, byProviderID)
	}
	for _, p := range c.providers {
		if d := p.GetDefaultModel(); d != "" {
			if _, ok := c.models[p.GetProviderId()+"/"+d]; !ok && !p.GetAllowPassthrough() {
				return nil, fmt.Errorf("catalog: provider %s: default model %q is not in the catalog", p.GetProviderId(), d)
			}
		}
	}
	return c, nil
}

func cmpStrings(a, b string) int { return strings.Compare(a, b) }

// mergeTable merges a layer's entries into dst: a null entry deletes it.
func mergeTable(dst map[string]map[string]any, layer map[string]json.RawMessage) error {
	for key, raw := range layer {
		var v any
		if err := json.Unmarshal(raw, &v); err != nil {
			return fmt.Errorf("%s: %w", key, err)
		}
		switch v := v.(type) {
		case nil:
			delete(dst, key)
		case map[string]any:
			if cur, ok := dst[key]; ok {
				mergeObject(cur, v)
			} else {
				if _, ok := v["enabled"]; !ok {
					v["enabled"] = true
				}
				dst[key] = v
			}
		default:
			return fmt.Errorf("%s: want an object", key)
		}
	}
	return nil
}

// mergeObject merges src into dst: objects merge recursively, anything else
// replaces, and null deletes.
func mergeObject(dst, src map[string]any) {
	for k, v := range src {
		switch v := v.(type) {
		case nil:
			delete(dst, k)
		case map[string]any:
			if cur, ok := dst[k].(map[string]any); ok {
				mergeObject(cur, v)
				continue
			}
			dst[k] = v
		default:
			dst[k] = v
		}
	}
}

func decode(fields map[string]any, m proto.Message) error {
	b, err := json.Marshal(fields)
	if err != nil {
		return err
	}
	return protojson.Unmarshal(b, m)
}

func validateProvider(p *llmv1.Provider) error {
	if p.GetCodec() == llmv1.Codec_CODEC_UNSPECIFIED {
		return errors.New("codec is required")
	}
	// "{region}" is a placeholder the Bedrock codec fills from AWS_REGION.
	u, err := url.Parse(strings.ReplaceAll(p.GetBaseUrl(), "{region}", "region"))
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("base URL %q must be an absolute http(s) URL", p.GetBaseUrl())
	}
	switch p.GetAuth().GetScheme() {
	case llmv1.AuthScheme_AUTH_SCHEME_NONE:
	case llmv1.AuthScheme_AUTH_SCHEME_HEADER:
		if p.GetAuth().GetHeaderName() == "" {
			return errors.New("auth scheme HEADER needs headerName")
		}
		fallthrough
	case llmv1.AuthScheme_AUTH_SCHEME_BEARER, llmv1.AuthScheme_AUTH_SCHEME_AWS_SIGV4:
		if len(p.GetAuth().GetCredentialNames()) == 0 {
			return errors.New("auth needs credentialNames")
		}
	default:
		return errors.New("auth scheme is required")
	}
	return nil
}

// Provider returns the provider with id, enabled or not.
func (c *Catalog) Provider(id string) (*llmv1.Provider, bool) {
	p, ok := c.providers[id]
	return p, ok
}

// Providers returns the providers sorted by id.
func (c *Catalog) Providers(includeDisabled bool) []*llmv1.Provider {
	var out []*llmv1.Provider
	for _, p := range c.providers {
		if includeDisabled || p.GetEnabled() {
			out = append(out, p)
		}
	}
	slices.SortFunc(out, func(a, b *llmv1.Provider) int { return cmpStrings(a.GetProviderId(), b.GetProviderId()) })
	return out
}

// Models returns the models sorted by provider then id, optionally only
// those of one provider. A model counts as disabled when its provider is.
func (c *Catalog) Models(provider string, includeDisabled bool) []*llmv1.Model {
	var out []*llmv1.Model
	for _, m := range c.sorted {
		if provider != "" && m.GetProviderId() != provider {
			continue
		}
		if includeDisabled || c.usable(m) {
			out = append(out, m)
		}
	}
	return out
}

func (c *Catalog) usable(m *llmv1.Model) bool {
	return m.GetEnabled() && c.providers[m.GetProviderId()].GetEnabled()
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}
