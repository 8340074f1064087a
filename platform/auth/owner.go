package auth

import (
	"context"
	"log/slog"

	"google.golang.org/grpc"
)

// Reach is how the caller of a call reaches a resource, decided by Reaches.
type Reach uint8

// The answers of Reaches.
const (
	// Unreachable: the resource is another person's. The service answers
	// as for an id that does not exist (NOT_FOUND), so ids are no oracle.
	Unreachable Reach = iota
	// Own: the caller owns it, or the server runs without authentication.
	Own
	// Service: a service principal acting for itself (the agent deleting
	// the sandbox of a session it closed idle); its grant is its limit.
	Service
	// AsAdmin: an admin reaching another principal's resource. Allowed,
	// and the service writes it to the audit log (Audit).
	AsAdmin
)

// Owner is the owner to record for a resource created by the caller of ctx:
// its principal as String writes it ("user:alice", or the person a service
// forwarded a call for), or "" without authentication.
func Owner(ctx context.Context) string {
	p, ok := FromContext(ctx)
	if !ok {
		return ""
	}
	return p.String()
}

// Reaches decides whether the caller of ctx may reach a resource recorded
// with owner (Owner at its creation). People reach their own; admins reach
// every resource; service principals reach what their grant allows (a
// service acting for a person is that person, by the forwarded principal).
// Without a principal (the server's authentication is off) all is reachable.
// It allocates nothing: it runs on every call naming a resource.
func Reaches(ctx context.Context, owner string) Reach {
	p, ok := FromContext(ctx)
	switch {
	case !ok:
		return Own
	case p.owns(owner):
		return Own
	case p.Role == RoleAdmin:
		return AsAdmin
	case p.Role == RoleService:
		return Service
	}
	return Unreachable
}

// owns reports whether owner is p.String(), without building it.
func (p Principal) owns(owner string) bool {
	r := string(p.Role)
	return len(owner) == len(r)+1+len(p.Name) && owner[:len(r)] == r && owner[len(r)] == ':' && owner[len(r)+1:] == p.Name
}

// Audit writes to log the audit line of an admin's call on another
// principal's resource: who, which call, what kind of resource, its id and
// its owner. The line is the access log's, at WARN with audit=true, so an
// operator finds every such reach with one filter.
func Audit(ctx context.Context, log *slog.Logger, kind, id, owner string) {
	method, _ := grpc.Method(ctx)
	log.LogAttrs(ctx, slog.LevelWarn, "admin reached another principal's resource",
		slog.Bool("audit", true), slog.String("principal", Owner(ctx)), slog.String("method", method),
		slog.String("resource", kind), slog.String("id", id), slog.String("owner", owner))
}

// Allow is Reaches for a call on one resource: it reports whether the call
// may proceed, and audits an admin's reach into another's.
func Allow(ctx context.Context, log *slog.Logger, kind, id, owner string) bool {
	switch Reaches(ctx, owner) {
	case Unreachable:
		return false
	case AsAdmin:
		Audit(ctx, log, kind, id, owner)
	}
	return true
}
