package llmgateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	llmv1 "github.com/fabro-sh/fabro-go/gen/fabro/llm/v1"
	"github.com/fabro-sh/fabro-go/services/llmgateway/internal/catalog"
)

// Discovery defaults.
const (
	// DefaultDiscoveryTTL is how long a provider's live model list is kept
	// before the background refresh fetches it again.
	DefaultDiscoveryTTL = 5 * time.Minute
	// DefaultDiscoveryWait is how long ListModels waits for a provider's
	// first list; after it, the catalog's models are answered with a
	// warning and the fetch goes on in the background.
	DefaultDiscoveryWait  = 2 * time.Second
	discoveryFetchTimeout = 15 * time.Second
	// A failed fetch is tried again after discoveryRetryMin, doubling
	// with each failure up to discoveryRetryMax (or the TTL, if shorter):
	// an Ollama started after the gateway is seen within seconds, and a
	// host that stays down is not asked on every call.
	discoveryRetryMin = 2 * time.Second
	discoveryRetryMax = time.Minute
)

// discovery keeps the live model lists of discoverable providers. One
// goroutine refreshes them every TTL; ListModels reads the cache and, for a
// provider never fetched, waits a little for its first fetch. It owns the
// cache; the refresher exits when stop is called.
type discovery struct {
	logger *slog.Logger
	http   *http.Client
	creds  func(context.Context, *llmv1.Provider) (map[string]string, error)
	ttl    time.Duration
	wait   time.Duration

	mu      sync.Mutex
	entries map[string]*discovered // by provider id

	once   sync.Once
	life   context.Context // ends at stop: every fetch runs under it
	cancel context.CancelFunc
	wg     sync.WaitGroup // the refresher and first fetches
}

// discovered is one provider's last fetch; ready closes when the first
// fetch ends.
type discovered struct {
	models   []*llmv1.Model
	err      error
	failures int // fetches failed in a row
	fetched  time.Time
	ready    chan struct{}
	running  bool
}

// due reports whether the entry's last fetch is old enough to fetch again:
// a TTL after a success, a short backoff after a failure.
func (e *discovered) due(ttl time.Duration) bool {
	if e.fetched.IsZero() {
		return true
	}
	wait := ttl
	if e.err != nil {
		wait = min(ttl, discoveryRetryMax, discoveryRetryMin<<min(e.failures-1, 10))
	}
	return time.Since(e.fetched) >= wait
}

func newDiscovery(logger *slog.Logger, client *http.Client, creds func(context.Context, *llmv1.Provider) (map[string]string, error), ttl, wait time.Duration) *discovery {
	if ttl <= 0 {
		ttl = DefaultDiscoveryTTL
	}
	if wait <= 0 {
		wait = DefaultDiscoveryWait
	}
	d := &discovery{logger: logger, http: client, creds: creds, ttl: ttl, wait: wait, entries: map[string]*discovered{}}
	d.life, d.cancel = context.WithCancel(context.Background())
	return d
}

// start refreshes providers every TTL until stop; started by the first
// ListModels, so a gateway nobody asks for models contacts no provider.
func (d *discovery) start(providers []*llmv1.Provider) {
	d.once.Do(func() { d.run(providers) })
}

func (d *discovery) run(providers []*llmv1.Provider) {
	if len(providers) == 0 {
		return
	}
	d.wg.Go(func() {
		t := time.NewTicker(d.ttl)
		defer t.Stop()
		for {
			var round sync.WaitGroup
			for _, p := range providers { // one slow provider delays no other
				round.Go(func() { d.refresh(d.life, p) })
			}
			round.Wait()
			select {
			case <-d.life.Done():
				return
			case <-t.C:
			}
		}
	})
}

func (d *discovery) stop() {
	d.once.Do(func() {}) // no refresher after stop
	d.cancel()
	d.wg.Wait()
}

// entry returns the provider's entry, creating it (and starting a first
// fetch in the background) when missing or stale.
func (d *discovery) entry(p *llmv1.Provider) *discovered {
	d.mu.Lock()
	defer d.mu.Unlock()
	e := d.entries[p.GetProviderId()]
	if e == nil {
		e = &discovered{ready: make(chan struct{})}
		d.entries[p.GetProviderId()] = e
	}
	if !e.running && e.due(d.ttl) && d.life.Err() == nil {
		e.running = true
		d.wg.Go(func() { d.fetchInto(d.life, p, e) })
	}
	return e
}

// refresh fetches now, unless a fetch is already running.
func (d *discovery) refresh(ctx context.Context, p *llmv1.Provider) {
	d.mu.Lock()
	e := d.entries[p.GetProviderId()]
	if e == nil {
		e = &discovered{ready: make(chan struct{})}
		d.entries[p.GetProviderId()] = e
	}
	if e.running || (e.err == nil && !e.fetched.IsZero() && time.Since(e.fetched) < d.ttl/2) { // running, or fresh
		d.mu.Unlock()
		return
	}
	e.running = true
	d.mu.Unlock()
	d.fetchInto(ctx, p, e)
}

func (d *discovery) fetchInto(ctx context.Context, p *llmv1.Provider, e *discovered) {
	ctx, cancel := context.WithTimeout(ctx, discoveryFetchTimeout)
	defer cancel()
	models, err := d.fetch(ctx, p)
	if err != nil {
		d.logger.WarnContext(ctx, "model discovery failed", "provider", p.GetProviderId(), "error", err)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	e.running = false
	e.fetched = time.Now()
	e.err = err
	if err == nil {
		e.models, e.failures = models, 0
	} else {
		e.failures++
	}
	select {
	case <-e.ready:
	default:
		close(e.ready)
	}
}

// models returns a provider's discovered models, waiting up to the
// discovery wait for a first fetch; a warning when they are unknown or
// stale. With quiet, a provider that cannot be reached and never answered
// gets no warning (a built-in local provider that is simply not running).
func (d *discovery) models(ctx context.Context, p *llmv1.Provider, quiet bool) ([]*llmv1.Model, string) {
	st := d.state(ctx, p)
	switch {
	case st.pending:
		return nil, fmt.Sprintf("provider %s: live model list not fetched yet (still trying); listing the catalog's models", p.GetProviderId())
	case st.err == nil:
		return st.models, ""
	case quiet && st.unreachable && st.models == nil:
		return nil, ""
	}
	w := fmt.Sprintf("provider %s: model discovery failed: %v", p.GetProviderId(), st.err)
	if st.models != nil {
		w += " (listing the last list fetched)"
	}
	return st.models, w
}

// discoveryState is what discovery knows of one provider.
type discoveryState struct {
	models      []*llmv1.Model // the last list fetched
	err         error          // the last fetch's error
	pending     bool           // no fetch has ended yet
	unreachable bool           // err is a failure to connect, not an answer
}

// state is the provider's discovery state, waiting up to the discovery
// wait for a first fetch.
func (d *discovery) state(ctx context.Context, p *llmv1.Provider) discoveryState {
	e := d.entry(p)
	t := time.NewTimer(d.wait)
	defer t.Stop()
	select {
	case <-e.ready:
	case <-t.C:
	case <-ctx.Done():
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	select {
	case <-e.ready:
	default:
		return discoveryState{pending: true}
	}
	return discoveryState{models: e.models, err: e.err, unreachable: unreachable(e.err)}
}

// unreachable reports whether err is a failure to reach a host (refused,
// no route, no such host, timed out connecting), not an answer from it.
func unreachable(err error) bool {
	var op *net.OpError
	var dns *net.DNSError
	return errors.As(err, &op) && op.Op == "dial" || errors.As(err, &dns)
}

// lookup finds a discovered model by id without waiting.
func (d *discovery) lookup(provider, id string) *llmv1.Model {
	d.mu.Lock()
	defer d.mu.Unlock()
	e := d.entries[provider]
	if e == nil {
		return nil
	}
	for _, m := range e.models {
		if m.GetModelId() == id {
			return m
		}
	}
	return nil
}

// fetch lists a provider's models in its discovery protocol. Its error
// never carries a credential the provider echoed.
func (d *discovery) fetch(ctx context.Context, p *llmv1.Provider) (_ []*llmv1.Model, err error) {
	base, err := url.Parse(p.GetBaseUrl())
	if err != nil {
		return nil, err
	}
	var u string
	switch p.GetDiscovery() {
	case llmv1.Discovery_DISCOVERY_OLLAMA_TAGS:
		// Ollama's native API is at the host root, beside /v1.
		u = base.Scheme + "://" + base.Host + "/api/tags"
	case llmv1.Discovery_DISCOVERY_OPENAI_MODELS:
		u = strings.TrimRight(p.GetBaseUrl(), "/") + "/models"
	default:
		return nil, nil
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, err
	}
	if p.GetAuth().GetScheme() == llmv1.AuthScheme_AUTH_SCHEME_BEARER || p.GetAuth().GetScheme() == llmv1.AuthScheme_AUTH_SCHEME_HEADER {
		creds, cerr := d.creds(ctx, p)
		if cerr != nil {
			return nil, cerr
		}
		defer func() { err = redactPlainError(err, creds) }()
		for _, n := range p.GetAuth().GetCredentialNames() {
			if v := creds[n]; v != "" {
				if p.GetAuth().GetScheme() == llmv1.AuthScheme_AUTH_SCHEME_BEARER {
					req.Header.Set("Authorization", "Bearer "+v)
				} else {
					req.Header.Set(p.GetAuth().GetHeaderName(), v)
				}
				break
			}
		}
	}
	resp, err := d.http.Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return nil, fmt.Errorf("GET %s: %w", u, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 8<<20))
	if err != nil {
		return nil, fmt.Errorf("GET %s: %w", u, err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s", u, resp.Status)
	}
	var ids []string
	if p.GetDiscovery() == llmv1.Discovery_DISCOVERY_OLLAMA_TAGS {
		var tags struct {
			Models []struct {
				Name  string `json:"name"`
				Model string `json:"model"`
			} `json:"models"`
		}
		if err := json.Unmarshal(body, &tags); err != nil {
			return nil, fmt.Errorf("GET %s: not Ollama's tags list: %v", u, err)
		}
		for _, m := range tags.Models {
			ids = append(ids, cmpOr(m.Name, m.Model))
		}
	} else {
		var list struct {
			Data []struct {
				ID string `json:"id"`
			} `json:"data"`
		}
		if err := json.Unmarshal(body, &list); err != nil {
			return nil, fmt.Errorf("GET %s: not an OpenAI model list: %v", u, err)
		}
		for _, m := range list.Data {
			ids = append(ids, m.ID)
		}
	}
	var out []*llmv1.Model
	for _, id := range ids {
		// A model id is one path segment of a selector: no '/' (Ollama's
		// namespaced "user/model" tags are reachable by passthrough).
		if id == "" || strings.Contains(id, "/") || len(id) > 256 {
			continue
		}
		out = append(out, &llmv1.Model{ModelId: id, ProviderId: p.GetProviderId(), DisplayName: id, Enabled: true, Discovered: true})
	}
	slices.SortFunc(out, func(a, b *llmv1.Model) int { return strings.Compare(a.GetModelId(), b.GetModelId()) })
	return out, nil
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// listModels is the catalog's models with each discoverable provider's live
// ones beside them (a live model the catalog lists is not repeated).
func (s *Service) listModels(ctx context.Context, provider string, includeDisabled bool) ([]*llmv1.Model, []string) {
	models := s.cat.Models(provider, includeDisabled)
	if s.disc == nil {
		return models, nil
	}
	var all, provs []*llmv1.Provider
	for _, p := range s.cat.Providers(false) {
		if p.GetDiscovery() != llmv1.Discovery_DISCOVERY_UNSPECIFIED {
			all = append(all, p)
			if provider == "" || p.GetProviderId() == provider {
				provs = append(provs, p)
			}
		}
	}
	s.disc.start(all)
	found := make([][]*llmv1.Model, len(provs))
	warns := make([]string, len(provs))
	var wg sync.WaitGroup
	for i, p := range provs {
		// A built-in local provider (Ollama, vLLM) that is not running is
		// no news; one the operator configured is.
		wg.Go(func() { found[i], warns[i] = s.disc.models(ctx, p, !s.cat.Configured(p.GetProviderId())) })
	}
	wg.Wait()
	known := map[string]bool{}
	for _, m := range models {
		known[m.GetProviderId()+"/"+m.GetModelId()] = true
		known[m.GetProviderId()+"/"+catalog.Route{Model: m}.APIModel()] = true
	}
	for _, ms := range found {
		for _, m := range ms {
			if !known[m.GetProviderId()+"/"+m.GetModelId()] {
				models = append(models, m)
			}
		}
	}
	slices.SortStableFunc(models, func(a, b *llmv1.Model) int {
		if c := strings.Compare(a.GetProviderId(), b.GetProviderId()); c != 0 {
			return c
		}
		return strings.Compare(a.GetModelId(), b.GetModelId())
	})
	var warnings []string
	for _, w := range warns {
		if w != "" {
			warnings = append(warnings, w)
		}
	}
	return models, warnings
}

// resolve is the catalog's resolution, then discovered models by
// "provider/model".
func (s *Service) resolve(selector string) (catalog.Route, error) {
	r, err := s.cat.Resolve(selector)
	if s.disc == nil {
		return r, err
	}
	if err == nil {
		if r.Passthrough { // a passthrough name that discovery knows
			if m := s.disc.lookup(r.Provider.GetProviderId(), r.Model.GetModelId()); m != nil {
				return catalog.Route{Provider: r.Provider, Model: m}, nil
			}
		}
		return r, nil
	}
	var nf *catalog.NotFoundError
	prov, id, ok := strings.Cut(strings.TrimSpace(selector), "/")
	if !errors.As(err, &nf) || !ok {
		return r, err
	}
	p, ok := s.cat.Provider(prov)
	if !ok || p.GetDiscovery() == llmv1.Discovery_DISCOVERY_UNSPECIFIED {
		return r, err
	}
	if m := s.disc.lookup(prov, id); m != nil {
		return catalog.Route{Provider: p, Model: m}, nil
	}
	return r, err
}
