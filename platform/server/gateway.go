package server

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/fabro-sh/fabro-go/gen/openapi"
	"github.com/fabro-sh/fabro-go/platform/auth"
	"github.com/fabro-sh/fabro-go/platform/grpcclient"
)

// setupGateway dials the gRPC listener over loopback, registers every
// service's REST routes and builds the HTTP server.
func (s *Server) setupGateway(ctx context.Context, services []Service) error {
	// In process, not over the network: no TLS or client certificate is
	// needed, and the caller's own Authorization header is forwarded (it
	// becomes "authorization" metadata), so the gRPC interceptors decide.
	conn, err := grpcclient.New("passthrough:///fabro-gateway", grpcclient.Options{
		MaxMsgBytes: s.cfg.MaxMsgBytes,
		Dialer:      s.DialInProcess,
		// The REST gateway's own calls carry this process's loopback
		// secret, so the request log skips them: the HTTP access log has
		// logged them already (one line per REST request, not two).
		Extra: []grpc.DialOption{
			grpc.WithUnaryInterceptor(func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
				return invoker(metadata.AppendToOutgoingContext(ctx, loopbackKey, s.loopback), method, req, reply, cc, opts...)
			}),
			grpc.WithStreamInterceptor(func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
				return streamer(metadata.AppendToOutgoingContext(ctx, loopbackKey, s.loopback), desc, cc, method, opts...)
			}),
		},
	})
	if err != nil {
		return fmt.Errorf("server: gateway loopback client: %w", err)
	}
	s.conn = conn

	installQueryParser()
	rs, err := docRoutes()
	if err != nil {
		return err
	}
	gw := runtime.NewServeMux(
		runtime.WithMarshalerOption(runtime.MIMEWildcard, ndjsonMarshaler{&runtime.HTTPBodyMarshaler{
			Marshaler: &runtime.JSONPb{
				// Zero scalars, empty lists and maps are written, so a
				// client sees every field; an unset message is left out
				// rather than written null, which the OpenAPI schemas (and
				// strict generators reading them) do not allow.
				MarshalOptions: protojson.MarshalOptions{EmitDefaultValues: true},
				// A misspelled field or enum name is an error, not a default.
				UnmarshalOptions: protojson.UnmarshalOptions{DiscardUnknown: false},
			},
		}}),
		// The gRPC transport's own headers (content-type: application/grpc)
		// say nothing to a REST client: they are not passed on as
		// Grpc-Metadata-*; a service's own metadata still is.
		runtime.WithOutgoingHeaderMatcher(restMetadata),
		runtime.WithOutgoingTrailerMatcher(restMetadata),
		runtime.WithErrorHandler(namedFieldErrors),
		runtime.WithRoutingErrorHandler(rs.routingErrors),
		// A stream's last line, {"error": ...}, has an ErrorInfo too.
		runtime.WithStreamErrorHandler(func(_ context.Context, err error) *status.Status {
			return withErrorInfo(status.Convert(err))
		}),
	)
	for _, svc := range services {
		if err := svc.RegisterGateway(ctx, gw, conn); err != nil {
			return fmt.Errorf("server: register gateway for %s: %w", svc.Name(), err)
		}
	}

	mux := http.NewServeMux()
	mux.Handle("/healthz", only(http.HandlerFunc(s.healthz), http.MethodGet))
	mux.Handle("/openapi.json", only(s.authenticated(serveOpenAPI(openapi.Document)), http.MethodGet))
	mux.Handle("/openapi.v3.json", only(s.authenticated(serveOpenAPI(openapi.DocumentV3)), http.MethodGet))
	s.observeRoutes(mux)
	mux.Handle("/", bareStreamErrors(gw))
	for _, svc := range services {
		if m, ok := svc.(HTTPMounter); ok {
			m.MountHTTP(mux)
		}
	}

	guard, err := newRESTGuard(s.httpLis.Addr(), s.cfg, mux)
	if err != nil {
		return err
	}
	guard.routes, guard.limits = rs, restLimits(services)
	s.http = &http.Server{
		Handler:           traceHTTP(accessLog(s.logger, guard)),
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       2 * time.Minute,
		// No WriteTimeout: streaming responses may run for many minutes.
		BaseContext: func(net.Listener) context.Context { return ctx },
		ErrorLog:    slog.NewLogLogger(s.logger.Handler(), slog.LevelWarn),
	}
	return nil
}

// HTTPMounter is implemented by a Service that also serves plain HTTP
// handlers on the REST port, beside its grpc-gateway routes: for example
// the LLM gateway's OpenAI- and Anthropic-compatible APIs. MountHTTP
// registers them on mux, under path prefixes of its own (the grpc-gateway
// owns "/", and every REST route starts with "/v1/"). The handlers get the
// same access log as the REST routes, and nothing else: they do their own
// authentication and error bodies.
type HTTPMounter interface {
	MountHTTP(mux *http.ServeMux)
}

func (s *Server) healthz(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	if s.draining.Load() {
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = w.Write([]byte("draining"))
		return
	}
	_, _ = w.Write([]byte("ok"))
}

// authenticated admits a request to a handler the gateway does not route
// through gRPC only with a valid token (any principal): every REST request
// but /healthz needs one.
func (s *Server) authenticated(h http.HandlerFunc) http.HandlerFunc {
	if s.cfg.NoAuth {
		return h
	}
	return func(w http.ResponseWriter, r *http.Request) {
		tok, ok := auth.ParseBearer(r.Header.Get("Authorization"))
		if ok {
			_, err := s.cfg.Auth.Verify(tok)
			ok = err == nil
		}
		if !ok || len(r.Header.Values("Authorization")) != 1 {
			restError(w, http.StatusUnauthorized, codes.Unauthenticated, "UNAUTHENTICATED", "missing or invalid credential: present \"authorization: Bearer <token>\"")
			return
		}
		h(w, r)
	}
}

func serveOpenAPI(doc []byte) http.HandlerFunc {
	return func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(doc)
	}
}

// accessLog logs one line per HTTP request.
func accessLog(logger *slog.Logger, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		rw := &statusWriter{ResponseWriter: w, status: http.StatusOK}
		next.ServeHTTP(rw, r)
		level := slog.LevelInfo
		switch {
		case rw.status >= 500:
			level = slog.LevelError
		case rw.status >= 400:
			level = slog.LevelWarn
		case r.URL.Path == "/healthz":
			level = slog.LevelDebug
		}
		logger.LogAttrs(r.Context(), level, "http request",
			slog.String("method", r.Method),
			slog.String("path", r.URL.Path),
			slog.Int("status", rw.status),
			slog.Int64("bytes", rw.bytes),
			slog.Float64("duration_ms", float64(time.Since(start).Microseconds())/1000),
			slog.String("remote", r.RemoteAddr),
		)
	})
}

// statusWriter records the status and size of a response. Unwrap lets
// http.ResponseController (used by the gateway for streaming) reach Flush.
type statusWriter struct {
	http.ResponseWriter
	status      int
	bytes       int64
	wroteHeader bool
}

func (w *statusWriter) WriteHeader(code int) {
	if !w.wroteHeader {
		w.status, w.wroteHeader = code, true
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	w.wroteHeader = true
	n, err := w.ResponseWriter.Write(b)
	w.bytes += int64(n)
	return n, err
}

func (w *statusWriter) Flush() {
	w.wroteHeader = true
	_ = http.NewResponseController(w.ResponseWriter).Flush()
}

func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// grpc-gateway keeps the query parameter parser in a package variable that
// runtime.SetQueryParameterParser writes from NewServeMux: set it once per
// process, before any mux serves, so that servers started concurrently (in
// one test binary) do not race on it.
var queryParserOnce sync.Once

func installQueryParser() {
	queryParserOnce.Do(func() { runtime.NewServeMux(runtime.SetQueryParameterParser(strictQuery{})) })
}

// restMetadata passes a gRPC response's metadata on to a REST client as
// Grpc-Metadata-<key>, as grpc-gateway does by default, except the
// transport's own.
func restMetadata(key string) (string, bool) {
	switch strings.ToLower(key) {
	case "content-type", "trailer", "grpc-status", "grpc-message", "grpc-status-details-bin":
		return "", false
	}
	return runtime.MetadataHeaderPrefix + key, true
}
