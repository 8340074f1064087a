package server

import (
	"context"
	"errors"
	"log/slog"
	"runtime/debug"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/fabro-sh/fabro-go/platform/auth"
)

// errInternal is the only text a client sees for a panic or an error that
// was not deliberately turned into a status.
var errInternal = status.Error(codes.Internal, "internal error")

// interceptors bundles the server-side middleware.
type interceptors struct {
	logger *slog.Logger
	auth   *auth.Interceptor // nil: no authentication (Config.NoAuth)
}

// The chains run, outermost first: panic recovery, request log,
// authentication and authorization, error sanitizing.
func (i interceptors) unary() []grpc.UnaryServerInterceptor {
	c := []grpc.UnaryServerInterceptor{i.recoverUnary, i.logUnary}
	if i.auth != nil {
		c = append(c, i.auth.Unary)
	}
	return append(c, i.sanitizeUnary)
}

func (i interceptors) stream() []grpc.StreamServerInterceptor {
	c := []grpc.StreamServerInterceptor{i.recoverStream, i.logStream}
	if i.auth != nil {
		c = append(c, i.auth.Stream)
	}
	return append(c, i.sanitizeStream)
}

// recovered logs a recovered panic with its stack and returns the generic
// Internal status.
func (i interceptors) recovered(ctx context.Context, method string, r any) error {
	i.logger.ErrorContext(ctx, "grpc handler panic",
		"method", method, "panic", r, "stack", string(debug.Stack()))
	return errInternal
}

func (i interceptors) recoverUnary(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (resp any, err error) {
	defer func() {
		if r := recover(); r != nil {
			resp, err = nil, i.recovered(ctx, info.FullMethod, r)
		}
	}()
	return handler(ctx, req)
}

func (i interceptors) recoverStream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = i.recovered(ss.Context(), info.FullMethod, r)
		}
	}()
	return handler(srv, ss)
}

// logRequest writes one line per RPC. A handler that panicked (done false)
// is logged as Internal; the recovery interceptor outside logs the panic.
func (i interceptors) logRequest(ctx context.Context, method string, start time.Time, err error, done bool) {
	code := status.Code(err)
	if !done {
		code = codes.Internal
	}
	attrs := []slog.Attr{
		slog.String("method", method),
		slog.String("code", code.String()),
		slog.Float64("duration_ms", float64(time.Since(start).Microseconds())/1000),
	}
	if p, ok := peer.FromContext(ctx); ok && p.Addr != nil {
		attrs = append(attrs, slog.String("peer", p.Addr.String()))
	}
	if !done {
		attrs = append(attrs, slog.Bool("panic", true))
	} else if err != nil {
		// Safe: the sanitizer inside has already reduced err to a public status.
		attrs = append(attrs, slog.String("error", status.Convert(err).Message()))
	}
	i.logger.LogAttrs(ctx, levelFor(method, code), "grpc request", attrs...)
}

func levelFor(method string, code codes.Code) slog.Level {
	switch code {
	case codes.OK:
		if strings.HasPrefix(method, "/grpc.health.v1.Health/") {
			return slog.LevelDebug // probes would drown everything else
		}
		return slog.LevelInfo
	case codes.Internal, codes.Unknown, codes.DataLoss:
		return slog.LevelError
	default:
		return slog.LevelWarn
	}
}

func (i interceptors) logUnary(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (resp any, err error) {
	start, done := time.Now(), false
	defer func() { i.logRequest(ctx, info.FullMethod, start, err, done) }()
	resp, err = handler(ctx, req)
	done = true
	return resp, err
}

func (i interceptors) logStream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) (err error) {
	start, done := time.Now(), false
	defer func() { i.logRequest(ss.Context(), info.FullMethod, start, err, done) }()
	err = handler(srv, ss)
	done = true
	return err
}

// sanitize decides what a handler error looks like on the wire:
//   - an error whose own type implements GRPCStatus (a status error made on
//     purpose) passes through unchanged, details included;
//   - a context error becomes Canceled or DeadlineExceeded with the bare
//     context message;
//   - anything else, a wrapped status included, becomes Internal "internal
//     error", and the full chain is logged here only.
func (i interceptors) sanitize(ctx context.Context, method string, err error) error {
	if err == nil {
		return nil
	}
	if _, ok := err.(interface{ GRPCStatus() *status.Status }); ok {
		return err
	}
	switch {
	case errors.Is(err, context.Canceled):
		i.logger.DebugContext(ctx, "grpc handler canceled", "method", method, "error", err)
		return status.FromContextError(context.Canceled).Err()
	case errors.Is(err, context.DeadlineExceeded):
		i.logger.DebugContext(ctx, "grpc handler deadline exceeded", "method", method, "error", err)
		return status.FromContextError(context.DeadlineExceeded).Err()
	}
	i.logger.ErrorContext(ctx, "grpc handler error", "method", method, "error", err)
	return errInternal
}

func (i interceptors) sanitizeUnary(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	resp, err := handler(ctx, req)
	if err != nil {
		return nil, i.sanitize(ctx, info.FullMethod, err)
	}
	return resp, nil
}

func (i interceptors) sanitizeStream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	return i.sanitize(ss.Context(), info.FullMethod, handler(srv, ss))
}
