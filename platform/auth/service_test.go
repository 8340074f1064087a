package auth_test

import (
	"cmp"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	gocmp "github.com/google/go-cmp/cmp"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/testing/protocmp"

	authv1 "github.com/fabro-sh/fabro-go/gen/fabro/auth/v1"
	"github.com/fabro-sh/fabro-go/platform/auth"
	"github.com/fabro-sh/fabro-go/platform/grpcerr"
)

// TestTokenServicePagesAndGets lists tokens a page at a time while more are
// issued and some revoked between pages, and gets each by id.
func TestTokenServicePagesAndGets(t *testing.T) {
	ts := auth.NewTokenService(auth.OpenStore(filepath.Join(t.TempDir(), "tokens.json")))
	ctx := t.Context()
	var throughout []*authv1.Token
	for i := range 7 {
		resp, err := ts.CreateToken(ctx, &authv1.CreateTokenRequest{Role: authv1.Role_ROLE_USER, Name: fmt.Sprintf("user%d", i)})
		if err != nil {
			t.Fatal(err)
		}
		throughout = append(throughout, resp.GetToken())
	}
	// Oldest first; tokens of one second (the store's resolution) by id.
	slices.SortStableFunc(throughout, func(a, b *authv1.Token) int {
		return cmp.Or(a.GetCreateTime().AsTime().Compare(b.GetCreateTime().AsTime()), strings.Compare(a.GetTokenId(), b.GetTokenId()))
	})
	var listed []*authv1.Token
	for token := ""; ; {
		resp, err := ts.ListTokens(ctx, &authv1.ListTokensRequest{PageSize: 2, PageToken: token})
		if err != nil {
			t.Fatal(err)
		}
		listed = append(listed, resp.GetTokens()...)
		if token = resp.GetNextPageToken(); token == "" {
			break
		}
		extra, err := ts.CreateToken(ctx, &authv1.CreateTokenRequest{Role: authv1.Role_ROLE_USER, Name: "late"})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := ts.RevokeToken(ctx, &authv1.RevokeTokenRequest{TokenId: extra.GetToken().GetTokenId()}); err != nil {
			t.Fatal(err)
		}
	}
	if diff := gocmp.Diff(throughout, listed, protocmp.Transform()); diff != "" {
		t.Errorf("listed tokens (-want +got):\n%s", diff)
	}
	for _, tok := range throughout {
		got, err := ts.GetToken(ctx, &authv1.GetTokenRequest{TokenId: tok.GetTokenId()})
		if err != nil {
			t.Fatal(err)
		}
		if diff := gocmp.Diff(tok, got.GetToken(), protocmp.Transform()); diff != "" {
			t.Errorf("GetToken(%s) (-want +got):\n%s", tok.GetTokenId(), diff)
		}
	}
	for _, tt := range []struct {
		name   string
		err    error
		code   codes.Code
		reason string
	}{
		{"get without id", second(ts.GetToken(ctx, &authv1.GetTokenRequest{})), codes.InvalidArgument, grpcerr.ReasonInvalidArgument},
		{"get unknown id", second(ts.GetToken(ctx, &authv1.GetTokenRequest{TokenId: "nope"})), codes.NotFound, "TOKEN_NOT_FOUND"},
		{"forged page token", second(ts.ListTokens(ctx, &authv1.ListTokensRequest{PageToken: "b2Zmc2V0OjI"})), codes.InvalidArgument, grpcerr.ReasonInvalidArgument},
		{"negative page size", second(ts.ListTokens(ctx, &authv1.ListTokensRequest{PageSize: -3})), codes.InvalidArgument, grpcerr.ReasonInvalidArgument},
	} {
		if status.Code(tt.err) != tt.code || grpcerr.ReasonOf(tt.err) != tt.reason {
			t.Errorf("%s: %v, want %s %s", tt.name, tt.err, tt.code, tt.reason)
		}
	}
}

func second[T any](_ T, err error) error { return err }
