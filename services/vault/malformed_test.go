package vault_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"

	vaultv1 "github.com/fabro-sh/fabro-go/gen/fabro/vault/v1"
	"github.com/fabro-sh/fabro-go/platform/auth"
	"github.com/fabro-sh/fabro-go/platform/auth/authtest"
	"github.com/fabro-sh/fabro-go/platform/grpcerr"
	"github.com/fabro-sh/fabro-go/platform/server"
	"github.com/fabro-sh/fabro-go/platform/server/malformedtest"
	"github.com/fabro-sh/fabro-go/services/vault"
)

// served runs the vault in the real server runtime (codec, request checks,
// authentication) and returns a connection and a context per principal.
func served(t *testing.T) (*grpc.ClientConn, func(principal string) context.Context) {
	t.Helper()
	logger := slog.New(slog.NewTextHandler(t.Output(), nil))
	svc, err := vault.New(t.Context(), vault.Config{DataDir: t.TempDir(), LookupEnv: env(nil)}, logger)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { svc.Close() })
	fx := authtest.New(t)
	srv, err := server.Start(t.Context(), server.Config{GRPCAddr: "127.0.0.1:0", Auth: fx.Store}, logger, svc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
	})
	conn, err := grpc.NewClient(srv.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	tokens := map[string]string{"admin": fx.Token("admin", auth.RoleAdmin), "llmgateway": fx.Token("llmgateway", auth.RoleService)}
	return conn, func(p string) context.Context {
		return metadata.AppendToOutgoingContext(t.Context(), "authorization", "Bearer "+tokens[p])
	}
}

// asAllowed is the principal each vault method admits.
func asAllowed(as func(string) context.Context) func(string) context.Context {
	return func(method string) context.Context {
		if method == "ResolveCredentials" {
			return as("llmgateway")
		}
		return as("admin")
	}
}

func TestMalformedWire(t *testing.T) {
	conn, as := served(t)
	malformedtest.Wire(t, asAllowed(as), conn, vaultv1.File_fabro_vault_v1_vault_proto.Services().ByName("VaultService"))
}

// TestMalformedInput: every field of every vault request with a rule, at a
// zero, unknown or out-of-range value.
func TestMalformedInput(t *testing.T) {
	conn, as := served(t)
	c := vaultv1.NewVaultServiceClient(conn)
	admin, gw := as("admin"), as("llmgateway")
	if _, err := c.PutSecret(admin, &vaultv1.PutSecretRequest{Name: "OPENAI_API_KEY", Value: "sk-1"}); err != nil {
		t.Fatal(err)
	}
	const invalid = grpcerr.ReasonInvalidArgument
	call := func(f func() error) func(context.Context) error { return func(context.Context) error { return f() } }
	put := func(r *vaultv1.PutSecretRequest) func(context.Context) error {
		return call(func() error { _, err := c.PutSecret(admin, r); return err })
	}
	get := func(r *vaultv1.GetSecretRequest) func(context.Context) error {
		return call(func() error { _, err := c.GetSecret(admin, r); return err })
	}
	del := func(r *vaultv1.DeleteSecretRequest) func(context.Context) error {
		return call(func() error { _, err := c.DeleteSecret(admin, r); return err })
	}
	resolve := func(r *vaultv1.ResolveCredentialsRequest) func(context.Context) error {
		return call(func() error { _, err := c.ResolveCredentials(gw, r); return err })
	}
	malformedtest.Table(t, t.Context(), vaultv1.File_fabro_vault_v1_vault_proto.Services().ByName("VaultService"), "vault.fabro.dev", []malformedtest.Case{
		{Method: "PutSecret", Name: "no name", Call: put(&vaultv1.PutSecretRequest{Value: "x"}), Code: codes.InvalidArgument, Reason: invalid, Field: "name"},
		{Method: "PutSecret", Name: "lower-case name", Call: put(&vaultv1.PutSecretRequest{Name: "openai key", Value: "x"}), Code: codes.InvalidArgument, Reason: invalid, Field: "name"},
		{Method: "PutSecret", Name: "no value", Call: put(&vaultv1.PutSecretRequest{Name: "A_KEY"}), Code: codes.InvalidArgument, Reason: invalid, Field: "value"},
		{Method: "PutSecret", Name: "negative expected_version", Call: put(&vaultv1.PutSecretRequest{Name: "A_KEY", Value: "x", ExpectedVersion: proto.Int64(-1)}), Code: codes.InvalidArgument, Reason: invalid, Field: "expected_version"},
		{Method: "PutSecret", Name: "stale expected_version", Call: put(&vaultv1.PutSecretRequest{Name: "OPENAI_API_KEY", Value: "x", ExpectedVersion: proto.Int64(7)}), Code: codes.Aborted, Reason: "VERSION_CONFLICT"},
		{Method: "GetSecret", Name: "no name", Call: get(&vaultv1.GetSecretRequest{}), Code: codes.InvalidArgument, Reason: invalid, Field: "name"},
		{Method: "GetSecret", Name: "not a name", Call: get(&vaultv1.GetSecretRequest{Name: "a/b"}), Code: codes.InvalidArgument, Reason: invalid, Field: "name"},
		{Method: "GetSecret", Name: "unknown", Call: get(&vaultv1.GetSecretRequest{Name: "NOPE_KEY"}), Code: codes.NotFound, Reason: "SECRET_NOT_FOUND"},
		{Method: "ListSecrets", Name: "zero request", Call: call(func() error { _, err := c.ListSecrets(admin, &vaultv1.ListSecretsRequest{}); return err }), Code: codes.OK},
		{Method: "ListSecrets", Name: "prefix matching nothing", Call: call(func() error {
			_, err := c.ListSecrets(admin, &vaultv1.ListSecretsRequest{Prefix: "\u00e9t\u00e9"})
			return err
		}), Code: codes.OK},
		{Method: "DeleteSecret", Name: "no name", Call: del(&vaultv1.DeleteSecretRequest{}), Code: codes.InvalidArgument, Reason: invalid, Field: "name"},
		{Method: "DeleteSecret", Name: "not a name", Call: del(&vaultv1.DeleteSecretRequest{Name: "x y"}), Code: codes.InvalidArgument, Reason: invalid, Field: "name"},
		{Method: "DeleteSecret", Name: "version zero", Call: del(&vaultv1.DeleteSecretRequest{Name: "OPENAI_API_KEY", Version: proto.Int64(0)}), Code: codes.InvalidArgument, Reason: invalid, Field: "version"},
		{Method: "DeleteSecret", Name: "negative version", Call: del(&vaultv1.DeleteSecretRequest{Name: "OPENAI_API_KEY", Version: proto.Int64(-3)}), Code: codes.InvalidArgument, Reason: invalid, Field: "version"},
		{Method: "DeleteSecret", Name: "expected_version zero", Call: del(&vaultv1.DeleteSecretRequest{Name: "OPENAI_API_KEY", ExpectedVersion: proto.Int64(0)}), Code: codes.InvalidArgument, Reason: invalid, Field: "expected_version"},
		{Method: "DeleteSecret", Name: "version that never was", Call: del(&vaultv1.DeleteSecretRequest{Name: "OPENAI_API_KEY", Version: proto.Int64(99)}), Code: codes.NotFound, Reason: "SECRET_NOT_FOUND"},
		{Method: "DeleteSecret", Name: "unknown", Call: del(&vaultv1.DeleteSecretRequest{Name: "NOPE_KEY"}), Code: codes.NotFound, Reason: "SECRET_NOT_FOUND"},
		{Method: "ResolveCredentials", Name: "no names", Call: resolve(&vaultv1.ResolveCredentialsRequest{}), Code: codes.InvalidArgument, Reason: invalid, Field: "names"},
		{Method: "ResolveCredentials", Name: "empty name", Call: resolve(&vaultv1.ResolveCredentialsRequest{Names: []string{"OPENAI_API_KEY", ""}}), Code: codes.InvalidArgument, Reason: invalid, Field: "names[1]"},
		{Method: "ResolveCredentials", Name: "not a name", Call: resolve(&vaultv1.ResolveCredentialsRequest{Names: []string{"openai"}}), Code: codes.InvalidArgument, Reason: invalid, Field: "names[0]"},
		{Method: "ResolveCredentials", Name: "outside the policy", Call: resolve(&vaultv1.ResolveCredentialsRequest{Names: []string{"GITHUB_TOKEN"}}), Code: codes.PermissionDenied, Reason: "DENIED"},
	})
}
