package vaultclient

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	vaultv1 "github.com/fabro-sh/fabro-go/gen/fabro/vault/v1"
	"github.com/fabro-sh/fabro-go/platform/grpcclient"
)

// fakeVault answers for one token and records what it was sent.
type fakeVault struct {
	token string
	calls int
}

func (f *fakeVault) ResolveCredentials(ctx context.Context, in *vaultv1.ResolveCredentialsRequest, _ ...grpc.CallOption) (*vaultv1.ResolveCredentialsResponse, error) {
	f.calls++
	md, _ := metadata.FromOutgoingContext(ctx)
	if got := md.Get("authorization"); len(got) != 1 || got[0] != "Bearer "+f.token {
		return nil, status.Error(codes.PermissionDenied, "denied")
	}
	resp := &vaultv1.ResolveCredentialsResponse{}
	for _, n := range in.GetNames() {
		if n == "BRAVE_SEARCH_API_KEY" {
			resp.Credentials = append(resp.Credentials, &vaultv1.Credential{Name: n, Value: "brave-key"})
		} else {
			resp.Missing = append(resp.Missing, n)
		}
	}
	return resp, nil
}

func TestResolve(t *testing.T) {
	path := filepath.Join(t.TempDir(), "agent.token")
	vault := &fakeVault{token: "agent-token-0123456789"}
	c := New(vault, grpcclient.TokenFile(path))

	// The token file does not exist yet: no token, and the vault is not called.
	if _, _, err := c.Resolve(t.Context(), []string{"BRAVE_SEARCH_API_KEY"}); !errors.Is(err, ErrNoToken) || vault.calls != 0 {
		t.Fatalf("before the token file: err = %v, calls = %d", err, vault.calls)
	}
	if err := os.WriteFile(path, []byte("agent-token-0123456789\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	values, missing, err := c.Resolve(t.Context(), []string{"BRAVE_SEARCH_API_KEY", "DAYTONA_API_KEY"})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(map[string]string{"BRAVE_SEARCH_API_KEY": "brave-key"}, values); diff != "" {
		t.Errorf("values (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"DAYTONA_API_KEY"}, missing); diff != "" {
		t.Errorf("missing (-want +got):\n%s", diff)
	}

	wrong := New(vault, grpcclient.Static("other-token-0123456789"))
	if _, _, err := wrong.Resolve(t.Context(), []string{"BRAVE_SEARCH_API_KEY"}); status.Code(err) != codes.PermissionDenied {
		t.Errorf("another service's token: err = %v, want the vault's PermissionDenied", err)
	}
}
