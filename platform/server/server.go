// Package server is the runtime every fabro-go service binary shares: a gRPC
// server with health, reflection, OpenTelemetry, panic recovery, request
// logging and error sanitizing, plus an optional REST gateway that forwards
// through a loopback connection to the same gRPC listener. Start, then
// Shutdown; or Run, which does both around a context.
package server

import (
	"context"
	"crypto/rand"
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
	"google.golang.org/grpc/reflection"
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
}

// RegisterFlags binds -grpc-addr, -http-addr, -drain-delay, -drain-timeout
// and -max-msg-bytes to c, with defaults from defaults. Fields without a
// flag are copied from defaults.
func (c *Config) RegisterFlags(fs *flag.FlagSet, defaults Config) {
	*c = defaults
	fs.StringVar(&c.GRPCAddr, "grpc-addr", defaults.GRPCAddr, "gRPC listen address (host:port)")
	fs.StringVar(&c.HTTPAddr, "http-addr", defaults.HTTPAddr, "REST gateway listen address (host:port); empty disables it")
	fs.DurationVar(&c.DrainDelay, "drain-delay", defaults.DrainDelay, "on shutdown, how long to report NOT_SERVING before draining")
	fs.DurationVar(&c.DrainTimeout, "drain-timeout", defaults.DrainTimeout, "on shutdown, how long in-flight requests may take before they are cut off (0 means 10s)")
	fs.IntVar(&c.MaxMsgBytes, "max-msg-bytes", defaults.MaxMsgBytes, "largest gRPC message received or sent, in bytes (0 means 64 MiB)")
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
	conn     *grpc.ClientConn // gateway loopback; nil without a gateway
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

	var lc net.ListenConfig
	if s.grpcLis, err = lc.Listen(ctx, "tcp", cfg.GRPCAddr); err != nil {
		return nil, fmt.Errorf("server: listen gRPC: %w", err)
	}
	ic := interceptors{logger: logger, loopback: rand.Text()}
	s.loopback = ic.loopback
	s.grpc = grpc.NewServer(
		// Reused workers keep their grown stacks: no stack growth per RPC.
		grpc.NumStreamWorkers(uint32(goruntime.GOMAXPROCS(0))),
		grpc.StatsHandler(otelgrpc.NewServerHandler(otelgrpc.WithFilter(filters.Not(filters.HealthCheck())))),
		grpc.ChainUnaryInterceptor(ic.unary()...),
		grpc.ChainStreamInterceptor(ic.stream()...),
		grpc.MaxRecvMsgSize(cfg.MaxMsgBytes),
		grpc.MaxSendMsgSize(cfg.MaxMsgBytes),
		grpc.KeepaliveParams(keepalive.ServerParameters{Time: cfg.KeepaliveTime, Timeout: cfg.KeepaliveTimeout}),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: cfg.KeepaliveMinTime, PermitWithoutStream: true}),
	)
	healthpb.RegisterHealthServer(s.grpc, s.health)
	reflection.Register(s.grpc)
	for _, svc := range services {
		svc.RegisterGRPC(s.grpc)
		s.names = append(s.names, svc.Name())
	}

	if cfg.HTTPAddr != "" {
		if s.httpLis, err = lc.Listen(ctx, "tcp", cfg.HTTPAddr); err != nil {
			return nil, fmt.Errorf("server: listen HTTP: %w", err)
		}
		if err = s.setupGateway(life, services); err != nil {
			return nil, err
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
	if s.http != nil {
		go func() {
			if err := s.http.Serve(s.httpLis); err != nil && !errors.Is(err, http.ErrServerClosed) {
				s.serveErr <- fmt.Errorf("server: serve HTTP: %w", err)
			}
		}()
	}
	logger.InfoContext(ctx, "server started", "grpc_addr", s.GRPCAddr(), "http_addr", s.HTTPAddr(), "services", s.names)
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
