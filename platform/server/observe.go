package server

import (
	"context"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"strings"

	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/fabro-sh/fabro-go/platform/auth"
	"github.com/fabro-sh/fabro-go/platform/logging"
)

// observeRoutes adds /metrics (when the server has a metrics handler) and,
// when enabled, /debug/pprof/ to the REST port's mux. Both follow the
// server's authentication: an admin's bearer token, unless the server runs
// without authentication; /metrics also answers a scraper on a loopback
// address without one when Config.MetricsLoopbackOpen says so.
func (s *Server) observeRoutes(mux *http.ServeMux) {
	if s.cfg.Metrics != nil {
		mux.Handle("/metrics", only(s.adminOnly(s.cfg.Metrics, s.cfg.MetricsLoopbackOpen), http.MethodGet))
	}
	if s.cfg.Pprof {
		for path, h := range map[string]http.HandlerFunc{
			"/debug/pprof/": pprof.Index, "/debug/pprof/cmdline": pprof.Cmdline, "/debug/pprof/profile": pprof.Profile,
			"/debug/pprof/symbol": pprof.Symbol, "/debug/pprof/trace": pprof.Trace,
		} {
			mux.Handle(path, only(s.adminOnly(h, false), http.MethodGet))
		}
	}
}

// adminOnly serves next to a caller presenting an admin's token: 401
// without a valid one, 403 for any other principal.
func (s *Server) adminOnly(next http.Handler, loopbackOpen bool) http.Handler {
	if s.cfg.NoAuth {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if loopbackOpen && fromLoopback(r.RemoteAddr) {
			next.ServeHTTP(w, r)
			return
		}
		tok, ok := auth.ParseBearer(r.Header.Get("Authorization"))
		var p auth.Principal
		if ok {
			var err error
			p, err = s.cfg.Auth.Verify(tok)
			ok = err == nil
		}
		if !ok {
			w.Header().Set("WWW-Authenticate", "Bearer")
			restError(w, http.StatusUnauthorized, codes.Unauthenticated, "UNAUTHENTICATED",
				"missing or invalid credential: present \"Authorization: Bearer <token>\"")
			return
		}
		if p.Role != auth.RoleAdmin {
			restError(w, http.StatusForbidden, codes.PermissionDenied, "ADMIN_ONLY",
				"the credential presented does not allow this call (admin only)")
			return
		}
		next.ServeHTTP(w, r)
	})
}

func fromLoopback(remote string) bool {
	host, _, err := net.SplitHostPort(remote)
	if err != nil {
		return false
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// traceHTTP starts a server span per REST request, continuing the
// caller's traceparent when it is well formed (a malformed one is ignored
// and a new trace starts); the gateway's loopback client carries it on to
// the gRPC service. Probes and scrapes are not traced.
func traceHTTP(next http.Handler) http.Handler {
	return otelhttp.NewHandler(next, "fabro.rest",
		otelhttp.WithFilter(func(r *http.Request) bool {
			p := r.URL.Path
			return p != "/healthz" && p != "/metrics" && !strings.HasPrefix(p, "/debug/pprof/")
		}),
		otelhttp.WithSpanNameFormatter(func(_ string, r *http.Request) string { return r.Method + " " + r.URL.Path }),
	)
}

// logContextUnary and logContextStream put the RPC method, and the
// session_id of a request that names one, into the context's log
// attributes, so every line a handler logs names them (and, through the
// logging handler, the trace and span of the call).
func logContextUnary(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	ctx = logging.With(ctx, slog.String("rpc_method", info.FullMethod))
	if id := sessionID(req); id != "" {
		ctx = logging.With(ctx, slog.String("session_id", id))
	}
	return handler(ctx, req)
}

func logContextStream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	return handler(srv, &ctxStream{ServerStream: ss, ctx: logging.With(ss.Context(), slog.String("rpc_method", info.FullMethod))})
}

// ctxStream carries the log context; the first request received adds its
// session_id (a server-streaming handler receives before it reads the
// context).
type ctxStream struct {
	grpc.ServerStream
	ctx    context.Context
	tagged bool
}

func (s *ctxStream) Context() context.Context { return s.ctx }

func (s *ctxStream) RecvMsg(m any) error {
	err := s.ServerStream.RecvMsg(m)
	if err == nil && !s.tagged {
		s.tagged = true
		if id := sessionID(m); id != "" {
			s.ctx = logging.With(s.ctx, slog.String("session_id", id))
		}
	}
	return err
}

// sessionID is the string field session_id of a request message, if it
// has one.
func sessionID(m any) string {
	pm, ok := m.(proto.Message)
	if !ok {
		return ""
	}
	r := pm.ProtoReflect()
	fd := r.Descriptor().Fields().ByName("session_id")
	if fd == nil || fd.Kind() != protoreflect.StringKind || fd.IsList() {
		return ""
	}
	return r.Get(fd).String()
}
