// Package vaultclient resolves credentials from the vault service on behalf
// of one fabro service, presenting that service's token. Values it returns
// must never be logged.
package vaultclient

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	vaultv1 "github.com/fabro-sh/fabro-go/gen/fabro/vault/v1"
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

	mu     sync.Mutex
	cached string
}

// New returns a Client calling vault with the token that token returns. The
// token is asked for on each resolution until it is found, so a tokens file
// the vault writes after this service starts is still picked up.
func New(vault Resolver, token func() (string, error)) *Client {
	return &Client{vault: vault, token: token}
}

func (c *Client) bearer() (string, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cached != "" {
		return c.cached, nil
	}
	t, err := c.token()
	if err != nil {
		return "", fmt.Errorf("%w: %w", ErrNoToken, err)
	}
	c.cached = t
	return t, nil
}

// Resolve returns the values the vault holds or falls back to for names,
// and the names with no value. A vault error is returned as the vault's
// gRPC status; a missing token wraps [ErrNoToken].
func (c *Client) Resolve(ctx context.Context, names []string) (values map[string]string, missing []string, err error) {
	tok, err := c.bearer()
	if err != nil {
		return nil, nil, err
	}
	ctx = metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+tok)
	resp, err := c.vault.ResolveCredentials(ctx, &vaultv1.ResolveCredentialsRequest{Names: names})
	if err != nil {
		return nil, nil, err
	}
	values = make(map[string]string, len(resp.GetCredentials()))
	for _, cr := range resp.GetCredentials() {
		values[cr.GetName()] = cr.GetValue()
	}
	return values, resp.GetMissing(), nil
}

// TokenFromFile reads service's token from a vault service tokens file (a
// JSON object from service name to token).
func TokenFromFile(path, service string) func() (string, error) {
	return func() (string, error) {
		b, err := os.ReadFile(path)
		if err != nil {
			return "", fmt.Errorf("read service tokens: %w", err)
		}
		var tokens map[string]string
		if err := json.Unmarshal(b, &tokens); err != nil {
			return "", fmt.Errorf("parse service tokens %s: %w", path, err)
		}
		t := tokens[service]
		if t == "" {
			return "", fmt.Errorf("service tokens %s has no %q entry", path, service)
		}
		return t, nil
	}
}

// TokenFrom returns the token source a service binary is configured with:
// the service's entry of tokensFile when it is set, else the value of the
// environment variable env.
func TokenFrom(tokensFile, service, env string, lookupEnv func(string) (string, bool)) func() (string, error) {
	if tokensFile != "" {
		return TokenFromFile(tokensFile, service)
	}
	return func() (string, error) {
		if t, ok := lookupEnv(env); ok && t != "" {
			return t, nil
		}
		return "", fmt.Errorf("set -service-token-file or $%s", env)
	}
}
