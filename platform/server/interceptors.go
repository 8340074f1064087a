package server

import (
	"context"
	"log/slog"
	"runtime/debug"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/fabro-sh/fabro-go/platform/auth"
)

// errInternal is the only text a client sees for a panic or an error that
// was not deliberately turned into a status.
var errInternal = Domain.Internal("internal error")

// interceptors bundles the server-side middleware.
type interceptors struct {
	logger *slog.Logger
	auth   *auth.Interceptor // nil: no authentication (Config.NoAuth)
	// loopback is this process's secret marking the REST gateway's own
	// calls: the HTTP access log has logged them already, so the request
	// log skips them (one line per REST request, not two). It is random
	// per process, so no outside caller can hide its calls from the log.
	loopback string
}

// loopbackKey is the metadata key carrying the loopback secret.
const loopbackKey = "fabro-rest-loopback"

// fromREST reports whether ctx is a call of this process's REST gateway.
func (i interceptors) fromREST(ctx context.Context) bool {
	if i.loopback == "" {
		return false
	}
	v := metadata.ValueFromIncomingContext(ctx, loopbackKey)
	return len(v) == 1 && v[0] == i.loopback
}

// The chains run, outermost first: panic recovery, request log,
// authentication and authorization, the request check (malformed bytes,
// unknown enum values: INVALID_ARGUMENT before the handler), error
// sanitizing.
func (i interceptors) unary() []grpc.UnaryServerInterceptor {
	c := []grpc.UnaryServerInterceptor{i.recoverUnary, i.logUnary}
	if i.auth != nil {
		c = append(c, i.auth.Unary)
	}
	return append(c, checkUnary, i.sanitizeUnary)
}

func (i interceptors) stream() []grpc.StreamServerInterceptor {
	c := []grpc.StreamServerInterceptor{i.recoverStream, i.logStream}
	if i.auth != nil {
		c = append(c, i.auth.Stream)
	}
	return append(c, checkStream, i.sanitizeStream)
}

// watchStream ends a stream whose credential is revoked (auth.Watch); it
// runs before every other stream interceptor, so the contexts they derive
// carry its cancellation.
func (i interceptors) watchStream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	if i.auth == nil {
		return handler(srv, ss)
	}
	return i.auth.Watch(srv, ss, info, handler)
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
	if i.fromREST(ctx) {
		return handler(ctx, req)
	}
	start, done := time.Now(), false
	defer func() { i.logRequest(ctx, info.FullMethod, start, err, done) }()
	resp, err = handler(ctx, req)
	done = true
	return resp, err
}

func (i interceptors) logStream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) (err error) {
	if i.fromREST(ss.Context()) {
		return handler(srv, ss)
	}
	start, done := time.Now(), false
	ts := &trailerStream{ServerStream: ss}
	defer func() {
		logged := err
		if err == nil && ts.inBand != nil {
			logged = ts.inBand
		}
		i.logRequest(ss.Context(), info.FullMethod, start, logged, done)
	}()
	err = handler(srv, ts)
	done = true
	return err
}

// StreamErrorTrailer is the trailer a streaming handler sets when its
// stream failed in band (a terminal error event) while the RPC itself ends
// OK: its values are the gRPC code's name (e.g. "Unavailable") and the
// error message. The access log then reports that code, not OK. It is a
// note to the interceptor only and never reaches the client: the message is
// upstream text that a trailer could not carry (newlines, non-ASCII).
const StreamErrorTrailer = "fabro-stream-error"

// trailerStream sees the handler's trailers for StreamErrorTrailer.
type trailerStream struct {
	grpc.ServerStream
	inBand error
}

func (t *trailerStream) SetTrailer(md metadata.MD) {
	if v := md.Get(StreamErrorTrailer); len(v) > 0 {
		c := codeNamed(v[0])
		msg := ""
		if len(v) > 1 {
			msg = v[1]
		}
		t.inBand = status.Error(c, msg)
		md = md.Copy()
		delete(md, StreamErrorTrailer)
		if md.Len() == 0 {
			return
		}
	}
	t.ServerStream.SetTrailer(md)
}

// codeNamed is the code whose String is name ("DeadlineExceeded"); Unknown
// for a name no code has.
func codeNamed(name string) codes.Code {
	for c := codes.OK; c <= codes.Unauthenticated; c++ {
		if c.String() == name {
			return c
		}
	}
	return codes.Unknown
}

// sanitize decides what a handler error looks like on the wire:
//   - an error whose own type implements GRPCStatus (a status error made on
//     purpose) passes through, details included, and gains an ErrorInfo of
//     this domain if it has none (grpc's own Unimplemented, a bare status);
//   - a context error becomes Canceled or DeadlineExceeded with the bare
//     context message;
//   - anything else, a wrapped status included, becomes Internal "internal
//     error", and the full chain is logged here only.
func (i interceptors) sanitize(ctx context.Context, method string, err error) error {
	if err == nil {
		return nil
	}
	if _, ok := err.(interface{ GRPCStatus() *status.Status }); ok {
		return Domain.Ensure(err)
	}
	if e := Domain.FromContext(err); e != nil {
		i.logger.DebugContext(ctx, "grpc handler ended by its context", "method", method, "error", err)
		return e
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
