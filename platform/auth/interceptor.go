package auth

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"

	"github.com/fabro-sh/fabro-go/platform/grpcerr"
	"github.com/fabro-sh/fabro-go/platform/logging"
)

// ErrorDomain is the google.rpc.ErrorInfo domain of authentication and
// authorization errors.
const ErrorDomain = "auth.fabro.dev"

const domain grpcerr.Domain = ErrorDomain

// Verifier turns a token into the principal it names; *Store is one.
type Verifier interface {
	Verify(token string) (Principal, error)
}

// issuer is a Verifier that knows which token ids are issued (*Store).
type issuer interface{ Issued(id string) bool }

// Interceptor authenticates and authorizes every gRPC call against Table.
type Interceptor struct {
	Verifier Verifier
	Logger   *slog.Logger
	// AnonymousReflection lets callers without a credential use server
	// reflection, for local development.
	AnonymousReflection bool
	// Table overrides the package Table (tests).
	Table map[string]Grant
	// Recheck is how often an open stream re-checks its token (Watch);
	// 0 means DefaultRecheck.
	Recheck time.Duration

	// storeLog rate-limits the log line of an unusable token store, which
	// every call would otherwise repeat.
	storeLog logging.Limiter
}

// The two refusals. Their text is the same whatever the cause, so a caller
// learns nothing about tokens or resources from them.
var (
	errUnauthenticated  = refusal(codes.Unauthenticated, "missing or invalid credential: present \"authorization: Bearer <token>\"", "UNAUTHENTICATED")
	errPermissionDenied = refusal(codes.PermissionDenied, "the credential presented does not allow this call", "PERMISSION_DENIED")
	// A store that cannot be read is the server's fault, not the caller's:
	// UNAVAILABLE, worth a retry once the operator has fixed it.
	errStoreUnavailable = domain.New(codes.Unavailable, "CREDENTIAL_STORE_UNAVAILABLE",
		"the server cannot check credentials now: its token store is unusable (the operator is told in its log)", grpcerr.RetryAfter(5*time.Second))
)

func refusal(code codes.Code, msg, reason string) error {
	return domain.New(code, reason, msg)
}

// Authorize decides one call to method: it returns ctx carrying the caller's
// principal, or the UNAUTHENTICATED or PERMISSION_DENIED status.
func (a *Interceptor) Authorize(ctx context.Context, method string) (context.Context, error) {
	grant, known := a.table()[method]
	if a.AnonymousReflection && isReflection(method) {
		grant |= Open
	}
	if known && grant&Open != 0 {
		return ctx, nil
	}
	md, _ := metadata.FromIncomingContext(ctx)
	vals := md.Get("authorization")
	if len(vals) == 0 && isReflection(method) {
		// With no credential at all, reflection describes the health
		// service only: grpcurl can check health without a token, and
		// learns nothing else.
		return context.WithValue(ctx, healthOnlyKey{}, true), nil
	}
	var (
		p   Principal
		err error = ErrInvalidToken
	)
	if len(vals) == 1 {
		if tok, ok := ParseBearer(vals[0]); ok {
			p, err = a.Verifier.Verify(tok)
		}
	}
	if err != nil && !errors.Is(err, ErrInvalidToken) {
		if ok, held := a.storeLog.Allow(); ok {
			a.Logger.ErrorContext(ctx, "token store unusable: every call is refused", "error", err, "refusals_not_logged", held)
		}
		return nil, errStoreUnavailable
	}
	if err != nil {
		a.refused(ctx, method, "", codes.Unauthenticated)
		return nil, errUnauthenticated
	}
	if fwd := md.Get(ForwardedPrincipalHeader); len(fwd) > 0 {
		if p, err = forwarded(p, method, fwd, md.Get(ForwardedTokenIDHeader)); err != nil {
			a.refused(ctx, method, p.String(), codes.PermissionDenied)
			return nil, errPermissionDenied
		}
		// The token of the person's call must still be issued: a prompt
		// outliving its revoked token stops at its next call.
		if is, ok := a.Verifier.(issuer); ok && p.TokenID != "" && !is.Issued(p.TokenID) {
			a.refused(ctx, method, p.String(), codes.Unauthenticated)
			return nil, errUnauthenticated
		}
	}
	if !known || !grant.Allows(p) {
		a.refused(ctx, method, p.String(), codes.PermissionDenied)
		return nil, errPermissionDenied
	}
	return WithPrincipal(ctx, p), nil
}

type healthOnlyKey struct{}

// HealthOnlyReflection reports whether ctx is a reflection call made with
// no credential, which may describe grpc.health.v1 and nothing else.
func HealthOnlyReflection(ctx context.Context) bool {
	v, _ := ctx.Value(healthOnlyKey{}).(bool)
	return v
}

func (a *Interceptor) table() map[string]Grant {
	if a.Table == nil {
		return Table
	}
	return a.Table
}

func mdValues(ctx context.Context, key string) []string {
	md, _ := metadata.FromIncomingContext(ctx)
	return md.Get(key)
}

// refused logs a refusal with the principal and the method, never the token.
func (a *Interceptor) refused(ctx context.Context, method, principal string, code codes.Code) {
	attrs := []slog.Attr{slog.String("method", method), slog.String("code", code.String())}
	if principal != "" {
		attrs = append(attrs, slog.String("principal", principal))
	}
	if pr, ok := peer.FromContext(ctx); ok && pr.Addr != nil {
		attrs = append(attrs, slog.String("peer", pr.Addr.String()))
	}
	a.Logger.LogAttrs(ctx, slog.LevelWarn, "grpc call refused", attrs...)
}

// Unary is the unary server interceptor.
func (a *Interceptor) Unary(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	ctx, err := a.Authorize(ctx, info.FullMethod)
	if err != nil {
		return nil, err
	}
	return handler(ctx, req)
}

// Stream is the stream server interceptor.
func (a *Interceptor) Stream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	ctx, err := a.Authorize(ss.Context(), info.FullMethod)
	if err != nil {
		return err
	}
	p, ok := FromContext(ctx)
	switch {
	case HealthOnlyReflection(ctx):
		return handler(srv, healthOnlyStream{ss})
	case !ok:
		return handler(srv, ss) // an open method: no principal to add
	}
	err = handler(srv, &principalStream{ServerStream: ss, p: p})
	if revoked(ss.Context()) {
		a.refused(ss.Context(), info.FullMethod, p.String(), codes.Unauthenticated)
		return errStreamRevoked
	}
	return err
}

// healthOnlyStream marks a reflection stream without a credential.
type healthOnlyStream struct{ grpc.ServerStream }

func (s healthOnlyStream) Context() context.Context {
	return context.WithValue(s.ServerStream.Context(), healthOnlyKey{}, true)
}

// principalStream adds the principal to the context of the stream it
// wraps, asked anew each time: an inner stream's context can gain values
// after authentication (the session_id its first message names).
type principalStream struct {
	grpc.ServerStream
	p Principal
}

func (s *principalStream) Context() context.Context {
	return WithPrincipal(s.ServerStream.Context(), s.p)
}

// AuthorizeToken decides a call to method made outside gRPC with token, as
// the gateway's OpenAI- and Anthropic-compatible HTTP APIs are, whose
// callers give their fabro token as the API key.
func (a *Interceptor) AuthorizeToken(ctx context.Context, method, token string) (context.Context, error) {
	return a.Authorize(metadata.NewIncomingContext(ctx, metadata.Pairs("authorization", "Bearer "+token)), method)
}
