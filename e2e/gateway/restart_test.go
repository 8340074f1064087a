package gateway_test

import (
	"log/slog"
	"net"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"google.golang.org/grpc"

	llmv1 "github.com/fabro-sh/fabro-go/gen/fabro/llm/v1"
	vaultv1 "github.com/fabro-sh/fabro-go/gen/fabro/vault/v1"
	"github.com/fabro-sh/fabro-go/platform/auth"
	"github.com/fabro-sh/fabro-go/platform/auth/authtest"
	"github.com/fabro-sh/fabro-go/platform/grpcclient"
	"github.com/fabro-sh/fabro-go/services/llmgateway"
	"github.com/fabro-sh/fabro-go/services/llmgateway/fakeprovider"
	"github.com/fabro-sh/fabro-go/services/vault"
)

// vaultProcess is the real vault on a fixed loopback port and data
// directory, stopped and started again there as a restarted vault binary.
type vaultProcess struct {
	t    *testing.T
	fx   *authtest.Fixture
	dir  string
	addr string
	svc  *vault.Service
	gs   *grpc.Server
}

func startVaultProcess(t *testing.T) *vaultProcess {
	p := &vaultProcess{t: t, fx: authtest.New(t), dir: t.TempDir(), addr: "127.0.0.1:0"}
	p.start()
	t.Cleanup(p.stop)
	return p
}

func (p *vaultProcess) start() {
	v, err := vault.New(p.t.Context(), vault.Config{DataDir: filepath.Join(p.dir, "vault"), LookupEnv: func(string) (string, bool) { return "", false }},
		slog.New(slog.DiscardHandler))
	if err != nil {
		p.t.Fatal(err)
	}
	lis, err := net.Listen("tcp", p.addr)
	if err != nil {
		p.t.Fatal(err)
	}
	p.addr = lis.Addr().String()
	p.gs = grpc.NewServer(p.fx.ServerOptions()...)
	v.RegisterGRPC(p.gs)
	p.svc = v
	go func() { _ = p.gs.Serve(lis) }()
}

func (p *vaultProcess) stop() {
	if p.gs == nil {
		return
	}
	p.gs.Stop()
	_ = p.svc.Close()
	p.gs, p.svc = nil, nil
}

func (p *vaultProcess) admin() vaultv1.VaultServiceClient {
	conn, err := grpcclient.New(p.addr, grpcclient.Options{Token: grpcclient.Static(p.fx.Token("admin", auth.RoleAdmin))})
	if err != nil {
		p.t.Fatal(err)
	}
	p.t.Cleanup(func() { _ = conn.Close() })
	return vaultv1.NewVaultServiceClient(conn)
}

// A vault that restarts fails no call: a key resolved before is served
// from the gateway's memory while the vault is down, a call that finds
// nothing there waits for the vault to be back, and a provider's 401
// drops the remembered key so that the next call gets the vault's
// current one.
func TestVaultRestart(t *testing.T) {
	vp := startVaultProcess(t)
	if _, err := vp.admin().PutSecret(t.Context(), &vaultv1.PutSecretRequest{Name: "FAKE_API_KEY", Value: "sk-1"}); err != nil {
		t.Fatal(err)
	}
	fake := fakeprovider.New(
		fakeprovider.Turn{Text: "resolved"},
		fakeprovider.Turn{Text: "remembered while the vault is down"},
		fakeprovider.Turn{Fault: &fakeprovider.Fault{Kind: fakeprovider.FaultAuth}}, // sk-1 revoked
		fakeprovider.Turn{Text: "waited for the vault"},
	)
	hs := httptest.NewServer(fake)
	t.Cleanup(hs.Close)
	gw, err := llmgateway.New(t.Context(), llmgateway.Config{
		CatalogOverlay: overlay(t, hs.URL+"/v1"),
		VaultAddr:      vp.addr,
		VaultClient:    grpcclient.Options{Token: grpcclient.Static(vp.fx.Token(llmgateway.ServiceName, auth.RoleService))},
		LookupEnv:      func(string) (string, bool) { return "", false },
		Backoff:        func(int, time.Duration) time.Duration { return 0 },
		CredentialTTL:  time.Hour, // nothing expires during the test: what is asked again was dropped
	}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = gw.Close() })
	client := llmv1.NewLLMGatewayServiceClient(serve(t, gw.RegisterGRPC)())
	complete := func() error {
		_, err := client.Complete(t.Context(), &llmv1.CompleteRequest{Request: &llmv1.Request{Model: "fake/fake-1", DisableFallbacks: true,
			Messages: []*llmv1.Message{{Role: llmv1.Role_ROLE_USER, Parts: []*llmv1.ContentPart{{Part: &llmv1.ContentPart_Text{Text: &llmv1.TextPart{Text: "x"}}}}}}}})
		return err
	}
	if err := complete(); err != nil {
		t.Fatal(err)
	}
	vp.stop()
	if err := complete(); err != nil {
		t.Fatalf("with the vault down, the remembered key: %v", err)
	}
	vp.start()
	if _, err := vp.admin().PutSecret(t.Context(), &vaultv1.PutSecretRequest{Name: "FAKE_API_KEY", Value: "sk-2"}); err != nil {
		t.Fatal(err)
	}
	if err := complete(); err == nil {
		t.Fatal("the scripted 401 did not fail the call")
	}
	// The 401 dropped sk-1: the next call must ask the vault, which is
	// down until the call is waiting for it.
	vp.stop()
	errc := make(chan error, 1)
	go func() { errc <- complete() }()
	select {
	case err := <-errc:
		t.Fatalf("the call did not wait for the vault: %v", err)
	case <-time.After(300 * time.Millisecond):
	}
	vp.start()
	if err := <-errc; err != nil {
		t.Fatalf("after the vault's restart: %v", err)
	}
	var auths []string
	for _, r := range fake.Requests() {
		auths = append(auths, r.Header.Get("Authorization"))
	}
	if want := []string{"Bearer sk-1", "Bearer sk-1", "Bearer sk-1", "Bearer sk-2"}; !slices.Equal(auths, want) {
		t.Errorf("upstream saw %q, want %q", auths, want)
	}
}
