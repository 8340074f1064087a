// Package vaultclient resolves credentials from the vault service on behalf
// of one fabro service. The service's own token is presented by the
// connection (platform/grpcclient), so the vault knows which service asks.
// Values it returns must never be logged.
package vaultclient

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	vaultv1 "github.com/fabro-sh/fabro-go/gen/fabro/vault/v1"
	"github.com/fabro-sh/fabro-go/platform/grpcclient"
)

// ErrNoToken wraps the reason the caller has no service token.
var ErrNoToken = errors.New("no vault service token")

// Resolver is the vault client method this package calls;
// vaultv1.VaultServiceClient is one.
type Resolver interface {
	ResolveCredentials(ctx context.Context, in *vaultv1.ResolveCredentialsRequest, opts ...grpc.CallOption) (*vaultv1.ResolveCredentialsResponse, error)
}

// Client resolves credentials with one service's token.
type Client struct {
	vault Resolver
	token func() (string, error)
}

// New returns a Client calling vault. With no token source the connection
// presents the service's token (grpcclient.Options.Token); with one, each
// call presents what it returns.
func New(vault Resolver, token ...func() (string, error)) *Client {
	c := &Client{vault: vault}
	if len(token) > 0 {
		c.token = token[0]
	}
	return c
}

// Resolve returns the values the vault holds or falls back to for names,
// and the names with no value. A vault error is returned as the vault's
// gRPC status; a missing token wraps [ErrNoToken].
func (c *Client) Resolve(ctx context.Context, names []string) (values map[string]string, missing []string, err error) {
	if c.token != nil {
		tok, err := c.token()
		if err != nil {
			return nil, nil, fmt.Errorf("%w: %w", ErrNoToken, err)
		}
		ctx = metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+tok)
	}
	resp, err := c.vault.ResolveCredentials(ctx, &vaultv1.ResolveCredentialsRequest{Names: names})
	if err != nil {
		if st, ok := status.FromError(err); ok && st.Code() == codes.Unauthenticated && errorsContainNoToken(st.Message()) {
			return nil, nil, fmt.Errorf("%w: %s", ErrNoToken, st.Message())
		}
		return nil, nil, err
	}
	values = make(map[string]string, len(resp.GetCredentials()))
	for _, cr := range resp.GetCredentials() {
		values[cr.GetName()] = cr.GetValue()
	}
	return values, resp.GetMissing(), nil
}

// errorsContainNoToken recognizes the client-side status grpcclient returns
// when its token source fails (the call never left the process).
func errorsContainNoToken(msg string) bool {
	return strings.HasPrefix(msg, grpcclient.ErrNoToken.Error())
}
