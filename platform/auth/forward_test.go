package auth_test

import (
	"log/slog"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/fabro-sh/fabro-go/platform/auth"
)

// TestForwardedPrincipal checks that only the agent's service principal
// may act for another caller (a call one agent replica forwards to
// another), only for a person, and that the call is then authorized as
// that person's.
func TestForwardedPrincipal(t *testing.T) {
	store := auth.OpenStore(filepath.Join(t.TempDir(), "tokens.json"))
	agent, _ := store.IssueService(auth.ServiceAgent)
	sandbox, _ := store.IssueService(auth.ServiceSandbox)
	user, _, _ := store.Issue("bob", auth.RoleUser)
	_, alice, _ := store.Issue("alice", auth.RoleUser) // the token id forwarded
	t1 := alice.ID
	ic := &auth.Interceptor{Verifier: store, Logger: slog.New(slog.DiscardHandler)}
	const (
		prompt = "/fabro.agent.v1.AgentService/Prompt"
		put    = "/fabro.vault.v1.VaultService/PutSecret"
	)
	tests := []struct {
		name      string
		method    string
		token     string
		forwarded []string // fabro-forwarded-principal values
		want      codes.Code
		wantP     auth.Principal
	}{
		{"agent for a user", prompt, agent, []string{"user:alice"}, codes.OK, auth.Principal{Name: "alice", Role: auth.RoleUser, TokenID: t1}},
		{"agent alone", prompt, agent, nil, codes.PermissionDenied, auth.Principal{}},
		{"agent for a user, on a call the user may not make", put, agent, []string{"user:alice"}, codes.PermissionDenied, auth.Principal{}},
		{"agent for a service", prompt, agent, []string{"service:sandbox"}, codes.PermissionDenied, auth.Principal{}},
		{"agent for a malformed principal", prompt, agent, []string{"alice"}, codes.PermissionDenied, auth.Principal{}},
		{"agent for two principals", prompt, agent, []string{"user:a", "user:b"}, codes.PermissionDenied, auth.Principal{}},
		{"a user naming another", prompt, user, []string{"admin:root"}, codes.PermissionDenied, auth.Principal{}},
		{"another service naming a user", prompt, sandbox, []string{"user:alice"}, codes.PermissionDenied, auth.Principal{}},
		{"agent for a user, on the sandbox service", "/fabro.sandbox.v1.SandboxService/Exec", agent, []string{"user:alice"}, codes.OK, auth.Principal{Name: "alice", Role: auth.RoleUser, TokenID: t1}},
		{"another service naming a user, on the sandbox service", "/fabro.sandbox.v1.SandboxService/Exec", sandbox, []string{"user:alice"}, codes.PermissionDenied, auth.Principal{}},
		// Only agent and sandbox calls are forwarded: elsewhere the agent's token would be any admin.
		{"agent for an admin, on the vault", put, agent, []string{"admin:root"}, codes.PermissionDenied, auth.Principal{}},
		{"agent for an admin, on the token service", "/fabro.auth.v1.TokenService/CreateToken", agent, []string{"admin:root"}, codes.PermissionDenied, auth.Principal{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			md := metadata.Pairs("authorization", "Bearer "+tt.token, auth.ForwardedTokenIDHeader, t1)
			for _, v := range tt.forwarded {
				md.Append(auth.ForwardedPrincipalHeader, v)
			}
			ctx, err := ic.Authorize(metadata.NewIncomingContext(t.Context(), md), tt.method)
			if got := status.Code(err); got != tt.want {
				t.Fatalf("code = %v (%v), want %v", got, err, tt.want)
			}
			if err != nil {
				return
			}
			p, _ := auth.FromContext(ctx)
			if diff := cmp.Diff(tt.wantP, p); diff != "" {
				t.Errorf("principal (-want +got):\n%s", diff)
			}
		})
	}
}

// TestForwardedRevokedToken: a call the agent makes for a person names the
// token of the person's call (the gateway governs it by that token's
// policy). Once that token is revoked, such a call is UNAUTHENTICATED like
// the token's own: otherwise a prompt left running after its token's
// revocation goes on calling models, governed by no policy at all (the
// revoked token has none), and drives the person's sandbox.
func TestForwardedRevokedToken(t *testing.T) {
	store := auth.OpenStore(filepath.Join(t.TempDir(), "tokens.json"))
	agent, _ := store.IssueService(auth.ServiceAgent)
	_, live, _ := store.Issue("alice", auth.RoleUser)
	_, gone, _ := store.Issue("alice", auth.RoleUser)
	if err := store.Revoke(gone.ID); err != nil {
		t.Fatal(err)
	}
	ic := &auth.Interceptor{Verifier: store, Logger: slog.New(slog.DiscardHandler)}
	tests := []struct {
		name    string
		tokenID []string
		want    codes.Code
	}{
		{"a live token", []string{live.ID}, codes.OK},
		{"no token named", nil, codes.OK},
		{"a revoked token", []string{gone.ID}, codes.Unauthenticated},
		{"a token never issued", []string{"00000000000000ff"}, codes.Unauthenticated},
	}
	for _, method := range []string{"/fabro.llm.v1.LLMGatewayService/Stream", "/fabro.sandbox.v1.SandboxService/Exec", "/fabro.agent.v1.AgentService/Prompt"} {
		for _, tt := range tests {
			t.Run(method+"/"+tt.name, func(t *testing.T) {
				md := metadata.Pairs("authorization", "Bearer "+agent, auth.ForwardedPrincipalHeader, "user:alice")
				for _, id := range tt.tokenID {
					md.Append(auth.ForwardedTokenIDHeader, id)
				}
				_, err := ic.Authorize(metadata.NewIncomingContext(t.Context(), md), method)
				if got := status.Code(err); got != tt.want {
					t.Errorf("code = %v (%v), want %v", got, err, tt.want)
				}
			})
		}
	}
}
