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
	path := filepath.Join(t.TempDir(), "service-tokens.json")
	vault := &fakeVault{token: "agent-token-0123456789"}
	c := New(vault, TokenFromFile(path, "agent"))

	// The tokens file does not exist yet: no token, and the vault is not called.
	if _, _, err := c.Resolve(t.Context(), []string{"BRAVE_SEARCH_API_KEY"}); !errors.Is(err, ErrNoToken) || vault.calls != 0 {
		t.Fatalf("before the tokens file: err = %v, calls = %d", err, vault.calls)
	}
	if err := os.WriteFile(path, []byte(`{"agent":"agent-token-0123456789","llmgateway":"other-token-0123456789"}`), 0o600); err != nil {
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

	wrong := New(vault, TokenFromFile(path, "llmgateway"))
	if _, _, err := wrong.Resolve(t.Context(), []string{"BRAVE_SEARCH_API_KEY"}); status.Code(err) != codes.PermissionDenied {
		t.Errorf("another service's token: err = %v, want the vault's PermissionDenied", err)
	}
}

func TestTokenFrom(t *testing.T) {
	env := func(vars map[string]string) func(string) (string, bool) {
		return func(k string) (string, bool) { v, ok := vars[k]; return v, ok }
	}
	if tok, err := TokenFrom("", "agent", "FABRO_SERVICE_TOKEN", env(map[string]string{"FABRO_SERVICE_TOKEN": "t-env"}))(); err != nil || tok != "t-env" {
		t.Errorf("from env = %q, %v", tok, err)
	}
	if _, err := TokenFrom("", "agent", "FABRO_SERVICE_TOKEN", env(nil))(); err == nil {
		t.Error("no file and no env: want an error naming what to set")
	}
}
