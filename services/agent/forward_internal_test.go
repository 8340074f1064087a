package agent

import (
	"context"
	"testing"

	"google.golang.org/grpc/metadata"

	"github.com/fabro-sh/fabro-go/platform/auth"
)

// TestForwardedByReplica: the forwarded mark is believed only from a
// replica. A person's call that sets it is forwarded to the owner like any
// other, not served (or deleted) where it landed.
func TestForwardedByReplica(t *testing.T) {
	user := auth.WithPrincipal(context.Background(), auth.Principal{Name: "alice", Role: auth.RoleUser})
	tests := []struct {
		name string
		ctx  context.Context
		md   metadata.MD
		want bool
	}{
		{"a person sets the mark", user, metadata.Pairs(mdForwardedBy, "r1"), false},
		{"a replica, its principal let through by the interceptor", user, metadata.Pairs(mdForwardedBy, "r1", auth.ForwardedPrincipalHeader, "user:alice"), true},
		{"two forwarded principals", user, metadata.Pairs(mdForwardedBy, "r1", auth.ForwardedPrincipalHeader, "user:a", auth.ForwardedPrincipalHeader, "user:b"), false},
		{"no authentication: a trusted network", context.Background(), metadata.Pairs(mdForwardedBy, "r1"), true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := forwardedByReplica(tt.ctx, tt.md); got != tt.want {
				t.Fatalf("forwardedByReplica = %v, want %v", got, tt.want)
			}
		})
	}
}
