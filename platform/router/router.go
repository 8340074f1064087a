// Package router is the front door of a deployment whose services run as
// separate processes (compose.yaml): one gRPC address and one REST address
// that mean what `fabro serve`'s mean. gRPC calls are forwarded by service
// name, untouched (raw frames, metadata both ways, status and trailers);
// REST requests by path prefix. Authentication stays with the services:
// the router passes the caller's credentials through and holds none.
package router

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/fabro-sh/fabro-go/platform/grpcerr"
)

// domain is the ErrorInfo domain of the router's own errors; a backend's
// pass through untouched.
const domain grpcerr.Domain = "router.fabro.dev"

// GRPCRoute sends the calls of some gRPC services to one backend.
type GRPCRoute struct {
	Services []string // full names, e.g. fabro.vault.v1.VaultService
	Addr     string   // host:port, plaintext (a private network)
}

// Router forwards gRPC calls; Handler (rest.go) forwards REST requests.
type Router struct {
	logger   *slog.Logger
	backends []*backend
	byName   map[string]*backend
	health   *health.Server
	mu       sync.Mutex // guards backend.serving
	stop     context.CancelFunc
	watchers sync.WaitGroup
}

type backend struct {
	addr     string
	services []string
	conn     *grpc.ClientConn
	serving  bool
}

// ErrNoRoute is a configuration without any gRPC route.
var ErrNoRoute = errors.New("router: no gRPC route")

// New connects (lazily) to every backend and starts watching their health,
// which the router's own grpc.health.v1 reports: each routed service as
// its backend says, and "" SERVING only while every backend is.
func New(routes []GRPCRoute, logger *slog.Logger) (*Router, error) {
	if len(routes) == 0 {
		return nil, ErrNoRoute
	}
	r := &Router{logger: logger, byName: map[string]*backend{}, health: health.NewServer()}
	r.health.SetServingStatus("", healthpb.HealthCheckResponse_NOT_SERVING)
	for _, rt := range routes {
		conn, err := grpc.NewClient(rt.Addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
			grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(MaxMsgBytes), grpc.MaxCallSendMsgSize(MaxMsgBytes)),
			grpc.WithKeepaliveParams(keepalive.ClientParameters{Time: 30 * time.Second, Timeout: 10 * time.Second, PermitWithoutStream: true}))
		if err != nil {
			r.closeConns()
			return nil, fmt.Errorf("router: backend %s: %w", rt.Addr, err)
		}
		b := &backend{addr: rt.Addr, services: rt.Services, conn: conn}
		r.backends = append(r.backends, b)
		for _, s := range rt.Services {
			if _, dup := r.byName[s]; dup {
				r.closeConns()
				return nil, fmt.Errorf("router: service %s routed twice", s)
			}
			r.byName[s] = b
			r.health.SetServingStatus(s, healthpb.HealthCheckResponse_NOT_SERVING)
		}
	}
	ctx, stop := context.WithCancel(context.Background())
	r.stop = stop
	for _, b := range r.backends {
		r.watchers.Go(func() { r.watch(ctx, b) })
	}
	return r, nil
}

// Register makes s the router's gRPC server: its own health service, and
// every other call forwarded. s must be made with ServerOptions.
func (r *Router) Register(s *grpc.Server) { healthpb.RegisterHealthServer(s, r.health) }

// MaxMsgBytes is the largest message forwarded either way: the services'
// own limit (platform/server), so the front door refuses nothing they take.
const MaxMsgBytes = 64 << 20

// ServerOptions are the options of the router's gRPC server: the raw codec
// and the forwarding handler for every service it does not serve itself.
// Clients' keepalive pings (every 30 s, also idle) are allowed.
func (r *Router) ServerOptions() []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.MaxRecvMsgSize(MaxMsgBytes), grpc.MaxSendMsgSize(MaxMsgBytes),
		grpc.ForceServerCodecV2(rawCodec{}),
		grpc.UnknownServiceHandler(r.forward),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 15 * time.Second, PermitWithoutStream: true}),
	}
}

// Close stops the health watchers and closes the backend connections.
func (r *Router) Close() {
	r.stop()
	r.health.Shutdown()
	r.watchers.Wait()
	r.closeConns()
}

func (r *Router) closeConns() {
	for _, b := range r.backends {
		_ = b.conn.Close()
	}
}

// watch mirrors one backend's overall health into the router's, until ctx
// ends; a broken watch is NOT_SERVING until it is re-established.
func (r *Router) watch(ctx context.Context, b *backend) {
	client := healthpb.NewHealthClient(b.conn)
	for {
		stream, err := client.Watch(ctx, &healthpb.HealthCheckRequest{})
		for err == nil {
			var resp *healthpb.HealthCheckResponse
			if resp, err = stream.Recv(); err == nil {
				r.set(b, resp.GetStatus() == healthpb.HealthCheckResponse_SERVING)
			}
		}
		r.set(b, false)
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Second): // the connection's own backoff paces reconnects
		}
	}
}

func (r *Router) set(b *backend, serving bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	b.serving = serving
	st := healthpb.HealthCheckResponse_NOT_SERVING
	if serving {
		st = healthpb.HealthCheckResponse_SERVING
	}
	for _, s := range b.services {
		r.health.SetServingStatus(s, st)
	}
	all := healthpb.HealthCheckResponse_SERVING
	for _, o := range r.backends {
		if !o.serving {
			all = healthpb.HealthCheckResponse_NOT_SERVING
		}
	}
	r.health.SetServingStatus("", all)
}

// serviceOf is the service of a full method name "/pkg.Service/Method".
func serviceOf(method string) string {
	s, _, _ := strings.Cut(strings.TrimPrefix(method, "/"), "/")
	return s
}

// frame is one message, never decoded.
type frame struct{ data mem.BufferSlice }

// rawCodec passes frames through as bytes, and encodes any other value
// (the router's own health service) as protobuf.
type rawCodec struct{}

var protoCodec = encoding.GetCodecV2(proto.Name)

func (rawCodec) Name() string { return "proto" } // what the content-subtype says on both hops

func (rawCodec) Marshal(v any) (mem.BufferSlice, error) {
	f, ok := v.(*frame)
	if !ok {
		return protoCodec.Marshal(v)
	}
	return f.data, nil
}

func (rawCodec) Unmarshal(data mem.BufferSlice, v any) error {
	f, ok := v.(*frame)
	if !ok {
		return protoCodec.Unmarshal(data, v)
	}
	// The buffers are the transport's until Unmarshal returns: keep a copy.
	f.data = mem.BufferSlice{mem.SliceBuffer(data.Materialize())}
	return nil
}

var bothWays = &grpc.StreamDesc{ServerStreams: true, ClientStreams: true}

// forward relays one call to its service's backend: the caller's metadata
// (credentials, traceparent, deadline) out, the backend's header, messages,
// status (with its details) and trailer back.
func (r *Router) forward(_ any, ss grpc.ServerStream) error {
	method, ok := grpc.MethodFromServerStream(ss)
	if !ok {
		return domain.Internal("router: no method name in the stream")
	}
	b := r.byName[serviceOf(method)]
	if b == nil {
		return domain.New(codes.Unimplemented, "UNKNOWN_SERVICE", "unknown service "+serviceOf(method),
			grpcerr.Meta("service", serviceOf(method)))
	}
	ctx, cancel := context.WithCancel(ss.Context())
	defer cancel()
	md, _ := metadata.FromIncomingContext(ctx)
	out := metadata.MD{}
	for k, v := range md {
		if !strings.HasPrefix(k, ":") && k != "content-type" && k != "user-agent" && k != "te" {
			out[k] = v
		}
	}
	cs, err := b.conn.NewStream(metadata.NewOutgoingContext(ctx, out), bothWays, method, grpc.ForceCodecV2(rawCodec{}))
	if err != nil {
		return unreachable(serviceOf(method), err)
	}
	// Caller to backend, until the caller half-closes; this goroutine ends
	// then, or when the call ends (cancel) and RecvMsg or SendMsg fails.
	up := make(chan error, 1)
	go func() {
		for {
			f := &frame{}
			if err := ss.RecvMsg(f); err != nil {
				if errors.Is(err, io.EOF) {
					up <- cs.CloseSend()
					return
				}
				up <- err
				return
			}
			if err := cs.SendMsg(f); err != nil {
				up <- nil // the backend ended the call: its status comes from RecvMsg below
				return
			}
		}
	}()
	if h, err := cs.Header(); err == nil && len(h) > 0 {
		if err := ss.SendHeader(h); err != nil {
			return err
		}
	}
	for {
		f := &frame{}
		err := cs.RecvMsg(f)
		if err != nil {
			ss.SetTrailer(cs.Trailer())
			if errors.Is(err, io.EOF) {
				return nil
			}
			return unreachable(serviceOf(method), err) // else the backend's status, details and all
		}
		if err := ss.SendMsg(f); err != nil {
			return err
		}
		select {
		case err := <-up:
			if err != nil {
				return err // the caller went away
			}
			up = nil // half-closed; keep relaying replies
		default:
		}
	}
}

// unreachable names a connection failure to the backend as such. Every
// status a service returns carries ErrorInfo (platform/grpcerr), so an
// UNAVAILABLE without details is the client's own: no connection.
func unreachable(service string, err error) error {
	st, ok := status.FromError(err)
	if !ok || st.Code() != codes.Unavailable || len(st.Details()) > 0 {
		return err
	}
	return domain.New(codes.Unavailable, "BACKEND_UNREACHABLE", "the service "+service+" is unreachable: "+st.Message(),
		grpcerr.Meta("service", service), grpcerr.RetryAfter(time.Second))
}
