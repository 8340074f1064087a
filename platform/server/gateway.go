package server

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/fabro-sh/fabro-go/gen/openapi"
	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/encoding/protojson"
)

// setupGateway dials the gRPC listener over loopback, registers every
// service's REST routes and builds the HTTP server.
func (s *Server) setupGateway(ctx context.Context, services []Service) error {
	conn, err := grpc.NewClient(dialTarget(s.grpcLis.Addr()),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithStatsHandler(otelgrpc.NewClientHandler()),
		grpc.WithDefaultCallOptions(
			grpc.MaxCallRecvMsgSize(s.cfg.MaxMsgBytes),
			grpc.MaxCallSendMsgSize(s.cfg.MaxMsgBytes),
		),
		grpc.WithUnaryInterceptor(func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
			return invoker(metadata.AppendToOutgoingContext(ctx, loopbackKey, s.loopback), method, req, reply, cc, opts...)
		}),
		grpc.WithStreamInterceptor(func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
			return streamer(metadata.AppendToOutgoingContext(ctx, loopbackKey, s.loopback), desc, cc, method, opts...)
		}),
		grpc.WithKeepaliveParams(keepalive.ClientParameters{
			Time: 30 * time.Second, Timeout: 10 * time.Second, PermitWithoutStream: true,
		}),
	)
	if err != nil {
		return fmt.Errorf("server: gateway loopback client: %w", err)
	}
	s.conn = conn

	gw := runtime.NewServeMux(
		runtime.WithMarshalerOption(runtime.MIMEWildcard, &runtime.HTTPBodyMarshaler{
			Marshaler: &runtime.JSONPb{
				MarshalOptions:   protojson.MarshalOptions{EmitUnpopulated: true},
				UnmarshalOptions: protojson.UnmarshalOptions{DiscardUnknown: true},
			},
		}),
	)
	for _, svc := range services {
		if err := svc.RegisterGateway(ctx, gw, conn); err != nil {
			return fmt.Errorf("server: register gateway for %s: %w", svc.Name(), err)
		}
	}

	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", s.healthz)
	mux.HandleFunc("GET /openapi.json", serveOpenAPI)
	mux.Handle("/", gw)
	for _, svc := range services {
		if m, ok := svc.(HTTPMounter); ok {
			m.MountHTTP(mux)
		}
	}

	s.http = &http.Server{
		Handler:           accessLog(s.logger, mux),
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

// dialTarget turns a listener address into one the loopback client can
// dial: an unspecified host (":7700", "0.0.0.0:7700", "[::]:7700") becomes
// 127.0.0.1. Go listens dual-stack on an unspecified address, so IPv4
// loopback reaches it even where ::1 does not exist (many containers).
func dialTarget(addr net.Addr) string {
	if ta, ok := addr.(*net.TCPAddr); ok && (ta.IP == nil || ta.IP.IsUnspecified()) {
		return net.JoinHostPort("127.0.0.1", fmt.Sprint(ta.Port))
	}
	return addr.String()
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

func serveOpenAPI(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(openapi.Document)
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
