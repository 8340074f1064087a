package vault_test

import (
	"bytes"
	"context"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"
	"google.golang.org/protobuf/encoding/prototext"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/testing/protocmp"

	vaultv1 "github.com/fabro-sh/fabro-go/gen/fabro/vault/v1"
	"github.com/fabro-sh/fabro-go/platform/auth"
	"github.com/fabro-sh/fabro-go/platform/auth/authtest"
	"github.com/fabro-sh/fabro-go/services/vault"
)

// syncBuffer collects everything the service logs.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

type harness struct {
	client  vaultv1.VaultServiceClient
	dataDir string
	logs    *syncBuffer
	tokens  map[string]string
}

func env(vars map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) { v, ok := vars[k]; return v, ok }
}

func start(t *testing.T, dataDir string, environ map[string]string) *harness {
	t.Helper()
	return startWith(t, vault.Config{DataDir: dataDir, LookupEnv: env(environ)})
}

func startWith(t *testing.T, cfg vault.Config) *harness {
	t.Helper()
	dataDir := cfg.DataDir
	logs := &syncBuffer{}
	logger := slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	svc, err := vault.New(t.Context(), cfg, logger)
	if err != nil {
		t.Fatalf("vault.New: %v", err)
	}
	t.Cleanup(func() { svc.Close() })
	lis := bufconn.Listen(1 << 20)
	fx := authtest.New(t)
	srv := grpc.NewServer(fx.ServerOptions()...)
	svc.RegisterGRPC(srv)
	go srv.Serve(lis)
	t.Cleanup(srv.Stop)
	tokens := map[string]string{"admin": fx.Token("admin", auth.RoleAdmin), "user": fx.Token("alice", auth.RoleUser)}
	for _, name := range auth.ServiceNames {
		tokens[name] = fx.Token(name, auth.RoleService)
	}
	conn, err := grpc.NewClient("passthrough:///bufnet",
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithUnaryInterceptor(asAdminByDefault(tokens["admin"])))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return &harness{client: vaultv1.NewVaultServiceClient(conn), dataDir: dataDir, logs: logs, tokens: tokens}
}

// asAdminByDefault presents the admin token on calls that present no other.
func asAdminByDefault(admin string) grpc.UnaryClientInterceptor {
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		if md, _ := metadata.FromOutgoingContext(ctx); len(md.Get("authorization")) == 0 {
			ctx = metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+admin)
		}
		return invoker(ctx, method, req, reply, cc, opts...)
	}
}

// as presents the token of principal: a service name, "admin" or "user".
func (h *harness) as(ctx context.Context, service string) context.Context {
	return metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+h.tokens[service])
}

func (h *harness) put(t *testing.T, name, value string) *vaultv1.SecretMetadata {
	t.Helper()
	resp, err := h.client.PutSecret(t.Context(), &vaultv1.PutSecretRequest{Name: name, Value: value})
	if err != nil {
		t.Fatalf("PutSecret(%s): %v", name, err)
	}
	return resp.GetSecret()
}

func code(err error) codes.Code { return status.Code(err) }

func TestBadInput(t *testing.T) {
	h := start(t, t.TempDir(), nil)
	h.put(t, "OPENAI_API_KEY", "sk-one")
	ctx := t.Context()

	tests := []struct {
		name   string
		call   func() error
		want   codes.Code
		reason string
	}{
		{"stale check-and-set", func() error {
			_, err := h.client.PutSecret(ctx, &vaultv1.PutSecretRequest{Name: "OPENAI_API_KEY", Value: "x", ExpectedVersion: proto.Int64(0)})
			return err
		}, codes.Aborted, "VERSION_CONFLICT"},
		{"unknown secret", func() error {
			_, err := h.client.GetSecret(ctx, &vaultv1.GetSecretRequest{Name: "NOPE_API_KEY"})
			return err
		}, codes.NotFound, "SECRET_NOT_FOUND"},
		{"delete unknown", func() error {
			_, err := h.client.DeleteSecret(ctx, &vaultv1.DeleteSecretRequest{Name: "NOPE_API_KEY"})
			return err
		}, codes.NotFound, "SECRET_NOT_FOUND"},
		{"invalid name", func() error {
			_, err := h.client.PutSecret(ctx, &vaultv1.PutSecretRequest{Name: "openai key", Value: "x"})
			return err
		}, codes.InvalidArgument, ""},
		{"empty value", func() error {
			_, err := h.client.PutSecret(ctx, &vaultv1.PutSecretRequest{Name: "OPENAI_API_KEY", Value: ""})
			return err
		}, codes.InvalidArgument, ""},
		{"resolve without identity", func() error {
			_, err := h.client.ResolveCredentials(ctx, &vaultv1.ResolveCredentialsRequest{Names: []string{"OPENAI_API_KEY"}})
			return err
		}, codes.PermissionDenied, "auth/PERMISSION_DENIED"},
		{"resolve with a forged token", func() error {
			_, err := h.client.ResolveCredentials(metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer forged-token-123456"),
				&vaultv1.ResolveCredentialsRequest{Names: []string{"OPENAI_API_KEY"}})
			return err
		}, codes.Unauthenticated, "auth/UNAUTHENTICATED"},
		{"resolve as a person", func() error {
			_, err := h.client.ResolveCredentials(ctx, &vaultv1.ResolveCredentialsRequest{Names: []string{"OPENAI_API_KEY"}})
			return err
		}, codes.PermissionDenied, "auth/PERMISSION_DENIED"},
		{"admin call with a user token", func() error {
			_, err := h.client.ListSecrets(h.as(ctx, "user"), &vaultv1.ListSecretsRequest{})
			return err
		}, codes.PermissionDenied, "auth/PERMISSION_DENIED"},
		{"admin call as a service", func() error {
			_, err := h.client.PutSecret(h.as(ctx, "llmgateway"), &vaultv1.PutSecretRequest{Name: "OPENAI_API_KEY", Value: "x"})
			return err
		}, codes.PermissionDenied, "auth/PERMISSION_DENIED"},
		{"resolve outside the policy", func() error {
			_, err := h.client.ResolveCredentials(h.as(ctx, "agent"), &vaultv1.ResolveCredentialsRequest{Names: []string{"OPENAI_API_KEY"}})
			return err
		}, codes.PermissionDenied, "DENIED"},
		{"resolve nothing", func() error {
			_, err := h.client.ResolveCredentials(h.as(ctx, "llmgateway"), &vaultv1.ResolveCredentialsRequest{})
			return err
		}, codes.InvalidArgument, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.call()
			if got := code(err); got != tt.want {
				t.Fatalf("code = %v (%v), want %v", got, err, tt.want)
			}
			if tt.reason == "" {
				return
			}
			var info *errdetails.ErrorInfo
			for _, d := range status.Convert(err).Details() {
				if i, ok := d.(*errdetails.ErrorInfo); ok {
					info = i
				}
			}
			reason, domain := tt.reason, "vault.fabro.dev"
			if r, ok := strings.CutPrefix(reason, "auth/"); ok {
				reason, domain = r, "auth.fabro.dev" // refused by the server's interceptor
			}
			if info.GetReason() != reason || info.GetDomain() != domain {
				t.Errorf("ErrorInfo = %v, want reason %s", info, tt.reason)
			}
		})
	}
}

func TestDenialRevealsNothing(t *testing.T) {
	h := start(t, t.TempDir(), nil)
	h.put(t, "OPENAI_API_KEY", "sk-exists")
	ctx := h.as(t.Context(), "agent") // the agent may resolve only BRAVE_SEARCH_API_KEY
	_, errExists := h.client.ResolveCredentials(ctx, &vaultv1.ResolveCredentialsRequest{Names: []string{"OPENAI_API_KEY"}})
	_, errAbsent := h.client.ResolveCredentials(ctx, &vaultv1.ResolveCredentialsRequest{Names: []string{"GROQ_API_KEY"}})
	if !proto.Equal(status.Convert(errExists).Proto(), status.Convert(errAbsent).Proto()) {
		t.Errorf("denials differ, revealing existence:\n%v\n%v", errExists, errAbsent)
	}
	// One denied name fails the whole call, even beside an allowed one.
	_, err := h.client.ResolveCredentials(ctx, &vaultv1.ResolveCredentialsRequest{Names: []string{"BRAVE_SEARCH_API_KEY", "OPENAI_API_KEY"}})
	if code(err) != codes.PermissionDenied {
		t.Errorf("mixed request code = %v, want PermissionDenied", code(err))
	}
}

func TestResolvePrecedence(t *testing.T) {
	h := start(t, t.TempDir(), map[string]string{
		"OPENAI_API_KEY":    "sk-from-env",
		"GEMINI_API_KEY":    "gm-from-env",
		"AWS_REGION":        "eu-west-1",
		"FABRO_VAULT_OTHER": "never-a-credential",
	})
	h.put(t, "OPENAI_API_KEY", "sk-from-vault")
	resp, err := h.client.ResolveCredentials(h.as(t.Context(), "llmgateway"), &vaultv1.ResolveCredentialsRequest{
		Names: []string{"OPENAI_API_KEY", "GEMINI_API_KEY", "AWS_REGION", "GROQ_API_KEY"},
	})
	if err != nil {
		t.Fatal(err)
	}
	want := &vaultv1.ResolveCredentialsResponse{
		Credentials: []*vaultv1.Credential{
			{Name: "OPENAI_API_KEY", Value: "sk-from-vault", Source: vaultv1.CredentialSource_CREDENTIAL_SOURCE_VAULT, Version: 1},
			{Name: "GEMINI_API_KEY", Value: "gm-from-env", Source: vaultv1.CredentialSource_CREDENTIAL_SOURCE_ENVIRONMENT},
			{Name: "AWS_REGION", Value: "eu-west-1", Source: vaultv1.CredentialSource_CREDENTIAL_SOURCE_ENVIRONMENT},
		},
		Missing: []string{"GROQ_API_KEY"},
	}
	if diff := cmp.Diff(want, resp, protocmp.Transform()); diff != "" {
		t.Errorf("ResolveCredentials (-want +got):\n%s", diff)
	}
}

func TestListShowsMetadataOnly(t *testing.T) {
	h := start(t, t.TempDir(), nil)
	h.put(t, "B_API_KEY", "value-b")
	h.put(t, "A_API_KEY", "value-a1")
	h.put(t, "A_API_KEY", "value-a2")
	resp, err := h.client.ListSecrets(t.Context(), &vaultv1.ListSecretsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, s := range resp.GetSecrets() {
		got = append(got, s.GetName())
		if s.GetName() == "A_API_KEY" && (s.GetCurrentVersion() != 2 || len(s.GetVersions()) != 2 || s.GetVersions()[0].GetSizeBytes() != 8) {
			t.Errorf("A_API_KEY metadata = %v", s)
		}
	}
	if diff := cmp.Diff([]string{"A_API_KEY", "B_API_KEY"}, got); diff != "" {
		t.Errorf("names (-want +got):\n%s", diff)
	}
	if strings.Contains(resp.String(), "value-") {
		t.Error("ListSecrets returned a value")
	}
}

func TestDataSurvivesRestart(t *testing.T) {
	dir := t.TempDir()
	h := start(t, dir, nil)
	h.put(t, "ANTHROPIC_API_KEY", "sk-ant-kept")
	h2 := start(t, dir, nil) // same data directory, same generated KEK and tokens
	resp, err := h2.client.ResolveCredentials(h2.as(t.Context(), "llmgateway"), &vaultv1.ResolveCredentialsRequest{Names: []string{"ANTHROPIC_API_KEY"}})
	if err != nil || len(resp.GetCredentials()) != 1 || resp.GetCredentials()[0].GetValue() != "sk-ant-kept" {
		t.Fatalf("after restart: %v, %v", resp, err)
	}
}

func TestWrongKEKRefusesToStart(t *testing.T) {
	dir := t.TempDir()
	h := start(t, dir, nil)
	h.put(t, "ANTHROPIC_API_KEY", "sk-ant")
	// Replace the generated KEK with another valid key.
	if err := os.WriteFile(filepath.Join(dir, "vault", "kek"), []byte("AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := vault.New(t.Context(), vault.Config{DataDir: dir, LookupEnv: env(nil)}, slog.New(slog.DiscardHandler))
	if err == nil || !strings.Contains(err.Error(), "does not match the key that sealed the store") {
		t.Fatalf("New with a wrong KEK: %v; want a refusal that says why", err)
	}
}

func TestRotationThroughPreviousKEK(t *testing.T) {
	dir := t.TempDir()
	h := start(t, dir, nil)
	h.put(t, "ANTHROPIC_API_KEY", "sk-ant-rotated")
	oldKEK := filepath.Join(dir, "vault", "kek")
	newKEK := filepath.Join(t.TempDir(), "new-kek")
	if err := os.WriteFile(newKEK, []byte("AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8="), 0o600); err != nil {
		t.Fatal(err)
	}
	svc, err := vault.New(t.Context(), vault.Config{DataDir: dir, KEKFile: newKEK, PreviousKEKFile: oldKEK, LookupEnv: env(nil)}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatalf("rotate: %v", err)
	}
	svc.Close()
	// The new key alone now opens the store.
	svc, err = vault.New(t.Context(), vault.Config{DataDir: dir, KEKFile: newKEK, LookupEnv: env(nil)}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatalf("open with the new key: %v", err)
	}
	svc.Close()
	audit, _ := os.ReadFile(filepath.Join(dir, "vault", "audit.log"))
	if !strings.Contains(string(audit), `"op":"rotate"`) {
		t.Error("rotation was not audited")
	}
}

func TestEveryOperationIsAudited(t *testing.T) {
	h := start(t, t.TempDir(), nil)
	ctx := t.Context()
	h.put(t, "OPENAI_API_KEY", "sk-1")
	h.client.GetSecret(ctx, &vaultv1.GetSecretRequest{Name: "OPENAI_API_KEY"})
	h.client.ListSecrets(ctx, &vaultv1.ListSecretsRequest{})
	h.client.ResolveCredentials(h.as(ctx, "llmgateway"), &vaultv1.ResolveCredentialsRequest{Names: []string{"OPENAI_API_KEY"}})
	h.client.ResolveCredentials(h.as(ctx, "agent"), &vaultv1.ResolveCredentialsRequest{Names: []string{"OPENAI_API_KEY"}})
	h.client.DeleteSecret(ctx, &vaultv1.DeleteSecretRequest{Name: "OPENAI_API_KEY"})
	data, err := os.ReadFile(filepath.Join(h.dataDir, "vault", "audit.log"))
	if err != nil {
		t.Fatal(err)
	}
	var ops []string
	for line := range strings.Lines(string(data)) {
		op := line[strings.Index(line, `"op":"`)+6:]
		caller := line[strings.Index(line, `"caller":"`)+10:]
		outcome := line[strings.Index(line, `"outcome":"`)+11:]
		ops = append(ops, op[:strings.IndexByte(op, '"')]+"/"+caller[:strings.IndexByte(caller, '"')]+"/"+outcome[:strings.IndexByte(outcome, '"')])
	}
	want := []string{"put/admin/OK", "get/admin/OK", "list/admin/OK", "resolve/llmgateway/OK", "resolve/agent/PermissionDenied", "delete/admin/OK"}
	if diff := cmp.Diff(want, ops); diff != "" {
		t.Errorf("audit ops (-want +got):\n%s", diff)
	}
}

// TestCanaryNeverLeaks plants a secret value and checks it appears in no log
// line, audit entry, error message or response other than resolution.
func TestCanaryNeverLeaks(t *testing.T) {
	const canary = "sk-CANARY-7f3a9b2c-do-not-print"
	dir := t.TempDir()
	h := start(t, dir, map[string]string{"GROQ_API_KEY": canary + "-env"})
	ctx := t.Context()
	var printed []string
	note := func(v any, err error) {
		if m, ok := v.(proto.Message); ok && m != nil {
			printed = append(printed, prototext.Format(m))
		}
		if err != nil {
			printed = append(printed, err.Error())
		}
	}
	note(h.client.PutSecret(ctx, &vaultv1.PutSecretRequest{Name: "OPENAI_API_KEY", Value: canary}))
	note(h.client.PutSecret(ctx, &vaultv1.PutSecretRequest{Name: "OPENAI_API_KEY", Value: canary, ExpectedVersion: proto.Int64(7)}))
	note(h.client.PutSecret(ctx, &vaultv1.PutSecretRequest{Name: "bad name", Value: canary}))
	note(h.client.GetSecret(ctx, &vaultv1.GetSecretRequest{Name: "OPENAI_API_KEY"}))
	note(h.client.ListSecrets(ctx, &vaultv1.ListSecretsRequest{}))
	note(h.client.ResolveCredentials(h.as(ctx, "agent"), &vaultv1.ResolveCredentialsRequest{Names: []string{"OPENAI_API_KEY", "GROQ_API_KEY"}}))
	resolved, err := h.client.ResolveCredentials(h.as(ctx, "llmgateway"), &vaultv1.ResolveCredentialsRequest{Names: []string{"OPENAI_API_KEY", "GROQ_API_KEY"}})
	if err != nil || len(resolved.GetCredentials()) != 2 {
		t.Fatalf("resolve: %v %v", resolved, err)
	}
	note(h.client.DeleteSecret(ctx, &vaultv1.DeleteSecretRequest{Name: "OPENAI_API_KEY", Version: proto.Int64(9)}))

	audit, _ := os.ReadFile(filepath.Join(dir, "vault", "audit.log"))
	store, _ := os.ReadFile(filepath.Join(dir, "vault", "secrets.db"))
	printed = append(printed, h.logs.String(), string(audit), string(store))
	for i, p := range printed {
		if strings.Contains(p, "CANARY") {
			t.Errorf("output %d contains the canary: %s", i, p)
		}
	}
}

func TestCorruptRecordIsReportedAlone(t *testing.T) {
	dir := t.TempDir()
	h := start(t, dir, nil)
	h.put(t, "GOOD_API_KEY", "good")
	h.put(t, "BAD_API_KEY", "bad")
	path := filepath.Join(dir, "vault", "secrets.db")
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	// Cut the BAD record's line short: it no longer decodes.
	var out []string
	for _, line := range strings.Split(string(data), "\n") {
		if strings.HasPrefix(line, "BAD_API_KEY\t") {
			line = line[:40]
		}
		out = append(out, line)
	}
	if err := os.WriteFile(path, []byte(strings.Join(out, "\n")), 0o600); err != nil {
		t.Fatal(err)
	}

	h = start(t, dir, nil)
	ctx := h.as(t.Context(), "llmgateway")
	_, err = h.client.ResolveCredentials(ctx, &vaultv1.ResolveCredentialsRequest{Names: []string{"BAD_API_KEY"}})
	if code(err) != codes.DataLoss || !strings.Contains(err.Error(), "BAD_API_KEY") {
		t.Errorf("resolve corrupt = %v, want DataLoss naming the secret", err)
	}
	resp, err := h.client.ResolveCredentials(ctx, &vaultv1.ResolveCredentialsRequest{Names: []string{"GOOD_API_KEY"}})
	if err != nil || resp.GetCredentials()[0].GetValue() != "good" {
		t.Errorf("resolve good = %v, %v", resp, err)
	}
	list, err := h.client.ListSecrets(t.Context(), &vaultv1.ListSecretsRequest{})
	if err != nil || len(list.GetSecrets()) != 1 || !cmp.Equal(list.GetCorruptNames(), []string{"BAD_API_KEY"}) {
		t.Errorf("list = %v, %v; want GOOD listed and BAD reported corrupt", list, err)
	}
}

// TestRollbackRefusesToStart: the store put back from an older copy (a
// deleted secret in it) stops the vault at start, naming both
// generations; -vault-accept-rollback starts it, logged as an error and
// audited; a counter kept elsewhere (-vault-rollback-counter-file) still
// catches a whole data directory put back.
func TestRollbackRefusesToStart(t *testing.T) {
	dir := t.TempDir()
	storePath := filepath.Join(dir, "vault", "secrets.db")
	h := start(t, dir, nil)
	h.put(t, "OPENAI_API_KEY", "sk-old")
	h.put(t, "REVOKED_KEY", "sk-revoked")
	backup, err := os.ReadFile(storePath)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.client.DeleteSecret(t.Context(), &vaultv1.DeleteSecretRequest{Name: "REVOKED_KEY"}); err != nil {
		t.Fatal(err)
	}
	h.put(t, "OPENAI_API_KEY", "sk-new")
	if err := os.WriteFile(storePath, backup, 0o600); err != nil {
		t.Fatal(err)
	}

	_, err = vault.New(t.Context(), vault.Config{DataDir: dir, LookupEnv: env(nil)}, slog.New(slog.DiscardHandler))
	if err == nil || !strings.Contains(err.Error(), "generation 3, older than its rollback counter") || !strings.Contains(err.Error(), "at generation 5") {
		t.Fatalf("New with an older store: %v, want a refusal naming generations 3 (creation and two puts) and 5", err)
	}

	logs := &syncBuffer{}
	svc, err := vault.New(t.Context(), vault.Config{DataDir: dir, LookupEnv: env(nil), AcceptRollback: true}, slog.New(slog.NewJSONHandler(logs, nil)))
	if err != nil {
		t.Fatalf("New with -vault-accept-rollback: %v", err)
	}
	svc.Close()
	if !strings.Contains(logs.String(), `"level":"ERROR","msg":"vault store rollback accepted`) ||
		!strings.Contains(logs.String(), `"store_generation":3`) || !strings.Contains(logs.String(), `"counter_generation":5`) {
		t.Errorf("no rollback line in the log: %s", logs)
	}
	if audit, _ := os.ReadFile(filepath.Join(dir, "vault", "audit.log")); !strings.Contains(string(audit), `"op":"accept-rollback"`) {
		t.Errorf("the acceptance is not audited: %s", audit)
	}

	// The counter on another volume: the whole data directory put back.
	other, dir2 := filepath.Join(t.TempDir(), "generation"), t.TempDir()
	cfg := vault.Config{DataDir: dir2, LookupEnv: env(nil), CounterFile: other}
	v1, err := vault.New(t.Context(), cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	v1.Close()
	snapshot, _ := os.ReadFile(filepath.Join(dir2, "vault", "secrets.db"))
	v2, err := vault.New(t.Context(), cfg, slog.New(slog.DiscardHandler)) // a restart writes nothing
	if err != nil {
		t.Fatal(err)
	}
	v2.Close()
	h2 := startWith(t, cfg)
	h2.put(t, "ANTHROPIC_API_KEY", "sk-1")
	if err := os.WriteFile(filepath.Join(dir2, "vault", "secrets.db"), snapshot, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := vault.New(t.Context(), cfg, slog.New(slog.DiscardHandler)); err == nil || !strings.Contains(err.Error(), other) {
		t.Errorf("the restored data directory with the counter elsewhere: %v, want refused naming %s", err, other)
	}
}
