package gateway_test

import (
	"log/slog"
	"net"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/status"

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
	// The provider takes one key at a time, the one it was last rotated
	// to, as a provider does once a key is revoked.
	var current atomic.Value
	current.Store("sk-1")
	fake := fakeprovider.New()
	fake.Script(func(r fakeprovider.Request) fakeprovider.Turn {
		if r.Header.Get("Authorization") != "Bearer "+current.Load().(string) {
			return fakeprovider.Turn{Fault: &fakeprovider.Fault{Kind: fakeprovider.FaultAuth}}
		}
		return fakeprovider.Turn{Text: "ok"}
	})
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
	// The key rotated, in the vault and at the provider, and the vault
	// restarts: the call made with the remembered sk-1 gets a 401, drops
	// it, waits for the vault and is made again with sk-2, and succeeds.
	current.Store("sk-2")
	vp.stop()
	errc := make(chan error, 1)
	go func() { errc <- complete() }()
	select {
	case err := <-errc:
		t.Fatalf("the call refused with a remembered key did not wait for the vault: %v", err)
	case <-time.After(300 * time.Millisecond):
	}
	vp.start()
	if err := <-errc; err != nil {
		t.Fatalf("the call refused with a remembered key, made again with the vault's new one: %v", err)
	}
	// A key the vault still holds is refused: one request, no second try
	// with the same key, and the call fails as authentication.
	current.Store("sk-3")
	err = complete()
	if k := llmErrorKind(err); k != llmv1.ErrorKind_ERROR_KIND_AUTHENTICATION {
		t.Fatalf("a key refused that the vault still holds: %v (kind %v), want AUTHENTICATION", err, k)
	}
	// Freshly resolved (the 401 dropped it) and refused: not tried again.
	if err := complete(); err == nil {
		t.Fatal("a fresh key refused: the call succeeded")
	}
	var auths []string
	for _, r := range fake.Requests() {
		auths = append(auths, r.Header.Get("Authorization"))
	}
	if want := []string{"Bearer sk-1", "Bearer sk-1", "Bearer sk-1", "Bearer sk-2", "Bearer sk-2", "Bearer sk-2"}; !slices.Equal(auths, want) {
		t.Errorf("upstream saw %q, want %q", auths, want)
	}
}

// llmErrorKind is the gateway's error kind carried by err, if any.
func llmErrorKind(err error) llmv1.ErrorKind {
	for _, d := range status.Convert(err).Details() {
		if ed, ok := d.(*llmv1.ErrorDetail); ok {
			return ed.GetKind()
		}
	}
	return llmv1.ErrorKind_ERROR_KIND_UNSPECIFIED
}
