package auth_test

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"

	"github.com/fabro-sh/fabro-go/platform/auth"
)

// TestReaches checks who reaches a resource recorded with an owner: its
// owner and admins (audited), services acting for themselves, nobody else;
// and that a role or a name alone is not ownership.
func TestReaches(t *testing.T) {
	alice := auth.Principal{Name: "alice", Role: auth.RoleUser}
	tests := []struct {
		name   string
		caller *auth.Principal // nil: no authentication
		owner  string
		want   auth.Reach
	}{
		{"owner", &alice, "user:alice", auth.Own},
		{"another user", &auth.Principal{Name: "bob", Role: auth.RoleUser}, "user:alice", auth.Unreachable},
		{"a name that is a prefix", &auth.Principal{Name: "ali", Role: auth.RoleUser}, "user:alice", auth.Unreachable},
		{"a name that extends it", &auth.Principal{Name: "alicex", Role: auth.RoleUser}, "user:alice", auth.Unreachable},
		{"same name, other role", &auth.Principal{Name: "alice", Role: auth.RoleAdmin}, "user:alice", auth.AsAdmin},
		{"a user on an admin's", &alice, "admin:alice", auth.Unreachable},
		{"a user on an unowned one", &alice, "", auth.Unreachable},
		{"admin on another's", &auth.Principal{Name: "root", Role: auth.RoleAdmin}, "user:alice", auth.AsAdmin},
		{"admin on its own", &auth.Principal{Name: "root", Role: auth.RoleAdmin}, "admin:root", auth.Own},
		{"admin on an unowned one", &auth.Principal{Name: "root", Role: auth.RoleAdmin}, "", auth.AsAdmin},
		{"a service for itself", &auth.Principal{Name: auth.ServiceAgent, Role: auth.RoleService}, "user:alice", auth.Service},
		{"no authentication", nil, "user:alice", auth.Own},
		{"a user with a colon-less owner", &alice, "useralice", auth.Unreachable},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := t.Context()
			if tt.caller != nil {
				ctx = auth.WithPrincipal(ctx, *tt.caller)
			}
			if got := auth.Reaches(ctx, tt.owner); got != tt.want {
				t.Errorf("Reaches(%v, %q) = %v, want %v", tt.caller, tt.owner, got, tt.want)
			}
		})
	}
}

// TestAllowAudits checks that Allow admits an admin on another's resource
// with one audit line naming both, and writes nothing for an owner.
func TestAllowAudits(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(slog.NewTextHandler(&buf, nil))
	admin := auth.WithPrincipal(t.Context(), auth.Principal{Name: "root", Role: auth.RoleAdmin})
	if !auth.Allow(admin, log, "sandbox", "sbx-1", "user:alice") {
		t.Fatal("an admin was refused")
	}
	line := buf.String()
	for _, want := range []string{"audit=true", "principal=admin:root", "resource=sandbox", "id=sbx-1", "owner=user:alice"} {
		if !strings.Contains(line, want) {
			t.Errorf("audit line %q lacks %q", line, want)
		}
	}
	buf.Reset()
	owner := auth.WithPrincipal(t.Context(), auth.Principal{Name: "alice", Role: auth.RoleUser})
	if !auth.Allow(owner, log, "sandbox", "sbx-1", "user:alice") || buf.Len() != 0 {
		t.Errorf("owner: allowed %v, logged %q", auth.Allow(owner, log, "sandbox", "sbx-1", "user:alice"), buf.String())
	}
	bob := auth.WithPrincipal(t.Context(), auth.Principal{Name: "bob", Role: auth.RoleUser})
	if auth.Allow(bob, log, "sandbox", "sbx-1", "user:alice") || buf.Len() != 0 {
		t.Errorf("another user was allowed, or logged %q", buf.String())
	}
}

// BenchmarkReach is the ownership check's cost beside no check, in a
// context as deep as a served call's (the server's interceptors add about
// ten values): go test -bench Reach ./auth/. The goal is under 2 µs added.
func BenchmarkReach(b *testing.B) {
	ctx := context.Background()
	for i := range 10 {
		ctx = context.WithValue(ctx, struct{ n int }{i}, i)
	}
	ctx = auth.WithPrincipal(ctx, auth.Principal{Name: "alice", Role: auth.RoleUser, TokenID: "0123456789abcdef"})
	for i := range 4 {
		ctx = context.WithValue(ctx, struct{ m int }{i}, i)
	}
	var sink auth.Reach
	b.Run("unchecked", func(b *testing.B) {
		for b.Loop() {
			sink = auth.Own
		}
	})
	b.Run("checked", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			sink = auth.Reaches(ctx, "user:alice")
		}
	})
	_ = sink
}
