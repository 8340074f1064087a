package server

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	vaultv1 "github.com/fabro-sh/fabro-go/gen/fabro/vault/v1"
	"github.com/fabro-sh/fabro-go/platform/testkit"
	"github.com/google/go-cmp/cmp"
	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/testing/protocmp"
)

const vaultName = "fabro.vault.v1.VaultService"

// leak is text that must never reach a client.
const leak = "/var/lib/fabro/secret.db"

// fakeVault answers GetSecret according to the requested name.
type fakeVault struct {
	vaultv1.UnimplementedVaultServiceServer
	started chan struct{} // BLOCK and STUCK signal here once running
	release chan struct{} // BLOCK and STUCK return when it closes
}

func newFakeVault(t *testing.T) *fakeVault {
	f := &fakeVault{started: make(chan struct{}, 1), release: make(chan struct{})}
	t.Cleanup(func() { close(f.release) })
	return f
}

func (f *fakeVault) Name() string                         { return vaultName }
func (f *fakeVault) RegisterGRPC(s grpc.ServiceRegistrar) { vaultv1.RegisterVaultServiceServer(s, f) }
func (f *fakeVault) RegisterGateway(ctx context.Context, mux *runtime.ServeMux, conn *grpc.ClientConn) error {
	return vaultv1.RegisterVaultServiceHandler(ctx, mux, conn)
}

func notFound() *status.Status {
	st, err := status.New(codes.NotFound, "secret MISSING not found").WithDetails(
		&errdetails.ErrorInfo{Reason: "SECRET_NOT_FOUND", Domain: "vault.fabro.dev"})
	if err != nil {
		panic(err)
	}
	return st
}

func (f *fakeVault) GetSecret(ctx context.Context, req *vaultv1.GetSecretRequest) (*vaultv1.GetSecretResponse, error) {
	switch req.GetName() {
	case "PANIC":
		panic("boom " + leak)
	case "PLAIN":
		return nil, fmt.Errorf("open %s: disk failure", leak)
	case "WRAPPED":
		return nil, fmt.Errorf("read %s: %w", leak, status.Error(codes.NotFound, "nope"))
	case "MISSING":
		return nil, notFound().Err()
	case "BARE":
		return nil, status.Error(codes.NotFound, "bare")
	case "CTX":
		return nil, fmt.Errorf("query %s: %w", leak, context.DeadlineExceeded)
	case "WHOAMI":
		md, _ := metadata.FromIncomingContext(ctx)
		return &vaultv1.GetSecretResponse{Secret: &vaultv1.SecretMetadata{Name: strings.Join(md.Get("authorization"), ",")}}, nil
	case "BLOCK": // returns once released
		f.started <- struct{}{}
		<-f.release
	case "STUCK": // ignores cancellation; only test cleanup ends it
		f.started <- struct{}{}
		<-f.release
		return nil, status.Error(codes.Aborted, "released")
	}
	return &vaultv1.GetSecretResponse{Secret: &vaultv1.SecretMetadata{Name: req.GetName(), CurrentVersion: 3}}, nil
}

// untilCleanup is t.Output() until the test's cleanup: a handler that
// ignores cancellation (STUCK) may log after its test ended, which t.Output
// refuses with a panic.
func untilCleanup(t *testing.T) io.Writer {
	w := &cleanupWriter{w: t.Output()}
	t.Cleanup(func() {
		w.mu.Lock()
		defer w.mu.Unlock()
		w.done = true
	})
	return w
}

type cleanupWriter struct {
	mu   sync.Mutex
	w    io.Writer
	done bool
}

func (c *cleanupWriter) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.done {
		return len(p), nil
	}
	return c.w.Write(p)
}

// syncBuffer is a goroutine-safe log sink.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

type harness struct {
	srv   *Server
	vault *fakeVault
	logs  *syncBuffer
	conn  *grpc.ClientConn
}

func start(t *testing.T, cfg Config) *harness {
	t.Helper()
	if cfg.GRPCAddr == "" {
		cfg.GRPCAddr = "127.0.0.1:0"
	}
	if cfg.Auth == nil && cfg.TokensFile == "" {
		cfg.NoAuth = true // authentication has its own tests (auth_test.go)
	}
	h := &harness{vault: newFakeVault(t), logs: new(syncBuffer)}
	logger := slog.New(slog.NewTextHandler(io.MultiWriter(h.logs, untilCleanup(t)), &slog.HandlerOptions{Level: slog.LevelDebug}))
	srv, err := Start(t.Context(), cfg, logger, h.vault)
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	h.srv = srv
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
	})
	h.conn, err = grpc.NewClient(srv.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = h.conn.Close() })
	return h
}

func (h *harness) vaultClient() vaultv1.VaultServiceClient {
	return vaultv1.NewVaultServiceClient(h.conn)
}

func TestHealth(t *testing.T) {
	h := start(t, Config{})
	client := healthpb.NewHealthClient(h.conn)
	tests := []struct {
		service  string
		want     healthpb.HealthCheckResponse_ServingStatus
		wantCode codes.Code
	}{
		{service: "", want: healthpb.HealthCheckResponse_SERVING},
		{service: vaultName, want: healthpb.HealthCheckResponse_SERVING},
		{service: "no.such.Service", wantCode: codes.NotFound},
	}
	for _, tt := range tests {
		t.Run(tt.service, func(t *testing.T) {
			resp, err := client.Check(t.Context(), &healthpb.HealthCheckRequest{Service: tt.service})
			if got := status.Code(err); got != tt.wantCode {
				t.Fatalf("Check code = %v, want %v (err %v)", got, tt.wantCode, err)
			}
			if err == nil && resp.GetStatus() != tt.want {
				t.Errorf("Check status = %v, want %v", resp.GetStatus(), tt.want)
			}
		})
	}
}

func TestReflectionListsServices(t *testing.T) {
	h := start(t, Config{})
	stream, err := reflectionpb.NewServerReflectionClient(h.conn).ServerReflectionInfo(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(&reflectionpb.ServerReflectionRequest{
		MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{},
	}); err != nil {
		t.Fatal(err)
	}
	resp, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]bool{}
	for _, s := range resp.GetListServicesResponse().GetService() {
		got[s.GetName()] = true
	}
	for _, want := range []string{vaultName, "grpc.health.v1.Health", "grpc.reflection.v1.ServerReflection"} {
		if !got[want] {
			t.Errorf("reflection does not list %s; got %v", want, got)
		}
	}
}

func TestErrorMapping(t *testing.T) {
	h := start(t, Config{})
	client := h.vaultClient()
	tests := []struct {
		name string
		want *status.Status // nil: success
	}{
		{name: "OK"},
		{name: "PANIC", want: Domain.Status(codes.Internal, "INTERNAL", "internal error")},
		{name: "OK"}, // still serving after the panic
		{name: "PLAIN", want: Domain.Status(codes.Internal, "INTERNAL", "internal error")},
		{name: "WRAPPED", want: Domain.Status(codes.Internal, "INTERNAL", "internal error")},
		{name: "MISSING", want: notFound()},
		{name: "CTX", want: Domain.Status(codes.DeadlineExceeded, "DEADLINE_EXCEEDED", "the deadline passed")},
		{name: "BARE", want: Domain.Status(codes.NotFound, "NOT_FOUND", "bare")}, // gains ErrorInfo
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp, err := client.GetSecret(t.Context(), &vaultv1.GetSecretRequest{Name: tt.name})
			if tt.want == nil {
				if err != nil {
					t.Fatalf("GetSecret: %v", err)
				}
				want := &vaultv1.GetSecretResponse{Secret: &vaultv1.SecretMetadata{Name: tt.name, CurrentVersion: 3}}
				if diff := cmp.Diff(want, resp, protocmp.Transform()); diff != "" {
					t.Errorf("response mismatch (-want +got):\n%s", diff)
				}
				return
			}
			got, _ := status.FromError(err)
			if diff := cmp.Diff(tt.want.Proto(), got.Proto(), protocmp.Transform()); diff != "" {
				t.Errorf("status mismatch (-want +got):\n%s", diff)
			}
			if strings.Contains(err.Error(), leak) {
				t.Errorf("client error leaks internal text: %v", err)
			}
		})
	}
	// The chain, panic and stack stay server-side.
	logs := h.logs.String()
	for _, want := range []string{"read " + leak, "boom " + leak, "fakeVault).GetSecret", "code=Internal"} {
		if !strings.Contains(logs, want) {
			t.Errorf("server log lacks %q", want)
		}
	}
}

// TestStreamInterceptors drives the stream chain directly, since the vault
// contract has no streaming RPC.
func TestStreamInterceptors(t *testing.T) {
	ic := interceptors{logger: slog.New(slog.NewTextHandler(t.Output(), nil))}
	chain := func(handler grpc.StreamHandler) error {
		ss := fakeStream{ctx: t.Context()}
		info := &grpc.StreamServerInfo{FullMethod: "/test.Svc/Stream"}
		return ic.recoverStream(nil, ss, info, func(srv any, ss grpc.ServerStream) error {
			return ic.logStream(srv, ss, info, func(srv any, ss grpc.ServerStream) error {
				return ic.sanitizeStream(srv, ss, info, handler)
			})
		})
	}
	tests := []struct {
		name    string
		handler grpc.StreamHandler
		want    *status.Status // nil: success
	}{
		{name: "ok", handler: func(any, grpc.ServerStream) error { return nil }},
		{name: "panic", handler: func(any, grpc.ServerStream) error { panic(leak) }, want: Domain.Status(codes.Internal, "INTERNAL", "internal error")},
		{name: "wrapped", handler: func(any, grpc.ServerStream) error {
			return fmt.Errorf("%s: %w", leak, status.Error(codes.NotFound, "x"))
		}, want: Domain.Status(codes.Internal, "INTERNAL", "internal error")},
		{name: "canceled", handler: func(any, grpc.ServerStream) error {
			return fmt.Errorf("%s: %w", leak, context.Canceled)
		}, want: Domain.Status(codes.Canceled, "CANCELLED", "the call was cancelled")},
		{name: "status", handler: func(any, grpc.ServerStream) error { return notFound().Err() }, want: notFound()},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := chain(tt.handler)
			if tt.want == nil {
				if err != nil {
					t.Fatalf("err = %v, want nil", err)
				}
				return
			}
			got := status.Convert(err)
			if diff := cmp.Diff(tt.want.Proto(), got.Proto(), protocmp.Transform()); diff != "" {
				t.Errorf("status mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

type fakeStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s fakeStream) Context() context.Context { return s.ctx }

func TestREST(t *testing.T) {
	h := start(t, Config{HTTPAddr: "127.0.0.1:0"})
	base := "http://" + h.srv.HTTPAddr()
	tests := []struct {
		name       string
		path       string
		auth       string
		wantStatus int
		wantType   string
		check      func(t *testing.T, body []byte)
	}{
		{
			name: "get secret", path: "/v1/secrets/OK", wantStatus: http.StatusOK, wantType: "application/json",
			check: func(t *testing.T, body []byte) {
				var got map[string]any
				if err := json.Unmarshal(body, &got); err != nil {
					t.Fatal(err)
				}
				// Zero values and empty lists are written; unset messages
				// (the times) are left out, never null: the OpenAPI
				// schemas do not allow null.
				want := map[string]any{"secret": map[string]any{
					"name": "OK", "currentVersion": "3", "versions": []any{},
				}}
				if diff := cmp.Diff(want, got); diff != "" {
					t.Errorf("body mismatch (-want +got):\n%s", diff)
				}
			},
		},
		{
			name: "not found maps to 404", path: "/v1/secrets/MISSING", wantStatus: http.StatusNotFound,
			check: wantBody(`"message":"secret MISSING not found"`, `SECRET_NOT_FOUND`),
		},
		{
			name: "wrapped error is 500 without detail", path: "/v1/secrets/WRAPPED", wantStatus: http.StatusInternalServerError,
			check: wantBody(`"message":"internal error"`),
		},
		{
			name: "panic is 500", path: "/v1/secrets/PANIC", wantStatus: http.StatusInternalServerError,
			check: wantBody(`"message":"internal error"`),
		},
		{
			name: "authorization reaches handler", path: "/v1/secrets/WHOAMI", auth: "Bearer tok-123", wantStatus: http.StatusOK,
			check: wantBody(`"name":"Bearer tok-123"`),
		},
		{
			name: "openapi", path: "/openapi.json", wantStatus: http.StatusOK, wantType: "application/json",
			check: func(t *testing.T, body []byte) {
				var doc struct {
					Swagger string         `json:"swagger"`
					Paths   map[string]any `json:"paths"`
				}
				if err := json.Unmarshal(body, &doc); err != nil {
					t.Fatalf("openapi.json is not JSON: %v", err)
				}
				if _, ok := doc.Paths["/v1/secrets/{name}"]; !ok {
					t.Errorf("openapi.json lacks /v1/secrets/{name}; swagger %q", doc.Swagger)
				}
			},
		},
		{name: "healthz", path: "/healthz", wantStatus: http.StatusOK, check: func(t *testing.T, body []byte) {
			if string(body) != "ok" {
				t.Errorf("body = %q, want ok", body)
			}
		}},
		{name: "unknown route", path: "/v1/nope", wantStatus: http.StatusNotFound},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, base+tt.path, nil)
			if err != nil {
				t.Fatal(err)
			}
			if tt.auth != "" {
				req.Header.Set("Authorization", tt.auth)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			body, err := io.ReadAll(resp.Body)
			if err != nil {
				t.Fatal(err)
			}
			if resp.StatusCode != tt.wantStatus {
				t.Fatalf("status = %d, want %d; body %s", resp.StatusCode, tt.wantStatus, body)
			}
			if ct := resp.Header.Get("Content-Type"); tt.wantType != "" && !strings.HasPrefix(ct, tt.wantType) {
				t.Errorf("Content-Type = %q, want %q", ct, tt.wantType)
			}
			if bytes.Contains(body, []byte(leak)) {
				t.Errorf("body leaks internal text: %s", body)
			}
			for k := range resp.Header {
				if strings.HasPrefix(k, "Grpc-Metadata-") {
					t.Errorf("the gRPC transport's header %s: %q reached the REST client", k, resp.Header[k])
				}
			}
			if tt.check != nil {
				tt.check(t, body)
			}
		})
	}
	if logs := h.logs.String(); !strings.Contains(logs, `msg="http request" method=GET path=/v1/secrets/OK status=200`) {
		t.Errorf("no HTTP access log line for /v1/secrets/OK")
	}
	// One line per REST request: the loopback gRPC call is not logged again.
	if logs := h.logs.String(); strings.Contains(logs, `msg="grpc request" method=/fabro.vault.v1.VaultService/GetSecret`) {
		t.Errorf("a REST request was logged twice:\n%s", logs)
	}
}

func wantBody(subs ...string) func(*testing.T, []byte) {
	return func(t *testing.T, body []byte) {
		t.Helper()
		for _, s := range subs {
			if !bytes.Contains(body, []byte(s)) {
				t.Errorf("body %s lacks %s", body, s)
			}
		}
	}
}

func TestHealthDuringDrain(t *testing.T) {
	h := start(t, Config{HTTPAddr: "127.0.0.1:0", DrainDelay: time.Minute})
	client := healthpb.NewHealthClient(h.conn)

	watchCtx, stopWatch := context.WithTimeout(t.Context(), 10*time.Second)
	defer stopWatch()
	watch, err := client.Watch(watchCtx, &healthpb.HealthCheckRequest{Service: vaultName})
	if err != nil {
		t.Fatal(err)
	}
	recv := func() healthpb.HealthCheckResponse_ServingStatus {
		t.Helper()
		resp, err := watch.Recv()
		if err != nil {
			t.Fatalf("Watch.Recv: %v", err)
		}
		return resp.GetStatus()
	}
	if got := recv(); got != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("before drain: %v, want SERVING", got)
	}

	shutdownCtx, endDelay := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- h.srv.Shutdown(shutdownCtx) }()

	if got := recv(); got != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Fatalf("during drain: %v, want NOT_SERVING", got)
	}
	resp, err := client.Check(t.Context(), &healthpb.HealthCheckRequest{})
	if err != nil || resp.GetStatus() != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Errorf("Check(\"\") during drain = %v, %v; want NOT_SERVING", resp.GetStatus(), err)
	}
	httpResp, err := http.Get("http://" + h.srv.HTTPAddr() + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	httpResp.Body.Close()
	if httpResp.StatusCode != http.StatusServiceUnavailable {
		t.Errorf("/healthz during drain = %d, want 503", httpResp.StatusCode)
	}

	stopWatch()
	endDelay()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Shutdown did not return after its context ended")
	}
}

func TestShutdownCompletesInFlight(t *testing.T) {
	h := start(t, Config{HTTPAddr: "127.0.0.1:0"})
	rpc := make(chan error, 1)
	go func() {
		_, err := h.vaultClient().GetSecret(context.Background(), &vaultv1.GetSecretRequest{Name: "BLOCK"})
		rpc <- err
	}()
	<-h.vault.started

	done := make(chan error, 1)
	go func() { done <- h.srv.Shutdown(context.Background()) }()
	// GracefulStop closes the listener first; wait for that.
	testkit.Eventually(t, 10*time.Second, func() error {
		if c, err := net.Dial("tcp", h.srv.GRPCAddr()); err == nil {
			c.Close()
			return errors.New("the gRPC listener still accepts connections")
		}
		return nil
	})
	select {
	case err := <-done:
		t.Fatalf("Shutdown returned %v before the in-flight RPC finished", err)
	default:
	}

	h.vault.release <- struct{}{} // BLOCK reads one value; close happens at cleanup
	if err := <-rpc; err != nil {
		t.Errorf("in-flight RPC: %v, want success", err)
	}
	if err := <-done; err != nil {
		t.Errorf("Shutdown: %v, want nil", err)
	}
}

func TestShutdownCutsOffStuckHandler(t *testing.T) {
	const drain = 200 * time.Millisecond
	h := start(t, Config{DrainTimeout: drain})
	rpc := make(chan error, 1)
	go func() {
		_, err := h.vaultClient().GetSecret(context.Background(), &vaultv1.GetSecretRequest{Name: "STUCK"})
		rpc <- err
	}()
	<-h.vault.started

	begin := time.Now()
	err := h.srv.Shutdown(context.Background())
	elapsed := time.Since(begin)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Shutdown error = %v, want DeadlineExceeded", err)
	}
	if elapsed < drain || elapsed > drain+5*time.Second {
		t.Errorf("Shutdown took %v, want about %v", elapsed, drain)
	}
	if got := status.Code(<-rpc); got != codes.Unavailable {
		t.Errorf("cut-off RPC code = %v, want Unavailable", got)
	}
}

func TestShutdownIdempotent(t *testing.T) {
	h := start(t, Config{HTTPAddr: "127.0.0.1:0"})
	for i := range 2 {
		if err := h.srv.Shutdown(t.Context()); err != nil {
			t.Fatalf("Shutdown #%d: %v", i+1, err)
		}
	}
}

// signalService reports when Run has registered it.
type signalService struct {
	*fakeVault
	registered chan struct{}
}

func (s signalService) RegisterGRPC(r grpc.ServiceRegistrar) {
	s.fakeVault.RegisterGRPC(r)
	close(s.registered)
}

func TestRun(t *testing.T) {
	svc := signalService{fakeVault: newFakeVault(t), registered: make(chan struct{})}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, Config{GRPCAddr: "127.0.0.1:0", HTTPAddr: "127.0.0.1:0", NoAuth: true}, slog.New(slog.NewTextHandler(t.Output(), nil)), svc)
	}()
	<-svc.registered
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run = %v, want nil", err)
	}
}

func TestStartErrors(t *testing.T) {
	logger := slog.New(slog.DiscardHandler)
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	tests := []struct {
		name string
		cfg  Config
	}{
		{name: "no gRPC address", cfg: Config{}},
		{name: "negative drain", cfg: Config{GRPCAddr: "127.0.0.1:0", DrainTimeout: -1}},
		{name: "gRPC port busy", cfg: Config{GRPCAddr: busy.Addr().String(), NoAuth: true}},
		{name: "no token store", cfg: Config{GRPCAddr: "127.0.0.1:0"}},
		{name: "non-loopback without TLS", cfg: Config{GRPCAddr: "0.0.0.0:0", NoAuth: true}},
		{name: "HTTP port busy", cfg: Config{GRPCAddr: "127.0.0.1:0", HTTPAddr: busy.Addr().String(), NoAuth: true}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if s, err := Start(t.Context(), tt.cfg, logger); err == nil {
				_ = s.Shutdown(t.Context())
				t.Fatal("Start succeeded, want error")
			}
		})
	}
}

func TestRegisterFlags(t *testing.T) {
	defaults := Config{GRPCAddr: "127.0.0.1:7700", HTTPAddr: "127.0.0.1:7780", DrainTimeout: 5 * time.Second, KeepaliveMinTime: time.Second}
	tests := []struct {
		name string
		args []string
		want Config
	}{
		{name: "defaults", want: defaults},
		{
			name: "flags",
			args: []string{"-grpc-addr=:1", "-http-addr=", "-drain-delay=2s", "-drain-timeout=1m", "-max-msg-bytes=1024"},
			want: Config{GRPCAddr: ":1", DrainDelay: 2 * time.Second, DrainTimeout: time.Minute, MaxMsgBytes: 1024, KeepaliveMinTime: time.Second},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got Config
			fs := flag.NewFlagSet("test", flag.ContinueOnError)
			got.RegisterFlags(fs, defaults)
			if err := fs.Parse(tt.args); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("Config mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

func TestIsLoopback(t *testing.T) {
	tests := []struct {
		addr net.Addr
		want bool
	}{
		{&net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 1}, true},
		{&net.TCPAddr{IP: net.IPv6loopback, Port: 1}, true},
		{&net.TCPAddr{IP: net.IPv4zero, Port: 2}, false},
		{&net.TCPAddr{IP: net.IPv6unspecified, Port: 3}, false},
		{&net.TCPAddr{Port: 4}, false},
		{&net.TCPAddr{IP: net.IPv4(10, 0, 0, 1), Port: 5}, false},
	}
	for _, tt := range tests {
		if got := isLoopback(tt.addr); got != tt.want {
			t.Errorf("isLoopback(%v) = %v, want %v", tt.addr, got, tt.want)
		}
	}
}
