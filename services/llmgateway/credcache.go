package llmgateway

import (
	"context"
	"maps"
	"strings"
	"sync"
	"time"

	llmv1 "github.com/fabro-sh/fabro-go/gen/fabro/llm/v1"
	"github.com/fabro-sh/fabro-go/platform/auth"
)

// DefaultCredentialTTL is how long the gateway keeps a provider's
// resolved credentials in memory: a vault restart (or a slow vault) is
// then not on every call's path, and a key changed with `fabro secret set`
// is used within a minute (at once when the provider refuses the old one).
const DefaultCredentialTTL = time.Minute

// credentialCache keeps successful resolutions for a bounded time, in
// memory only. An entry is the answer for one caller (the principal the
// call acts for), one provider and one set of names, so that no caller or
// provider is ever served what was resolved for another; a provider's 401
// drops its entry. Only complete answers (every credential the provider
// needs) are kept: a missing key is asked for again on the next call, so a
// key set after a failure works at once.
type credentialCache struct {
	ttl time.Duration
	now func() time.Time

	mu      sync.Mutex
	entries map[credentialKey]cachedCredentials
}

type credentialKey struct {
	principal       auth.Principal // whole: two principals differing in any field never share
	provider, names string
}

type cachedCredentials struct {
	values  map[string]string
	expires time.Time
}

// maxCachedCredentials bounds the cache: beyond it expired entries are
// swept, and if none was, the whole cache is dropped (callers resolve
// again; nothing is lost but a round trip).
const maxCachedCredentials = 4096

func newCredentialCache(ttl time.Duration) *credentialCache {
	return &credentialCache{ttl: ttl, now: time.Now, entries: map[credentialKey]cachedCredentials{}}
}

func cacheKey(ctx context.Context, provider string, names []string) credentialKey {
	p, _ := auth.FromContext(ctx)
	return credentialKey{principal: p, provider: provider, names: strings.Join(names, "\x00")}
}

// get returns a copy of the live entry, if any.
func (c *credentialCache) get(k credentialKey) (map[string]string, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.entries[k]
	if !ok || !c.now().Before(e.expires) {
		delete(c.entries, k)
		return nil, false
	}
	return maps.Clone(e.values), true
}

func (c *credentialCache) put(k credentialKey, values map[string]string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.now()
	if len(c.entries) >= maxCachedCredentials {
		maps.DeleteFunc(c.entries, func(_ credentialKey, e cachedCredentials) bool { return !now.Before(e.expires) })
		if len(c.entries) >= maxCachedCredentials {
			clear(c.entries)
		}
	}
	c.entries[k] = cachedCredentials{values: maps.Clone(values), expires: now.Add(c.ttl)}
}

// forget drops every entry of the provider, for every caller: the provider
// refused a key, and whoever resolves next must get the vault's current
// one.
func (c *credentialCache) forget(provider string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	maps.DeleteFunc(c.entries, func(k credentialKey, _ cachedCredentials) bool { return k.provider == provider })
}

// credentials resolves the credentials a provider needs for one attempt,
// from the cache when it holds them (cached then says so: a 401 on a
// cached key is worth one more try with a fresh one).
func (s *Service) credentials(ctx context.Context, p *llmv1.Provider) (_ map[string]string, cached bool, _ error) {
	if s.credCache == nil {
		v, err := credentialsFor(ctx, s.creds, p)
		return v, false, err
	}
	k := cacheKey(ctx, p.GetProviderId(), p.GetAuth().GetCredentialNames())
	if v, ok := s.credCache.get(k); ok {
		return v, true, nil
	}
	v, err := credentialsFor(ctx, s.creds, p)
	if err == nil && v != nil {
		s.credCache.put(k, v)
	}
	return v, false, err
}
