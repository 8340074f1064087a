package server

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/pprof"
	"strings"

	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"google.golang.org/grpc"

	"github.com/fabro-sh/fabro-go/platform/logging"
)

// observeRoutes adds /metrics (when the server has a metrics handler) and,
// when enabled, /debug/pprof/ to the REST port's mux.
func (s *Server) observeRoutes(mux *http.ServeMux) {
	if s.cfg.Metrics != nil {
		mux.Handle("GET /metrics", s.cfg.Metrics)
	}
	if s.cfg.Pprof {
		mux.HandleFunc("GET /debug/pprof/", pprof.Index)
		mux.HandleFunc("GET /debug/pprof/cmdline", pprof.Cmdline)
		mux.HandleFunc("GET /debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("GET /debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("GET /debug/pprof/trace", pprof.Trace)
	}
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

// logContextUnary and logContextStream put the RPC method into the
// context's log attributes, so every line a handler logs names it (and,
// through the logging handler, the trace and span of the call).
func logContextUnary(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	return handler(logging.With(ctx, slog.String("rpc_method", info.FullMethod)), req)
}

func logContextStream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	return handler(srv, &ctxStream{ServerStream: ss, ctx: logging.With(ss.Context(), slog.String("rpc_method", info.FullMethod))})
}

type ctxStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s *ctxStream) Context() context.Context { return s.ctx }
