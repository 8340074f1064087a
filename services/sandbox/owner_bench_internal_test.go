package sandbox

import (
	"context"
	"log/slog"
	"testing"

	"github.com/fabro-sh/fabro-go/platform/auth"
)

// BenchmarkOwnership is a call's sandbox lookup with the ownership check
// beside the same lookup without it, for the owner and for an admin on
// another's (audited, to a discarding log): go test -bench Ownership
// -run '^$' . The goal is under 2 µs added.
func BenchmarkOwnership(b *testing.B) {
	s := &Service{logger: slog.New(slog.DiscardHandler), sandboxes: map[string]*entry{"sbx-1": {id: "sbx-1", owner: "user:alice"}}}
	ctx := context.Background()
	for i := range 10 { // as deep as a served call's context
		ctx = context.WithValue(ctx, struct{ n int }{i}, i)
	}
	alice := auth.WithPrincipal(ctx, auth.Principal{Name: "alice", Role: auth.RoleUser})
	admin := auth.WithPrincipal(ctx, auth.Principal{Name: "root", Role: auth.RoleAdmin})
	b.Run("unchecked", func(b *testing.B) {
		for b.Loop() {
			if _, err := s.get("sbx-1"); err != nil {
				b.Fatal(err)
			}
		}
	})
	for _, c := range []struct {
		name string
		ctx  context.Context
	}{{"checked-owner", alice}, {"checked-admin-audited", admin}} {
		ctx := c.ctx
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := s.owned(ctx, "sbx-1"); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
