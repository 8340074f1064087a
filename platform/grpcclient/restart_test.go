package grpcclient_test

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/fabro-sh/fabro-go/platform/grpcclient"
)

// restartable is a health server on a fixed loopback address that can be
// stopped and started again there, as a restarted process would be.
type restartable struct {
	t    *testing.T
	addr string
	gs   *grpc.Server
}

func startRestartable(t *testing.T) *restartable {
	r := &restartable{t: t, addr: "127.0.0.1:0"}
	r.start()
	t.Cleanup(func() { r.gs.Stop() })
	return r
}

func (r *restartable) start() {
	lis, err := net.Listen("tcp", r.addr)
	if err != nil {
		r.t.Fatal(err)
	}
	r.addr = lis.Addr().String()
	r.gs = grpc.NewServer()
	healthpb.RegisterHealthServer(r.gs, health.NewServer())
	go r.gs.Serve(lis)
}

// awaitState waits until conn has left READY for a failure: the client
// has seen the server go.
func awaitDown(t *testing.T, conn *grpc.ClientConn) {
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	for s := conn.GetState(); s != connectivity.TransientFailure; s = conn.GetState() {
		if s == connectivity.Idle {
			conn.Connect()
		}
		if !conn.WaitForStateChange(ctx, s) {
			t.Fatalf("the connection never saw the server stop (state %s)", s)
		}
	}
}

func TestAwaitRestart(t *testing.T) {
	retryable := func(method string) bool { return method == healthpb.Health_Check_FullMethodName }
	tests := []struct {
		name string
		call func(ctx context.Context, c healthpb.HealthClient) error
		// wantWait: the call waits for the restart and succeeds; otherwise
		// it fails UNAVAILABLE at once.
		wantWait bool
	}{
		{"retryable unary call", func(ctx context.Context, c healthpb.HealthClient) error {
			_, err := c.Check(ctx, &healthpb.HealthCheckRequest{})
			return err
		}, true},
		{"stream that could not open", func(ctx context.Context, c healthpb.HealthClient) error {
			s, err := c.Watch(ctx, &healthpb.HealthCheckRequest{})
			if err != nil {
				return err
			}
			_, err = s.Recv()
			return err
		}, true},
		{"unary call not safe to repeat", func(ctx context.Context, c healthpb.HealthClient) error {
			_, err := c.List(ctx, &healthpb.HealthListRequest{})
			return err
		}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := startRestartable(t)
			conn, err := grpcclient.New(srv.addr, grpcclient.Options{Extra: grpcclient.AwaitRestart(time.Minute, retryable)})
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			client := healthpb.NewHealthClient(conn)
			if err := tt.call(t.Context(), client); err != nil {
				t.Fatalf("before the restart: %v", err)
			}
			srv.gs.Stop()
			awaitDown(t, conn)
			if !tt.wantWait {
				if err := tt.call(t.Context(), client); status.Code(err) != codes.Unavailable {
					t.Fatalf("with the server down: %v, want UNAVAILABLE at once", err)
				}
				return
			}
			errc := make(chan error, 1)
			go func() { errc <- tt.call(t.Context(), client) }()
			select {
			case err := <-errc:
				t.Fatalf("the call ended while the server was down: %v", err)
			case <-time.After(300 * time.Millisecond): // it is waiting, not failing
			}
			srv.start()
			if err := <-errc; err != nil {
				t.Fatalf("after the restart: %v", err)
			}
		})
	}
}

func TestAwaitRestartGivesUp(t *testing.T) {
	srv := startRestartable(t)
	conn, err := grpcclient.New(srv.addr, grpcclient.Options{Extra: grpcclient.AwaitRestart(200*time.Millisecond, func(string) bool { return true })})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	client := healthpb.NewHealthClient(conn)
	srv.gs.Stop()
	// The budget ends first.
	_, err = client.Check(t.Context(), &healthpb.HealthCheckRequest{})
	if status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), "waited up to 200ms") {
		t.Fatalf("budget spent: %v", err)
	}
	// The call's own deadline ends first.
	ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
	defer cancel()
	conn2, err := grpcclient.New(srv.addr, grpcclient.Options{Extra: grpcclient.AwaitRestart(time.Hour, func(string) bool { return true })})
	if err != nil {
		t.Fatal(err)
	}
	defer conn2.Close()
	start := time.Now()
	_, err = healthpb.NewHealthClient(conn2).Check(ctx, &healthpb.HealthCheckRequest{})
	if status.Code(err) != codes.Unavailable || time.Since(start) > 30*time.Second {
		t.Fatalf("deadline: %v after %s", err, time.Since(start))
	}
}
