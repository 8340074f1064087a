package grpcclient

import (
	"context"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/status"
)

// DefaultRestartWait is how long a call waits by default for a dependency
// that restarts: longer than the 30 s restart a deployment must survive.
const DefaultRestartWait = 45 * time.Second

// AwaitRestart makes a connection wait for a server that restarts instead
// of failing its calls at the first refused connection. A call that fails
// UNAVAILABLE waits until the connection is ready again, for at most wait
// from the first failure and never past the call's own deadline, then is
// tried again:
//
//   - a stream only when it could not be opened (nothing was sent);
//   - a unary call only when retryable(method) says a second delivery is
//     harmless (reads, idempotent writes), since a call cut mid-way may
//     have been served.
//
// The connection also redials quickly (backoff at most a second) so that
// a server back after 30 s is seen at once, not after gRPC's default
// backoff of up to two minutes. wait <= 0 is DefaultRestartWait.
func AwaitRestart(wait time.Duration, retryable func(method string) bool) []grpc.DialOption {
	if wait <= 0 {
		wait = DefaultRestartWait
	}
	a := &awaiter{wait: wait, retryable: retryable}
	bc := backoff.DefaultConfig
	bc.MaxDelay = time.Second
	return []grpc.DialOption{
		grpc.WithConnectParams(grpc.ConnectParams{Backoff: bc, MinConnectTimeout: 5 * time.Second}),
		grpc.WithChainUnaryInterceptor(a.unary),
		grpc.WithChainStreamInterceptor(a.stream),
	}
}

type awaiter struct {
	wait      time.Duration
	retryable func(string) bool
}

func (a *awaiter) unary(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	var until time.Time
	for n := 0; ; n++ {
		err := invoker(ctx, method, req, reply, cc, opts...)
		if status.Code(err) != codes.Unavailable || a.retryable == nil || !a.retryable(method) {
			return err
		}
		if until.IsZero() {
			until = time.Now().Add(a.wait)
		}
		if !a.awaitReady(ctx, cc, until, n) {
			return a.giveUp(err)
		}
	}
}

func (a *awaiter) stream(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	var until time.Time
	for n := 0; ; n++ {
		cs, err := streamer(ctx, desc, cc, method, opts...)
		if status.Code(err) != codes.Unavailable {
			return cs, err
		}
		if until.IsZero() {
			until = time.Now().Add(a.wait)
		}
		if !a.awaitReady(ctx, cc, until, n) {
			return nil, a.giveUp(err)
		}
	}
}

// giveUp says how long the server was waited for, keeping the code (and
// any details) of the last failure.
func (a *awaiter) giveUp(err error) error {
	st := status.Convert(err)
	p := st.Proto()
	p.Message = "server unreachable (waited up to " + a.wait.String() + " for it to restart): " + p.Message
	return status.FromProto(p).Err()
}

// awaitReady pauses before the attempt-th retry (a server that is up but
// answers UNAVAILABLE itself is not hammered), then waits until cc is
// READY; false once the deadline or ctx ends first.
func (a *awaiter) awaitReady(ctx context.Context, cc *grpc.ClientConn, until time.Time, attempt int) bool {
	ctx, cancel := context.WithDeadline(ctx, until)
	defer cancel()
	pause := min(50*time.Millisecond<<min(attempt, 5), time.Second)
	t := time.NewTimer(pause)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
	}
	for {
		s := cc.GetState()
		switch s {
		case connectivity.Ready:
			return true
		case connectivity.Shutdown:
			return false
		case connectivity.Idle:
			cc.Connect()
		}
		if !cc.WaitForStateChange(ctx, s) {
			return false
		}
	}
}
