// Package auth says who is calling and what they may call: bearer tokens
// (random, shown once, stored as SHA-256 hashes in one store file that every
// verifying service re-checks on each call), the principals they name
// (people with the admin or user role, and one principal per service), and
// the authorization table that maps every gRPC method to the principals
// allowed to call it, deny by default.
package auth

import (
	"context"
	"fmt"
)

// Role is what kind of principal a token names.
type Role string

// The roles. People are admins or users; each of fabro's services has its own
// principal with RoleService and the service's name.
const (
	RoleAdmin   Role = "admin"
	RoleUser    Role = "user"
	RoleService Role = "service"
)

// The names of the service principals.
const (
	ServiceLLMGateway = "llmgateway"
	ServiceAgent      = "agent"
	ServiceSandbox    = "sandbox"
)

// ServiceNames are the service principals fabro issues tokens for.
var ServiceNames = []string{ServiceLLMGateway, ServiceAgent, ServiceSandbox}

func (r Role) valid() bool { return r == RoleAdmin || r == RoleUser || r == RoleService }

// Principal is an authenticated caller.
type Principal struct {
	Name    string // a person's name, or the service's name
	Role    Role
	TokenID string // the public id of the token presented
}

// IsService reports whether p is the service principal name.
func (p Principal) IsService(name string) bool { return p.Role == RoleService && p.Name == name }

// String names p for logs: "admin:alice", "service:agent".
func (p Principal) String() string { return fmt.Sprintf("%s:%s", p.Role, p.Name) }

type principalKey struct{}

// WithPrincipal returns ctx carrying p; the server's interceptor puts the
// caller there.
func WithPrincipal(ctx context.Context, p Principal) context.Context {
	return context.WithValue(ctx, principalKey{}, p)
}

// FromContext returns the caller the interceptor authenticated, if any.
func FromContext(ctx context.Context) (Principal, bool) {
	p, ok := ctx.Value(principalKey{}).(Principal)
	return p, ok
}
