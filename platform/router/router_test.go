package router_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/testing/protocmp"

	vaultv1 "github.com/fabro-sh/fabro-go/gen/fabro/vault/v1"
	"github.com/fabro-sh/fabro-go/platform/grpcerr"
	"github.com/fabro-sh/fabro-go/platform/router"
	"github.com/fabro-sh/fabro-go/platform/server"
)

// vault is a backend behind platform/server (gRPC and its REST gateway):
// GetSecret names the caller's authorization metadata in its answer,
// sends a header and a trailer, and fails with details for MISSING.
type vault struct {
	vaultv1.UnimplementedVaultServiceServer
}

func (vault) Name() string                           { return "fabro.vault.v1.VaultService" }
func (v vault) RegisterGRPC(s grpc.ServiceRegistrar) { vaultv1.RegisterVaultServiceServer(s, v) }
func (vault) RegisterGateway(ctx context.Context, mux *runtime.ServeMux, conn *grpc.ClientConn) error {
	return vaultv1.RegisterVaultServiceHandler(ctx, mux, conn)
}

func (vault) GetSecret(ctx context.Context, req *vaultv1.GetSecretRequest) (*vaultv1.GetSecretResponse, error) {
	if req.GetName() == "MISSING" {
		st, _ := status.New(codes.NotFound, "secret MISSING not found").WithDetails(
			&errdetails.ErrorInfo{Reason: "SECRET_NOT_FOUND", Domain: "vault.fabro.dev", Metadata: map[string]string{"name": "MISSING"}})
		return nil, st.Err()
	}
	md, _ := metadata.FromIncomingContext(ctx)
	_ = grpc.SetHeader(ctx, metadata.Pairs("x-backend", "vault"))
	_ = grpc.SetTrailer(ctx, metadata.Pairs("x-trailer", "done"))
	return &vaultv1.GetSecretResponse{Secret: &vaultv1.SecretMetadata{
		Name: req.GetName() + ":" + strings.Join(md.Get("authorization"), ","), CurrentVersion: 3}}, nil
}

// echo is a plain grpc-go backend with every kind of call (grpc's own
// interop test service): unary, server, client and bidirectional streams.
type echo struct {
	testpb.UnimplementedTestServiceServer
}

func (echo) UnaryCall(_ context.Context, req *testpb.SimpleRequest) (*testpb.SimpleResponse, error) {
	return &testpb.SimpleResponse{Payload: req.GetPayload()}, nil
}

func (echo) StreamingOutputCall(req *testpb.StreamingOutputCallRequest, s testpb.TestService_StreamingOutputCallServer) error {
	for _, p := range req.GetResponseParameters() {
		if err := s.Send(&testpb.StreamingOutputCallResponse{Payload: &testpb.Payload{Body: make([]byte, p.GetSize())}}); err != nil {
			return err
		}
	}
	return nil
}

func (echo) StreamingInputCall(s testpb.TestService_StreamingInputCallServer) error {
	n := 0
	for {
		req, err := s.Recv()
		if errors.Is(err, io.EOF) {
			return s.SendAndClose(&testpb.StreamingInputCallResponse{AggregatedPayloadSize: int32(n)})
		}
		if err != nil {
			return err
		}
		n += len(req.GetPayload().GetBody())
	}
}

func (echo) FullDuplexCall(s testpb.TestService_FullDuplexCallServer) error {
	for {
		req, err := s.Recv()
		if errors.Is(err, io.EOF) {
			return status.Error(codes.Aborted, "the caller half-closed") // a status after messages
		}
		if err != nil {
			return err
		}
		if err := s.Send(&testpb.StreamingOutputCallResponse{Payload: req.GetPayload()}); err != nil {
			return err
		}
	}
}

func startVault(t *testing.T) *server.Server {
	t.Helper()
	srv, err := server.Start(t.Context(), server.Config{GRPCAddr: "127.0.0.1:0", HTTPAddr: "127.0.0.1:0", NoAuth: true},
		slog.New(slog.DiscardHandler), vault{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Shutdown(context.Background()) })
	return srv
}

type echoBackend struct {
	addr string
	srv  *grpc.Server
}

func startEcho(t *testing.T) echoBackend {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := grpc.NewServer(grpc.MaxRecvMsgSize(router.MaxMsgBytes), grpc.MaxSendMsgSize(router.MaxMsgBytes))
	testpb.RegisterTestServiceServer(s, echo{})
	h := health.NewServer()
	healthpb.RegisterHealthServer(s, h)
	go func() { _ = s.Serve(l) }() // ends with Stop
	t.Cleanup(s.Stop)
	return echoBackend{addr: l.Addr().String(), srv: s}
}

type front struct {
	conn    *grpc.ClientConn
	restURL string
}

func startRouter(t *testing.T, grpcRoutes []router.GRPCRoute, restRoutes []router.HTTPRoute) front {
	t.Helper()
	r, err := router.New(grpcRoutes, slog.New(slog.NewTextHandler(t.Output(), nil)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Close)
	gs := grpc.NewServer(r.ServerOptions()...)
	r.Register(gs)
	gl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = gs.Serve(gl) }() // ends with Stop
	t.Cleanup(gs.Stop)
	h, err := r.HTTPHandler(restRoutes)
	if err != nil {
		t.Fatal(err)
	}
	hl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hs := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = hs.Serve(hl) }() // ends with Close
	t.Cleanup(func() { _ = hs.Close() })
	conn, err := grpc.NewClient(gl.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return front{conn: conn, restURL: "http://" + hl.Addr().String()}
}

func awaitHealth(t *testing.T, conn *grpc.ClientConn, service string, want healthpb.HealthCheckResponse_ServingStatus) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		resp, err := healthpb.NewHealthClient(conn).Check(t.Context(), &healthpb.HealthCheckRequest{Service: service})
		if err == nil && resp.GetStatus() == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("health of %q: %v, %v; want %v", service, resp.GetStatus(), err, want)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestRouter checks the front door: every kind of gRPC call reaches the
// backend of its service with the caller's metadata and comes back with
// the backend's header, trailer and status details; an unknown service is
// UNIMPLEMENTED; health follows the backends; REST goes by path prefix to
// the right backend, keeps the caller's Host, and /healthz is the router's.
func TestRouter(t *testing.T) {
	v, e := startVault(t), startEcho(t)
	vaultREST, err := url.Parse("http://" + v.HTTPAddr())
	if err != nil {
		t.Fatal(err)
	}
	f := startRouter(t,
		[]router.GRPCRoute{
			{Services: []string{"fabro.vault.v1.VaultService"}, Addr: v.GRPCAddr()},
			{Services: []string{"grpc.testing.TestService"}, Addr: e.addr},
		},
		[]router.HTTPRoute{
			{Prefixes: []string{"/v1/secrets"}, Backend: vaultREST},
			{Prefixes: []string{"/v1/tokens"}, Backend: &url.URL{Scheme: "http", Host: closedAddr(t)}},
		})
	awaitHealth(t, f.conn, "", healthpb.HealthCheckResponse_SERVING)
	ctx := metadata.AppendToOutgoingContext(t.Context(), "authorization", "Bearer tok_1")

	t.Run("unary with metadata, header, trailer", func(t *testing.T) {
		var header, trailer metadata.MD
		resp, err := vaultv1.NewVaultServiceClient(f.conn).GetSecret(ctx, &vaultv1.GetSecretRequest{Name: "KEY"},
			grpc.Header(&header), grpc.Trailer(&trailer))
		if err != nil {
			t.Fatal(err)
		}
		want := &vaultv1.GetSecretResponse{Secret: &vaultv1.SecretMetadata{Name: "KEY:Bearer tok_1", CurrentVersion: 3}}
		if diff := cmp.Diff(want, resp, protocmp.Transform()); diff != "" {
			t.Errorf("response (-want +got):\n%s", diff)
		}
		if header.Get("x-backend")[0] != "vault" || len(trailer.Get("x-trailer")) != 1 {
			t.Errorf("header %v, trailer %v; want x-backend and x-trailer", header, trailer)
		}
	})
	t.Run("error details", func(t *testing.T) {
		_, err := vaultv1.NewVaultServiceClient(f.conn).GetSecret(ctx, &vaultv1.GetSecretRequest{Name: "MISSING"})
		st := status.Convert(err)
		want := []any{&errdetails.ErrorInfo{Reason: "SECRET_NOT_FOUND", Domain: "vault.fabro.dev", Metadata: map[string]string{"name": "MISSING"}}}
		if st.Code() != codes.NotFound || st.Message() != "secret MISSING not found" {
			t.Errorf("status %v %q, want NotFound", st.Code(), st.Message())
		}
		if diff := cmp.Diff(want, st.Details(), protocmp.Transform()); diff != "" {
			t.Errorf("details (-want +got):\n%s", diff)
		}
	})
	t.Run("streams", func(t *testing.T) {
		c := testpb.NewTestServiceClient(f.conn)
		out, err := c.StreamingOutputCall(ctx, &testpb.StreamingOutputCallRequest{ResponseParameters: []*testpb.ResponseParameters{{Size: 1}, {Size: 70000}, {Size: 3}}})
		if err != nil {
			t.Fatal(err)
		}
		var sizes []int
		for {
			m, err := out.Recv()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			sizes = append(sizes, len(m.GetPayload().GetBody()))
		}
		if diff := cmp.Diff([]int{1, 70000, 3}, sizes); diff != "" {
			t.Errorf("server stream sizes (-want +got):\n%s", diff)
		}

		in, err := c.StreamingInputCall(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range []int{5, 7} {
			if err := in.Send(&testpb.StreamingInputCallRequest{Payload: &testpb.Payload{Body: make([]byte, n)}}); err != nil {
				t.Fatal(err)
			}
		}
		sum, err := in.CloseAndRecv()
		if err != nil || sum.GetAggregatedPayloadSize() != 12 {
			t.Errorf("client stream: %v, %v; want 12", sum, err)
		}

		bidi, err := c.FullDuplexCall(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, body := range []string{"a", "bb"} {
			if err := bidi.Send(&testpb.StreamingOutputCallRequest{Payload: &testpb.Payload{Body: []byte(body)}}); err != nil {
				t.Fatal(err)
			}
			m, err := bidi.Recv()
			if err != nil || string(m.GetPayload().GetBody()) != body {
				t.Fatalf("bidi echo of %q: %v, %v", body, m, err)
			}
		}
		if err := bidi.CloseSend(); err != nil {
			t.Fatal(err)
		}
		if _, err := bidi.Recv(); status.Code(err) != codes.Aborted {
			t.Errorf("bidi end: %v, want the backend's ABORTED", err)
		}
	})
	t.Run("large messages", func(t *testing.T) {
		// Past gRPC's 4 MiB default, within the services' 64 MiB limit.
		body := make([]byte, 20<<20)
		resp, err := testpb.NewTestServiceClient(f.conn).UnaryCall(ctx, &testpb.SimpleRequest{Payload: &testpb.Payload{Body: body}},
			grpc.MaxCallRecvMsgSize(router.MaxMsgBytes), grpc.MaxCallSendMsgSize(router.MaxMsgBytes))
		if err != nil || len(resp.GetPayload().GetBody()) != len(body) {
			t.Errorf("20 MiB echo: %d bytes, %v", len(resp.GetPayload().GetBody()), err)
		}
	})
	t.Run("unknown service", func(t *testing.T) {
		_, err := testpb.NewUnimplementedServiceClient(f.conn).UnimplementedCall(ctx, &testpb.Empty{})
		if status.Code(err) != codes.Unimplemented || grpcerr.ReasonOf(err) != "UNKNOWN_SERVICE" {
			t.Errorf("unrouted service: %v (reason %q), want UNIMPLEMENTED, UNKNOWN_SERVICE", err, grpcerr.ReasonOf(err))
		}
	})
	t.Run("REST", func(t *testing.T) {
		for _, tt := range []struct {
			name, path, host string
			wantCode         int
			wantBody         string
		}{
			{"routed", "/v1/secrets/KEY", "", http.StatusOK, `"name":"KEY:"`},
			{"routed error", "/v1/secrets/MISSING", "", http.StatusNotFound, "SECRET_NOT_FOUND"},
			// The backend judges the caller's Host, not the router's.
			{"foreign host", "/v1/secrets/KEY", "evil.example", http.StatusMisdirectedRequest, "MISDIRECTED_HOST"},
			{"no route", "/v1/sessions", "", http.StatusNotFound, `"reason":"NO_ROUTE"`},
			{"prefix is a path segment", "/v1/secretsX", "", http.StatusNotFound, `"reason":"NO_ROUTE"`},
			{"backend down", "/v1/tokens", "", http.StatusBadGateway, `"reason":"BACKEND_UNREACHABLE"`},
			{"router health", "/healthz", "", http.StatusOK, "ok"},
		} {
			t.Run(tt.name, func(t *testing.T) {
				req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, f.restURL+tt.path, nil)
				if err != nil {
					t.Fatal(err)
				}
				if tt.host != "" {
					req.Host = tt.host
				}
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				defer resp.Body.Close()
				body, _ := io.ReadAll(resp.Body)
				if resp.StatusCode != tt.wantCode || !strings.Contains(string(body), tt.wantBody) {
					t.Errorf("GET %s: %d %s; want %d with %q", tt.path, resp.StatusCode, body, tt.wantCode, tt.wantBody)
				}
				if tt.wantCode == http.StatusOK && tt.path != "/healthz" && !json.Valid(body) {
					t.Errorf("body is not JSON: %s", body)
				}
			})
		}
	})
	t.Run("health follows the backends", func(t *testing.T) {
		awaitHealth(t, f.conn, "grpc.testing.TestService", healthpb.HealthCheckResponse_SERVING)
		e.srv.Stop()
		awaitHealth(t, f.conn, "grpc.testing.TestService", healthpb.HealthCheckResponse_NOT_SERVING)
		awaitHealth(t, f.conn, "", healthpb.HealthCheckResponse_NOT_SERVING)
		awaitHealth(t, f.conn, "fabro.vault.v1.VaultService", healthpb.HealthCheckResponse_SERVING)
		resp, err := http.Get(f.restURL + "/healthz")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusServiceUnavailable {
			t.Errorf("/healthz with a backend down: %d, want 503", resp.StatusCode)
		}
	})
}

// TestRESTStreamsThrough checks that a streaming REST response (the
// newline-delimited JSON of a streaming route) reaches the caller line by
// line, not when the backend finishes.
func TestRESTStreamsThrough(t *testing.T) {
	release := make(chan struct{})
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/x-ndjson")
		fmt.Fprintln(w, `{"result":{"n":1}}`)
		w.(http.Flusher).Flush()
		<-release // the second line only once the caller has read the first
		fmt.Fprintln(w, `{"result":{"n":2}}`)
	}))
	defer backend.Close()
	defer close(release)
	u, _ := url.Parse(backend.URL)
	e := startEcho(t)
	f := startRouter(t, []router.GRPCRoute{{Services: []string{"grpc.testing.TestService"}, Addr: e.addr}},
		[]router.HTTPRoute{{Prefixes: []string{"/v1/sessions"}, Backend: u}})
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, f.restURL+"/v1/sessions/s_1/events", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	lines := bufio.NewScanner(resp.Body)
	if !lines.Scan() || lines.Text() != `{"result":{"n":1}}` {
		t.Fatalf("first line %q, %v (held back until the stream ends?)", lines.Text(), lines.Err())
	}
	release <- struct{}{}
	if !lines.Scan() || lines.Text() != `{"result":{"n":2}}` {
		t.Errorf("second line %q, %v", lines.Text(), lines.Err())
	}
}

// TestBackendDown checks that a call to a service whose backend does not
// answer says so: UNAVAILABLE, BACKEND_UNREACHABLE, with RetryInfo.
func TestBackendDown(t *testing.T) {
	f := startRouter(t, []router.GRPCRoute{{Services: []string{"grpc.testing.TestService"}, Addr: closedAddr(t)}}, nil)
	_, err := testpb.NewTestServiceClient(f.conn).UnaryCall(t.Context(), &testpb.SimpleRequest{})
	if d, ok := grpcerr.RetryDelayOf(err); status.Code(err) != codes.Unavailable || grpcerr.ReasonOf(err) != "BACKEND_UNREACHABLE" || !ok || d <= 0 {
		t.Errorf("call to a down backend: %v (reason %q), want UNAVAILABLE, BACKEND_UNREACHABLE, a retry delay", err, grpcerr.ReasonOf(err))
	}
}

func TestNewRefuses(t *testing.T) {
	for name, routes := range map[string][]router.GRPCRoute{
		"no route":     nil,
		"routed twice": {{Services: []string{"a.S"}, Addr: "127.0.0.1:1"}, {Services: []string{"a.S"}, Addr: "127.0.0.1:2"}},
	} {
		t.Run(name, func(t *testing.T) {
			if r, err := router.New(routes, slog.New(slog.DiscardHandler)); err == nil {
				r.Close()
				t.Error("New accepted it")
			}
		})
	}
}

// closedAddr is an address where nothing listens.
func closedAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}
