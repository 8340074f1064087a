package llmgateway

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	llmv1 "github.com/fabro-sh/fabro-go/gen/fabro/llm/v1"
	vaultv1 "github.com/fabro-sh/fabro-go/gen/fabro/vault/v1"
	"github.com/fabro-sh/fabro-go/platform/auth"
	"github.com/fabro-sh/fabro-go/platform/auth/authtest"
	"github.com/fabro-sh/fabro-go/platform/grpcclient"
	"github.com/fabro-sh/fabro-go/platform/grpcerr"
	"github.com/fabro-sh/fabro-go/platform/server"
	"github.com/fabro-sh/fabro-go/services/vault"
)

// startVault runs the real vault service over bufconn, authenticating as
// the served one does, and returns an admin client, a connection without a
// credential, and the gateway's service token.
func startVault(t *testing.T, env map[string]string) (vaultv1.VaultServiceClient, *grpc.ClientConn, string) {
	t.Helper()
	dir := t.TempDir()
	v, err := vault.New(t.Context(), vault.Config{DataDir: dir, LookupEnv: func(k string) (string, bool) {
		val, ok := env[k]
		return val, ok
	}}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = v.Close() })
	lis := bufconn.Listen(1 << 20)
	fx := authtest.New(t)
	gs := grpc.NewServer(fx.ServerOptions()...)
	v.RegisterGRPC(gs)
	go func() { _ = gs.Serve(lis) }()
	t.Cleanup(gs.Stop)
	dialVault := func(opts ...grpc.DialOption) *grpc.ClientConn {
		conn, err := grpc.NewClient("passthrough:///vault", append(opts,
			grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
			grpc.WithTransportCredentials(insecure.NewCredentials()))...)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = conn.Close() })
		return conn
	}
	admin := dialVault(authtest.Bearer(fx.Token("admin", auth.RoleAdmin)))
	return vaultv1.NewVaultServiceClient(admin), dialVault(), fx.Token(ServiceName, auth.RoleService)
}

func TestVaultCredentials(t *testing.T) {
	admin, conn, token := startVault(t, map[string]string{"BACKUP_API_KEY": "sk-from-vault-env"})
	if _, err := admin.PutSecret(t.Context(), &vaultv1.PutSecretRequest{Name: "FAKE_API_KEY", Value: "sk-vault-1"}); err != nil {
		t.Fatal(err)
	}
	u := newUpstream(t, textTurn("a"), textTurn("b"), turn{status: 401}, textTurn("c"))
	creds := NewVaultCredentials(vaultv1.NewVaultServiceClient(conn), grpcclient.Static(token))
	client := dial(t, newGateway(t, u, func(c *Config) {
		c.Credentials = creds
		c.LookupEnv = func(string) (string, bool) { return "", false } // the vault is the only source
	}))

	if _, err := client.Complete(t.Context(), &llmv1.CompleteRequest{Request: userReq("f1", "x")}); err != nil {
		t.Fatal(err)
	}
	// Rotate: the next attempt resolves the new value.
	if _, err := admin.PutSecret(t.Context(), &vaultv1.PutSecretRequest{Name: "FAKE_API_KEY", Value: "sk-vault-2"}); err != nil {
		t.Fatal(err)
	}
	if _, err := client.Complete(t.Context(), &llmv1.CompleteRequest{Request: userReq("f1", "x")}); err != nil {
		t.Fatal(err)
	}
	// 401 on fake fails over to backup, whose key is the vault's environment fallback.
	if _, err := client.Complete(t.Context(), &llmv1.CompleteRequest{Request: userReq("f1", "x")}); err != nil {
		t.Fatal(err)
	}
	var auths []string
	for _, r := range u.requests() {
		auths = append(auths, r.Auth)
	}
	want := []string{"Bearer sk-vault-1", "Bearer sk-vault-2", "Bearer sk-vault-2", "Bearer sk-from-vault-env"}
	if !slices.Equal(auths, want) {
		t.Errorf("upstream saw %q, want %q", auths, want)
	}

	// A name the vault has nowhere is FAILED_PRECONDITION naming it.
	if _, err := admin.DeleteSecret(t.Context(), &vaultv1.DeleteSecretRequest{Name: "FAKE_API_KEY"}); err != nil {
		t.Fatal(err)
	}
	_, err := client.Complete(t.Context(), &llmv1.CompleteRequest{Request: &llmv1.Request{Model: "f1", DisableFallbacks: true, Messages: []*llmv1.Message{userText("x")}}})
	if status.Code(err) != codes.FailedPrecondition || !strings.Contains(status.Convert(err).Message(), "fabro secret set FAKE_API_KEY") {
		t.Errorf("missing credential: %v", err)
	}

	// A wrong service token is refused by the vault.
	bad := NewVaultCredentials(vaultv1.NewVaultServiceClient(conn), func() (string, error) { return "not-the-token-at-all", nil })
	if _, _, err := bad.Resolve(t.Context(), []string{"FAKE_API_KEY"}); status.Code(err) != codes.PermissionDenied {
		t.Errorf("wrong token: %v", err)
	}
}

// The vault's answer passes through the gateway with its ErrorInfo and
// details, beside the gateway's ErrorDetail, not flattened to UNAVAILABLE;
// a vault that cannot be reached is UPSTREAM_UNAVAILABLE with RetryInfo.
func TestVaultErrorsPassThrough(t *testing.T) {
	_, conn, token := startVault(t, nil)
	creds := NewVaultCredentials(vaultv1.NewVaultServiceClient(conn), grpcclient.Static(token))
	bad := NewVaultCredentials(vaultv1.NewVaultServiceClient(conn), func() (string, error) { return "not-the-token-at-all", nil })
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := lis.Addr().String()
	lis.Close()
	gone, err := grpc.NewClient(closed, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = gone.Close() })
	unreachable := NewVaultCredentials(vaultv1.NewVaultServiceClient(gone), grpcclient.Static(token))
	tests := []struct {
		name          string
		creds         *VaultCredentials
		names         []string
		code          codes.Code
		domain        string
		reason, field string
		retry         bool
	}{
		{"outside the policy", creds, []string{"GITHUB_TOKEN"}, codes.PermissionDenied, "vault.fabro.dev", "DENIED", "", false},
		{"not a secret name", creds, []string{"bad name"}, codes.InvalidArgument, "vault.fabro.dev", grpcerr.ReasonInvalidArgument, "names[0]", false},
		{"token refused", bad, []string{"FAKE_API_KEY"}, codes.PermissionDenied, "auth.fabro.dev", "UNAUTHENTICATED", "", false},
		{"vault unreachable", unreachable, []string{"FAKE_API_KEY"}, codes.Unavailable, "llmgateway.fabro.dev", grpcerr.ReasonUpstreamUnavailable, "", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, _, err := tt.creds.Resolve(t.Context(), tt.names)
			st := status.Convert(err)
			if st.Code() != tt.code {
				t.Fatalf("code = %v, want %v (%v)", st.Code(), tt.code, err)
			}
			if info := grpcerr.InfoOf(err); info.GetDomain() != tt.domain || info.GetReason() != tt.reason {
				t.Errorf("ErrorInfo = %v, want %s/%s", info, tt.domain, tt.reason)
			}
			if tt.field != "" {
				if v := grpcerr.ViolationsOf(err); len(v) != 1 || v[0].GetField() != tt.field {
					t.Errorf("violations = %v, want %s", v, tt.field)
				}
			}
			if _, ok := grpcerr.RetryDelayOf(err); ok != tt.retry {
				t.Errorf("RetryInfo present = %v, want %v", ok, tt.retry)
			}
			found := false
			for _, d := range st.Details() {
				_, isDetail := d.(*llmv1.ErrorDetail)
				found = found || isDetail
			}
			if !found {
				t.Errorf("no gateway ErrorDetail beside the vault's: %v", st.Details())
			}
		})
	}
}

func TestSpans(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	u := newUpstream(t, turn{status: 503}, textTurn("hi"))
	client := dial(t, newGateway(t, u, func(c *Config) { c.TracerProvider = tp }))
	req := userReq("f1", "x")
	req.Metadata = map[string]string{"run_id": "run-7"}
	if _, err := client.Complete(t.Context(), &llmv1.CompleteRequest{Request: req}); err != nil {
		t.Fatal(err)
	}
	spans := rec.Ended()
	if len(spans) != 2 {
		t.Fatalf("%d spans, want one per attempt (2)", len(spans))
	}
	attrs := func(s sdktrace.ReadOnlySpan) map[attribute.Key]attribute.Value {
		m := map[attribute.Key]attribute.Value{}
		for _, kv := range s.Attributes() {
			m[kv.Key] = kv.Value
		}
		return m
	}
	failed, ok := attrs(spans[0]), attrs(spans[1])
	if spans[0].Status().Code.String() != "Error" || failed["error.type"].AsString() != "ERROR_KIND_OVERLOADED" || failed["fabro.llm.attempt"].AsInt64() != 1 {
		t.Errorf("failed attempt span: %v %v", spans[0].Status(), failed)
	}
	checks := map[attribute.Key]string{
		"gen_ai.system":             "fake",
		"gen_ai.provider.name":      "fake",
		"gen_ai.request.model":      "fake-1",
		"gen_ai.response.model":     "fake-1",
		"gen_ai.operation.name":     "chat",
		"fabro.llm.metadata.run_id": "run-7",
	}
	for k, v := range checks {
		if got := ok[k].AsString(); got != v {
			t.Errorf("%s = %q, want %q", k, got, v)
		}
	}
	if ok["gen_ai.usage.input_tokens"].AsInt64() != 10 || ok["gen_ai.usage.output_tokens"].AsInt64() != 2 ||
		!slices.Equal(ok["gen_ai.response.finish_reasons"].AsStringSlice(), []string{"stop"}) || ok["fabro.llm.attempt"].AsInt64() != 2 {
		t.Errorf("successful attempt span: %v", ok)
	}
	if spans[1].Name() != "chat fake-1" {
		t.Errorf("span name %q", spans[1].Name())
	}
}

// TestREST drives the gateway through the shared runtime's REST gateway,
// streaming included.
func TestREST(t *testing.T) {
	u := newUpstream(t, textTurn("over rest"), turn{events: textTurn("streamed").events})
	// One more model, whose id holds a ':' as Ollama tags do.
	var overlay map[string]map[string]any
	if err := json.Unmarshal([]byte(testOverlay(u.srv.URL)), &overlay); err != nil {
		t.Fatal(err)
	}
	overlay["models"]["fake/tagged:v1"] = map[string]any{}
	ob, _ := json.Marshal(overlay)
	overlayPath := filepath.Join(t.TempDir(), "overlay.json")
	if err := os.WriteFile(overlayPath, ob, 0o600); err != nil {
		t.Fatal(err)
	}
	gw := newGateway(t, u, func(c *Config) { c.CatalogOverlay = overlayPath })
	fx := authtest.New(t)
	srv, err := server.Start(t.Context(), server.Config{GRPCAddr: "127.0.0.1:0", HTTPAddr: "127.0.0.1:0", Auth: fx.Store}, slog.New(slog.DiscardHandler), gw)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Shutdown(context.Background()) })
	base := "http://" + srv.HTTPAddr()
	token := fx.Token("alice", auth.RoleUser)
	post := func(path, body string) *http.Response {
		t.Helper()
		req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, base+path, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = resp.Body.Close() })
		return resp
	}
	req := `{"request": {"model": "f1", "messages": [{"role": "ROLE_USER", "parts": [{"text": {"text": "hi"}}]}]}}`

	resp := post("/v1/llm:complete", req)
	var cr llmv1.CompleteResponse
	if err := decodeProtoJSON(resp, &cr); err != nil || resp.StatusCode != 200 {
		t.Fatalf("complete: %d %v", resp.StatusCode, err)
	}
	if got := cr.GetResponse().GetParts()[0].GetText().GetText(); got != "over rest" {
		t.Errorf("complete text %q", got)
	}

	resp = post("/v1/llm:stream", req)
	var kinds []string
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		var line struct {
			Result json.RawMessage `json:"result"`
		}
		if err := json.Unmarshal(sc.Bytes(), &line); err != nil {
			t.Fatalf("stream line %q: %v", sc.Text(), err)
		}
		var sr llmv1.StreamResponse
		if err := protojson.Unmarshal(line.Result, &sr); err != nil {
			t.Fatal(err)
		}
		kinds = append(kinds, string(sr.ProtoReflect().WhichOneof(sr.ProtoReflect().Descriptor().Oneofs().Get(0)).Name()))
	}
	want := []string{"started", "content_block_start", "text_delta", "content_block_end", "usage", "ended"}
	if !slices.Equal(kinds, want) {
		t.Errorf("REST stream events %v, want %v", kinds, want)
	}

	// Errors keep their code and detail over REST: unknown model is 404.
	resp = post("/v1/llm:complete", `{"request": {"model": "fake/fake-l", "messages": [{"role": "ROLE_USER", "parts": [{"text": {"text": "hi"}}]}]}}`)
	if resp.StatusCode != http.StatusNotFound {
		t.Errorf("unknown model over REST: %d", resp.StatusCode)
	}
	var body map[string]any
	_ = json.NewDecoder(resp.Body).Decode(&body)
	if b, _ := json.Marshal(body); !strings.Contains(string(b), "fake/fake-1") {
		t.Errorf("REST error lacks the hint: %s", b)
	}

	// ListModels over REST.
	lreq, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, base+"/v1/models?provider_id=fake", nil)
	lreq.Header.Set("Authorization", "Bearer "+token)
	lr, err := http.DefaultClient.Do(lreq)
	if err == nil {
		defer lr.Body.Close()
		var ml llmv1.ListModelsResponse
		if err := decodeProtoJSON(lr, &ml); err == nil && len(ml.GetModels()) != 3 { // fake-1, fake-2, tagged:v1
			t.Errorf("REST ListModels: %d models", len(ml.GetModels()))
		}
	}

	// The Get calls over REST, a model id with ':' included.
	var gp llmv1.GetProviderResponse
	if code := getREST(t, base, token, "/v1/providers/fake", &gp); code != http.StatusOK || gp.GetProvider().GetProviderId() != "fake" {
		t.Errorf("GET /v1/providers/fake: %d %v", code, &gp)
	}
	for _, id := range []string{"fake-1", "tagged:v1"} {
		var gm llmv1.GetModelResponse
		if code := getREST(t, base, token, "/v1/providers/fake/models/"+id, &gm); code != http.StatusOK || gm.GetModel().GetModelId() != id {
			t.Errorf("GET /v1/providers/fake/models/%s: %d %v", id, code, &gm)
		}
	}
	if code := getREST(t, base, token, "/v1/providers/fake/models/nope", &llmv1.GetModelResponse{}); code != http.StatusNotFound {
		t.Errorf("GET of an unknown model: %d, want 404", code)
	}
}

// getREST GETs path with the token and decodes the JSON answer into m.
func getREST(t *testing.T, base, token, path string, m proto.Message) int {
	t.Helper()
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, base+path, nil)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusOK {
		if err := decodeProtoJSON(resp, m); err != nil {
			t.Errorf("GET %s: %v", path, err)
		}
	}
	return resp.StatusCode
}

func decodeProtoJSON(resp *http.Response, m proto.Message) error {
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	return protojson.UnmarshalOptions{DiscardUnknown: true}.Unmarshal(b, m)
}
