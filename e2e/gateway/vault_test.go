package gateway_test

import (
	"context"
	"log/slog"
	"net"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"

	llmv1 "github.com/fabro-sh/fabro-go/gen/fabro/llm/v1"
	vaultv1 "github.com/fabro-sh/fabro-go/gen/fabro/vault/v1"
	"github.com/fabro-sh/fabro-go/platform/auth"
	"github.com/fabro-sh/fabro-go/platform/auth/authtest"
	"github.com/fabro-sh/fabro-go/platform/grpcclient"
	"github.com/fabro-sh/fabro-go/services/llmgateway"
	"github.com/fabro-sh/fabro-go/services/llmgateway/fakeprovider"
	"github.com/fabro-sh/fabro-go/services/vault"
)

// serve runs register's service over bufconn with opts and returns a dialer.
func serve(t *testing.T, register func(grpc.ServiceRegistrar), opts ...grpc.ServerOption) func(...grpc.DialOption) *grpc.ClientConn {
	t.Helper()
	lis := bufconn.Listen(1 << 20)
	gs := grpc.NewServer(opts...)
	register(gs)
	go func() { _ = gs.Serve(lis) }()
	t.Cleanup(gs.Stop)
	return func(dopts ...grpc.DialOption) *grpc.ClientConn {
		conn, err := grpc.NewClient("passthrough:///bufnet", append(dopts,
			grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
			grpc.WithTransportCredentials(insecure.NewCredentials()))...)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = conn.Close() })
		return conn
	}
}

// startVault runs the real vault service over bufconn, authenticating as
// the served one does, and returns an admin client, a connection without a
// credential, and the gateway's service token.
func startVault(t *testing.T, env map[string]string) (vaultv1.VaultServiceClient, *grpc.ClientConn, string) {
	t.Helper()
	v, err := vault.New(t.Context(), vault.Config{DataDir: t.TempDir(), LookupEnv: func(k string) (string, bool) {
		val, ok := env[k]
		return val, ok
	}}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = v.Close() })
	fx := authtest.New(t)
	dialVault := serve(t, v.RegisterGRPC, fx.ServerOptions()...)
	admin := dialVault(authtest.Bearer(fx.Token("admin", auth.RoleAdmin)))
	return vaultv1.NewVaultServiceClient(admin), dialVault(), fx.Token(llmgateway.ServiceName, auth.RoleService)
}

// overlay puts two OpenAI-compatible providers on the fake: fake (whose
// model f1 falls back to backup's) and backup, each with its own key.
func overlay(t *testing.T, baseURL string) string {
	t.Helper()
	prov := func(cred string) string {
		return `{"codec": "CODEC_OPENAI_CHAT", "baseUrl": "` + baseURL + `", "enabled": true,
			"auth": {"scheme": "AUTH_SCHEME_BEARER", "credentialNames": ["` + cred + `"]}}`
	}
	doc := `{"providers": {"fake": ` + prov("FAKE_API_KEY") + `, "backup": ` + prov("BACKUP_API_KEY") + `},
	"models": {
	  "fake/fake-1": {"aliases": ["f1"], "apiModel": "fake-1-wire", "fallbacks": ["backup/backup-1"]},
	  "backup/backup-1": {}
	}}`
	p := filepath.Join(t.TempDir(), "overlay.json")
	if err := os.WriteFile(p, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestVaultCredentials runs the gateway on the real vault's credentials,
// uncached: each attempt resolves the current value (rotation), a fallback's key
// comes from the vault's environment fallback, a name the vault has
// nowhere is FAILED_PRECONDITION naming it, and a wrong service token is
// refused by the vault.
func TestVaultCredentials(t *testing.T) {
	admin, conn, token := startVault(t, map[string]string{"BACKUP_API_KEY": "sk-from-vault-env"})
	if _, err := admin.PutSecret(t.Context(), &vaultv1.PutSecretRequest{Name: "FAKE_API_KEY", Value: "sk-vault-1"}); err != nil {
		t.Fatal(err)
	}
	fake := fakeprovider.New(fakeprovider.Turn{Text: "a"}, fakeprovider.Turn{Text: "b"},
		fakeprovider.Turn{Fault: &fakeprovider.Fault{Kind: fakeprovider.FaultAuth}}, fakeprovider.Turn{Text: "c"})
	hs := httptest.NewServer(fake)
	t.Cleanup(hs.Close)
	gw, err := llmgateway.New(t.Context(), llmgateway.Config{
		CatalogOverlay: overlay(t, hs.URL+"/v1"),
		Credentials:    llmgateway.NewVaultCredentials(vaultv1.NewVaultServiceClient(conn), grpcclient.Static(token)),
		LookupEnv:      func(string) (string, bool) { return "", false }, // the vault is the only source
		Backoff:        func(int, time.Duration) time.Duration { return 0 },
		CredentialTTL:  -1, // every attempt asks the vault (the cache: TestVaultRestart)
	}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = gw.Close() })
	client := llmv1.NewLLMGatewayServiceClient(serve(t, gw.RegisterGRPC)())
	user := func(model string, noFallbacks bool) *llmv1.CompleteRequest {
		return &llmv1.CompleteRequest{Request: &llmv1.Request{Model: model, DisableFallbacks: noFallbacks,
			Messages: []*llmv1.Message{{Role: llmv1.Role_ROLE_USER, Parts: []*llmv1.ContentPart{{Part: &llmv1.ContentPart_Text{Text: &llmv1.TextPart{Text: "x"}}}}}}}}
	}

	if _, err := client.Complete(t.Context(), user("f1", false)); err != nil {
		t.Fatal(err)
	}
	// Rotate: the next attempt resolves the new value.
	if _, err := admin.PutSecret(t.Context(), &vaultv1.PutSecretRequest{Name: "FAKE_API_KEY", Value: "sk-vault-2"}); err != nil {
		t.Fatal(err)
	}
	if _, err := client.Complete(t.Context(), user("f1", false)); err != nil {
		t.Fatal(err)
	}
	// 401 on fake fails over to backup, whose key is the vault's environment fallback.
	if _, err := client.Complete(t.Context(), user("f1", false)); err != nil {
		t.Fatal(err)
	}
	var auths []string
	for _, r := range fake.Requests() {
		auths = append(auths, r.Header.Get("Authorization"))
	}
	want := []string{"Bearer sk-vault-1", "Bearer sk-vault-2", "Bearer sk-vault-2", "Bearer sk-from-vault-env"}
	if !slices.Equal(auths, want) {
		t.Errorf("upstream saw %q, want %q", auths, want)
	}

	// A name the vault has nowhere is FAILED_PRECONDITION naming it.
	if _, err := admin.DeleteSecret(t.Context(), &vaultv1.DeleteSecretRequest{Name: "FAKE_API_KEY"}); err != nil {
		t.Fatal(err)
	}
	_, err = client.Complete(t.Context(), user("f1", true))
	if status.Code(err) != codes.FailedPrecondition || !strings.Contains(status.Convert(err).Message(), "fabro secret set FAKE_API_KEY") {
		t.Errorf("missing credential: %v", err)
	}

	// A wrong service token is refused by the vault.
	bad := llmgateway.NewVaultCredentials(vaultv1.NewVaultServiceClient(conn), func() (string, error) { return "not-the-token-at-all", nil })
	if _, _, err := bad.Resolve(t.Context(), []string{"FAKE_API_KEY"}); status.Code(err) != codes.PermissionDenied {
		t.Errorf("wrong token: %v", err)
	}
}
