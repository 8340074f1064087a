// Package server is the runtime every fabro-go service binary shares: a gRPC
// server with health, reflection, OpenTelemetry, panic recovery, request
// logging and error sanitizing, plus an optional REST gateway that forwards
// through a loopback connection to the same gRPC listener. Start, then
// Shutdown; or Run, which does both around a context.
package server

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	goruntime "runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc/filters"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/test/bufconn"

	"github.com/fabro-sh/fabro-go/platform/auth"
	"github.com/fabro-sh/fabro-go/platform/listen"
)

// Service is one gRPC service plus its REST mapping.
type Service interface {
	// Name is the full gRPC service name, e.g. "fabro.vault.v1.VaultService";
	// it names the service in logs and in grpc.health.v1.
	Name() string
	// RegisterGRPC registers the implementation, e.g. with
	// vaultv1.RegisterVaultServiceServer.
	RegisterGRPC(s grpc.ServiceRegistrar)
	// RegisterGateway registers the REST routes, e.g. with
	// vaultv1.RegisterVaultServiceHandler(ctx, mux, conn).
	RegisterGateway(ctx context.Context, mux *runtime.ServeMux, conn *grpc.ClientConn) error
}

// Defaults for zero Config fields.
const (
	DefaultDrainTimeout     = 10 * time.Second
	DefaultMaxMsgBytes      = 64 << 20 // LLM requests carry long contexts and images
	DefaultKeepaliveTime    = time.Minute
	DefaultKeepaliveTimeout = 20 * time.Second
	DefaultKeepaliveMinTime = 15 * time.Second
)

// Config configures a Server. Zero values take the defaults above.
type Config struct {
	GRPCAddr string // gRPC listen address, e.g. "127.0.0.1:7700"; port 0 picks one
	HTTPAddr string // REST gateway listen address; "" disables the gateway

	// DrainDelay is how long Shutdown keeps accepting traffic after health
	// goes NOT_SERVING, so load balancers and probes notice first. Default 0.
	DrainDelay time.Duration
	// DrainTimeout bounds the graceful drain of in-flight RPCs and HTTP
	// requests; when it passes, remaining RPCs are cut off.
	DrainTimeout time.Duration
	// MaxMsgBytes is the receive and send limit per message, on the server
	// and on the gateway's loopback connection.
	MaxMsgBytes int

	// KeepaliveTime is how long a connection may be idle before the server
	// pings the client; KeepaliveTimeout is how long it waits for the ack.
	KeepaliveTime    time.Duration
	KeepaliveTimeout time.Duration
	// KeepaliveMinTime is the most frequent client ping the server
	// tolerates (pings are allowed without active streams, so idle LLM
	// streams through NATs and load balancers survive).
	KeepaliveMinTime time.Duration

	// TLS makes both listeners serve TLS, optionally verifying clients.
	TLS TLSConfig
	// Insecure allows listening on a non-loopback address without TLS (or
	// without authentication); a warning is logged at every start.
	Insecure bool

	// TokensFile is the token store every call is verified against
	// (see platform/auth); Auth, when set, replaces it (embedding, tests).
	TokensFile string
	Auth       auth.Verifier
	// NoAuth serves without authentication: for tests of other behaviour
	// and for embedding behind another gate. Refused on a non-loopback
	// address unless Insecure.
	NoAuth bool
	// AnonymousReflection lets callers without a credential use server
	// reflection (local development).
	AnonymousReflection bool
	// AuthRecheck is how often an open stream re-checks its credential
	// and ends UNAUTHENTICATED once it is revoked (0: auth.DefaultRecheck).
	// A revocation through this process's token store ends its streams at
	// once; the period bounds one made by another process.
	AuthRecheck time.Duration

	// HTTPAllowedHosts are names the REST port answers to besides its
	// listen address and the loopback names (DNS rebinding defence).
	HTTPAllowedHosts []string
	// HTTPCORSOrigins are origins (e.g. "https://app.example.com") whose
	// pages may call the REST port; none by default.
	HTTPCORSOrigins []string

	// Metrics, when set, is served at GET /metrics on the REST port
	// (telemetry.Telemetry.MetricsHandler).
	Metrics http.Handler
	// Pprof serves net/http/pprof under /debug/pprof/ on the REST port,
	// to admins only. Off by default.
	Pprof bool
	// MetricsLoopbackOpen lets a caller on a loopback address scrape
	// /metrics without a credential (a local Prometheus or agent); from
	// elsewhere /metrics needs an admin's token.
	MetricsLoopbackOpen bool
}

// RegisterFlags binds -grpc-addr, -http-addr, -drain-delay, -drain-timeout
// -max-msg-bytes and -pprof to c, with defaults from defaults. Fields without a
// flag are copied from defaults.
func (c *Config) RegisterFlags(fs *flag.FlagSet, defaults Config) {
	*c = defaults
	fs.StringVar(&c.GRPCAddr, "grpc-addr", defaults.GRPCAddr, "gRPC listen address (host:port)")
	fs.StringVar(&c.HTTPAddr, "http-addr", defaults.HTTPAddr, "REST gateway listen address (host:port); empty disables it")
	fs.DurationVar(&c.DrainDelay, "drain-delay", defaults.DrainDelay, "on shutdown, how long to report NOT_SERVING before draining")
	fs.DurationVar(&c.DrainTimeout, "drain-timeout", defaults.DrainTimeout, "on shutdown, how long in-flight requests may take before they are cut off (0 means 10s)")
	fs.IntVar(&c.MaxMsgBytes, "max-msg-bytes", defaults.MaxMsgBytes, "largest gRPC message received or sent, and largest REST body, in bytes (0 means 64 MiB)")
	c.TLS.RegisterFlags(fs)
	fs.BoolVar(&c.Insecure, "insecure", defaults.Insecure, "allow listening on a non-loopback address without TLS (logs a warning at every start)")
	fs.StringVar(&c.TokensFile, "auth-tokens-file", defaults.TokensFile, "token store (JSON, hashes only) every call is verified against; default <data-dir>/auth/tokens.json")
	fs.BoolVar(&c.AnonymousReflection, "anonymous-reflection", defaults.AnonymousReflection, "allow gRPC server reflection without a credential (local development)")
	fs.Func("http-allowed-hosts", "comma-separated host names the REST port answers to, besides its listen address and loopback names", func(v string) error {
		c.HTTPAllowedHosts = splitList(v)
		return nil
	})
	fs.Func("http-cors-origins", "comma-separated origins whose web pages may call the REST port (CORS); none by default", func(v string) error {
		c.HTTPCORSOrigins = splitList(v)
		return nil
	})
	fs.BoolVar(&c.Pprof, "pprof", defaults.Pprof, "serve net/http/pprof under /debug/pprof/ on the REST port (admins only)")
	fs.BoolVar(&c.MetricsLoopbackOpen, "metrics-loopback-open", defaults.MetricsLoopbackOpen, "serve /metrics without a credential to callers on a loopback address (elsewhere: an admin token)")
}

func (c Config) withDefaults() (Config, error) {
	if c.GRPCAddr == "" {
		return c, errors.New("server: GRPCAddr is required")
	}
	if c.DrainDelay < 0 || c.DrainTimeout < 0 || c.MaxMsgBytes < 0 ||
		c.KeepaliveTime < 0 || c.KeepaliveTimeout < 0 || c.KeepaliveMinTime < 0 {
		return c, errors.New("server: durations and sizes must not be negative")
	}
	def := func(v *time.Duration, d time.Duration) {
		if *v == 0 {
			*v = d
		}
	}
	def(&c.DrainTimeout, DefaultDrainTimeout)
	def(&c.KeepaliveTime, DefaultKeepaliveTime)
	def(&c.KeepaliveTimeout, DefaultKeepaliveTimeout)
	def(&c.KeepaliveMinTime, DefaultKeepaliveMinTime)
	if c.MaxMsgBytes == 0 {
		c.MaxMsgBytes = DefaultMaxMsgBytes
	}
	if c.Auth == nil && !c.NoAuth {
		if c.TokensFile == "" {
			return c, errors.New("server: no token store: give -auth-tokens-file (or -data-dir)")
		}
		c.Auth = auth.OpenStore(c.TokensFile)
	}
	return c, nil
}

// Server is a running gRPC server and optional REST gateway.
type Server struct {
	cfg    Config
	logger *slog.Logger

	grpc     *grpc.Server
	grpcLis  net.Listener
	health   *health.Server
	names    []string
	conn     *grpc.ClientConn  // gateway loopback; nil without a gateway
	inproc   *bufconn.Listener // the gateway's (and the process's own) way in
	http     *http.Server
	httpLis  net.Listener
	draining atomic.Bool
	stop     context.CancelFunc // ends the lifetime context given to services
	loopback string             // marks the REST gateway's calls (interceptors.loopback)

	serveErr chan error // first unexpected Serve error

	shutdownOnce sync.Once
	shutdownErr  error
}

// Start listens on cfg.GRPCAddr (and cfg.HTTPAddr if set), registers the
// services, and serves in the background until Shutdown. ctx is used for
// startup only; its values, not its cancellation, reach the services'
// gateway registration.
func Start(ctx context.Context, cfg Config, logger *slog.Logger, services ...Service) (_ *Server, err error) {
	cfg, err = cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	life, stop := context.WithCancel(context.WithoutCancel(ctx))
	s := &Server{cfg: cfg, logger: logger, stop: stop, health: health.NewServer(), serveErr: make(chan error, 2)}
	defer func() {
		if err != nil {
			s.closeOnFailedStart()
		}
	}()

	tlsCfg, err := cfg.TLS.serverConfig()
	if err != nil {
		return nil, err
	}
	var lc net.ListenConfig
	if s.grpcLis, err = lc.Listen(ctx, "tcp", cfg.GRPCAddr); err != nil {
		return nil, fmt.Errorf("server: %w", listen.Error("gRPC", cfg.GRPCAddr, "--grpc-addr", err))
	}
	if err = s.checkExposure(ctx, "gRPC", s.grpcLis.Addr(), tlsCfg != nil); err != nil {
		return nil, err
	}
	if tlsCfg != nil {
		// TLS on the listener, not grpc.Creds: the in-process listener the
		// gateway uses stays plaintext, and needs no client certificate.
		g := tlsCfg.Clone()
		g.NextProtos = []string{"h2"}
		s.grpcLis = tls.NewListener(s.grpcLis, g)
	}
	ic := interceptors{logger: logger, loopback: rand.Text()}
	s.loopback = ic.loopback
	if !cfg.NoAuth {
		ic.auth = &auth.Interceptor{Verifier: cfg.Auth, Logger: logger, AnonymousReflection: cfg.AnonymousReflection, Recheck: cfg.AuthRecheck}
	}
	limits, err := requestLimits(services)
	if err != nil {
		return nil, err
	}
	s.grpc = grpc.NewServer(
		// Undecodable requests become INVALID_ARGUMENT, not grpc's INTERNAL
		// (malformed.go); one over its method's limit RESOURCE_EXHAUSTED,
		// undecoded (limits.go).
		grpc.ForceServerCodecV2(newLenientCodec(limits)),
		grpc.UnknownServiceHandler(unknownMethod),
		// Reused workers keep their grown stacks: no stack growth per RPC.
		grpc.NumStreamWorkers(uint32(goruntime.GOMAXPROCS(0))),
		grpc.StatsHandler(otelgrpc.NewServerHandler(otelgrpc.WithFilter(filters.Not(filters.HealthCheck())))),
		grpc.ChainUnaryInterceptor(logContextUnary),
		grpc.ChainStreamInterceptor(ic.watchStream, logContextStream),
		grpc.ChainUnaryInterceptor(ic.unary()...),
		grpc.ChainStreamInterceptor(ic.stream()...),
		grpc.MaxRecvMsgSize(cfg.MaxMsgBytes),
		grpc.MaxSendMsgSize(cfg.MaxMsgBytes),
		grpc.KeepaliveParams(keepalive.ServerParameters{Time: cfg.KeepaliveTime, Timeout: cfg.KeepaliveTimeout}),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: cfg.KeepaliveMinTime, PermitWithoutStream: true}),
	)
	healthpb.RegisterHealthServer(s.grpc, s.health)
	registerReflection(s.grpc, logger)
	for _, svc := range services {
		svc.RegisterGRPC(s.grpc)
		s.names = append(s.names, svc.Name())
	}

	s.inproc = bufconn.Listen(1 << 20)
	if cfg.HTTPAddr != "" {
		if s.httpLis, err = lc.Listen(ctx, "tcp", cfg.HTTPAddr); err != nil {
			return nil, fmt.Errorf("server: %w", listen.Error("REST", cfg.HTTPAddr, "--http-addr", err))
		}
		if err = s.checkExposure(ctx, "HTTP", s.httpLis.Addr(), tlsCfg != nil); err != nil {
			return nil, err
		}
		if err = s.setupGateway(life, services); err != nil {
			return nil, err
		}
		if tlsCfg != nil {
			h := tlsCfg.Clone()
			h.NextProtos = []string{"h2", "http/1.1"}
			s.http.TLSConfig = h
		}
	}

	s.health.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
	for _, name := range s.names {
		s.health.SetServingStatus(name, healthpb.HealthCheckResponse_SERVING)
	}
	go func() {
		// ErrServerStopped: Shutdown won the race with this goroutine.
		if err := s.grpc.Serve(s.grpcLis); err != nil && !errors.Is(err, grpc.ErrServerStopped) {
			s.serveErr <- fmt.Errorf("server: serve gRPC: %w", err)
		}
	}()
	go func() { _ = s.grpc.Serve(s.inproc) }() // ends with the server
	if s.http != nil {
		go func() {
			serve := s.http.Serve
			if s.http.TLSConfig != nil {
				serve = func(l net.Listener) error { return s.http.ServeTLS(l, "", "") }
			}
			if err := serve(s.httpLis); err != nil && !errors.Is(err, http.ErrServerClosed) {
				s.serveErr <- fmt.Errorf("server: serve HTTP: %w", err)
			}
		}()
	}
	logger.InfoContext(ctx, "server started", "grpc_addr", s.GRPCAddr(), "http_addr", s.HTTPAddr(), "services", s.names,
		"tls", tlsCfg != nil, "mtls", cfg.TLS.ClientCAFile != "", "auth", !cfg.NoAuth)
	return s, nil
}

func (s *Server) closeOnFailedStart() {
	s.stop()
	if s.conn != nil {
		_ = s.conn.Close()
	}
	if s.httpLis != nil {
		_ = s.httpLis.Close()
	}
	if s.grpcLis != nil {
		_ = s.grpcLis.Close()
	}
	if s.inproc != nil {
		_ = s.inproc.Close()
	}
}

// DialInProcess connects to the gRPC server without the network (and
// without TLS), for the services of this process calling each other. Every
// call still crosses the interceptors, authentication included.
func (s *Server) DialInProcess(ctx context.Context, _ string) (net.Conn, error) {
	return s.inproc.DialContext(ctx)
}

// GRPCAddr returns the address the gRPC listener is bound to.
func (s *Server) GRPCAddr() string { return s.grpcLis.Addr().String() }

// HTTPAddr returns the address the REST gateway is bound to, or "" if the
// gateway is disabled.
func (s *Server) HTTPAddr() string {
	if s.httpLis == nil {
		return ""
	}
	return s.httpLis.Addr().String()
}

// Shutdown drains the server: health goes NOT_SERVING (and /healthz 503),
// then after Config.DrainDelay the listeners close and in-flight RPCs and
// HTTP requests may finish. Once Config.DrainTimeout or ctx ends, whichever
// is first, the remaining ones are cut off and Shutdown returns an error
// wrapping the context error. Later calls return the first result.
func (s *Server) Shutdown(ctx context.Context) error {
	s.shutdownOnce.Do(func() { s.shutdownErr = s.shutdown(ctx) })
	return s.shutdownErr
}

func (s *Server) shutdown(ctx context.Context) error {
	defer s.stop()
	s.draining.Store(true)
	s.health.Shutdown()
	s.logger.InfoContext(ctx, "server draining", "drain_delay", s.cfg.DrainDelay, "drain_timeout", s.cfg.DrainTimeout)

	if s.cfg.DrainDelay > 0 {
		t := time.NewTimer(s.cfg.DrainDelay)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
		}
	}

	ctx, cancel := context.WithTimeout(ctx, s.cfg.DrainTimeout)
	defer cancel()

	// Drain HTTP and gRPC together: gateway requests in flight need the
	// gRPC server (through the loopback connection) to finish.
	var wg sync.WaitGroup
	var httpErr error
	if s.http != nil {
		wg.Go(func() {
			if err := s.http.Shutdown(ctx); err != nil {
				httpErr = err
				_ = s.http.Close()
			}
		})
	}
	grpcDone := make(chan struct{})
	go func() {
		s.grpc.GracefulStop()
		close(grpcDone)
	}()
	var err error
	select {
	case <-grpcDone:
	case <-ctx.Done():
		// Stop closes every connection and cancels in-flight RPCs. It does
		// not wait for handlers; GracefulStop does, so grpcDone is not
		// awaited: a handler that ignores cancellation must not hang us.
		s.grpc.Stop()
		err = fmt.Errorf("server: drain cut off in-flight RPCs: %w", ctx.Err())
	}
	wg.Wait()
	if s.conn != nil {
		_ = s.conn.Close()
	}
	if err == nil && httpErr != nil {
		err = fmt.Errorf("server: drain cut off HTTP requests: %w", httpErr)
	}
	if err != nil {
		s.logger.WarnContext(ctx, "server stopped", "error", err)
	} else {
		s.logger.InfoContext(ctx, "server stopped")
	}
	return err
}

// Run starts the server, serves until ctx is done (main passes a
// signal.NotifyContext for SIGINT and SIGTERM) or serving fails, then shuts
// down. It returns the serve or drain error, if any.
func Run(ctx context.Context, cfg Config, logger *slog.Logger, services ...Service) error {
	s, err := Start(ctx, cfg, logger, services...)
	if err != nil {
		return err
	}
	return s.Wait(ctx)
}

// Wait serves until ctx is done or serving fails, then shuts down. It is
// [Run] for a caller that needs the Server between Start and the wait, for
// example to learn the address it is bound to.
func (s *Server) Wait(ctx context.Context) error {
	var serveErr error
	select {
	case <-ctx.Done():
	case serveErr = <-s.serveErr:
		s.logger.ErrorContext(ctx, "server failed", "error", serveErr)
	}
	return errors.Join(serveErr, s.Shutdown(context.WithoutCancel(ctx)))
}
