package gateway_test

import (
	"net"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	llmv1 "github.com/fabro-sh/fabro-go/gen/fabro/llm/v1"
	vaultv1 "github.com/fabro-sh/fabro-go/gen/fabro/vault/v1"
	"github.com/fabro-sh/fabro-go/platform/grpcclient"
	"github.com/fabro-sh/fabro-go/platform/grpcerr"
	"github.com/fabro-sh/fabro-go/services/llmgateway"
)

// The vault's answer passes through the gateway with its ErrorInfo and
// details, beside the gateway's ErrorDetail, not flattened to UNAVAILABLE;
// a vault that cannot be reached is UPSTREAM_UNAVAILABLE with RetryInfo.
func TestVaultErrorsPassThrough(t *testing.T) {
	_, conn, token := startVault(t, nil)
	creds := llmgateway.NewVaultCredentials(vaultv1.NewVaultServiceClient(conn), grpcclient.Static(token))
	bad := llmgateway.NewVaultCredentials(vaultv1.NewVaultServiceClient(conn), func() (string, error) { return "not-the-token-at-all", nil })
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
	unreachable := llmgateway.NewVaultCredentials(vaultv1.NewVaultServiceClient(gone), grpcclient.Static(token))
	tests := []struct {
		name          string
		creds         *llmgateway.VaultCredentials
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
