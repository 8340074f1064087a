// Package authtest gives tests a real token store in a temporary directory
// and the interceptors that verify against it, so bufconn servers
// authenticate exactly as served ones do.
package authtest

import (
	"context"
	"log/slog"
	"path/filepath"
	"testing"

	"google.golang.org/grpc"

	"github.com/fabro-sh/fabro-go/platform/auth"
)

// Fixture is a token store for one test.
type Fixture struct {
	t     testing.TB
	Store *auth.Store
}

// New returns a fixture with an empty store under t.TempDir().
func New(t testing.TB) *Fixture {
	return &Fixture{t: t, Store: auth.OpenStore(filepath.Join(t.TempDir(), "auth", "tokens.json"))}
}

// Token issues a token for a person (RoleAdmin, RoleUser) or, with
// RoleService, for the service name.
func (f *Fixture) Token(name string, role auth.Role) string {
	f.t.Helper()
	var (
		v   string
		err error
	)
	if role == auth.RoleService {
		v, err = f.Store.IssueService(name)
	} else {
		v, _, err = f.Store.Issue(name, role)
	}
	if err != nil {
		f.t.Fatal(err)
	}
	return v
}

// ServerOptions are grpc.NewServer options that authenticate and authorize
// every call against the fixture's store, as platform/server does.
func (f *Fixture) ServerOptions() []grpc.ServerOption {
	ic := &auth.Interceptor{Verifier: f.Store, Logger: slog.New(slog.DiscardHandler)}
	return []grpc.ServerOption{grpc.ChainUnaryInterceptor(ic.Unary), grpc.ChainStreamInterceptor(ic.Watch, ic.Stream)}
}

// Bearer is a grpc.DialOption presenting token on every call.
func Bearer(token string) grpc.DialOption {
	return grpc.WithPerRPCCredentials(bearer(token))
}

type bearer string

func (b bearer) GetRequestMetadata(_ context.Context, _ ...string) (map[string]string, error) {
	return map[string]string{"authorization": "Bearer " + string(b)}, nil
}
func (bearer) RequireTransportSecurity() bool { return false }
