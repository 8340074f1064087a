package llmgateway

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	llmv1 "github.com/fabro-sh/fabro-go/gen/fabro/llm/v1"
	"github.com/fabro-sh/fabro-go/platform/auth"
)

// countingCredentials answers every name with a value naming the
// resolution's number, so a test sees which resolution a value came from.
type countingCredentials struct {
	mu sync.Mutex
	n  int
}

func (c *countingCredentials) Resolve(_ context.Context, names []string) (map[string]string, []string, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.n++
	out := map[string]string{}
	for _, n := range names {
		out[n] = fmt.Sprintf("%s-%d", n, c.n)
	}
	return out, nil, nil
}

func bearer(id string) *llmv1.Provider {
	return &llmv1.Provider{ProviderId: id, Auth: &llmv1.Auth{Scheme: llmv1.AuthScheme_AUTH_SCHEME_BEARER, CredentialNames: []string{"KEY"}}}
}

func TestCredentialCache(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		base := &countingCredentials{}
		s := &Service{creds: base, credCache: newCredentialCache(time.Minute)}
		alice := auth.WithPrincipal(t.Context(), auth.Principal{Name: "alice", Role: auth.RoleUser})
		bob := auth.WithPrincipal(t.Context(), auth.Principal{Name: "bob", Role: auth.RoleUser})
		get := func(ctx context.Context, p *llmv1.Provider) string {
			t.Helper()
			v, _, err := s.credentials(ctx, p)
			if err != nil {
				t.Fatal(err)
			}
			return v["KEY"]
		}
		steps := []struct {
			what string
			ctx  context.Context
			p    *llmv1.Provider
			do   func()
			want string
		}{
			{"first resolution", alice, bearer("a"), nil, "KEY-1"},
			{"remembered", alice, bearer("a"), nil, "KEY-1"},
			{"another principal resolves its own", bob, bearer("a"), nil, "KEY-2"},
			{"another provider resolves its own", alice, bearer("b"), nil, "KEY-3"},
			{"just before the TTL", alice, bearer("a"), func() { time.Sleep(time.Minute - time.Nanosecond) }, "KEY-1"},
			{"at the TTL, asked again", alice, bearer("a"), func() { time.Sleep(time.Nanosecond) }, "KEY-4"},
			{"the other provider's expired too", alice, bearer("b"), nil, "KEY-5"},
			{"a 401 drops the provider's keys", alice, bearer("a"), func() { s.credCache.forget("a") }, "KEY-6"},
			{"not another provider's", alice, bearer("b"), nil, "KEY-5"},
		}
		for _, st := range steps {
			if st.do != nil {
				st.do()
			}
			if got := get(st.ctx, st.p); got != st.want {
				t.Fatalf("%s: %s, want %s", st.what, got, st.want)
			}
		}
		// A caller changing the map it was given changes nothing kept.
		v, _, _ := s.credentials(alice, bearer("a"))
		v["KEY"] = "tampered"
		if got := get(alice, bearer("a")); got == "tampered" {
			t.Fatal("the cache handed out its own map")
		}
	})
}

// The cache stays bounded however many callers pass through.
func TestCredentialCacheBounded(t *testing.T) {
	c := newCredentialCache(time.Minute)
	for i := range 3 * maxCachedCredentials {
		c.put(credentialKey{principal: auth.Principal{Name: fmt.Sprint(i)}, provider: "a", names: "KEY"}, map[string]string{"KEY": "v"})
	}
	if n := len(c.entries); n > maxCachedCredentials {
		t.Fatalf("%d entries kept, bound %d", n, maxCachedCredentials)
	}
}
