package plugin

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/fabro-sh/fabro-go/sdk/sandbox/driver"
)

// TestErrorsRoundTrip: every driver error a plugin returns reaches the host
// as the same driver error, with the plugin's text.
func TestErrorsRoundTrip(t *testing.T) {
	for _, w := range wireErrors {
		t.Run(w.reason, func(t *testing.T) {
			err := fmt.Errorf("%w: some/path", w.err)
			st := toStatus(err)
			if status.Code(st) != w.code {
				t.Errorf("code %v; want %v", status.Code(st), w.code)
			}
			back := fromStatus(st)
			if !errors.Is(back, w.err) || back.Error() != err.Error() {
				t.Errorf("back = %q (is %v); want %q wrapping %v", back, errors.Is(back, w.err), err, w.err)
			}
		})
	}
	if back := fromStatus(toStatus(context.DeadlineExceeded)); !errors.Is(back, context.DeadlineExceeded) {
		t.Errorf("deadline: %v", back)
	}
	// A status naming no driver error stays a plain error.
	if back := fromStatus(status.Error(codes.Internal, "boom")); errors.Is(back, driver.ErrNotFound) || back.Error() != "plugin: boom" {
		t.Errorf("plain: %v", back)
	}
}

// A plugin driver's own status with details crosses to the host intact, so
// the service can pass it on; a bare UNAVAILABLE is the driver unavailable.
func TestPluginStatusPassesThrough(t *testing.T) {
	own, err := status.New(codes.ResourceExhausted, "slow down").WithDetails(&errdetails.ErrorInfo{Domain: "remote.example", Reason: "RATE_LIMITED"})
	if err != nil {
		t.Fatal(err)
	}
	wire := toStatus(fmt.Errorf("create: %w", own.Err()))
	back := fromStatus(wire)
	var se interface{ GRPCStatus() *status.Status }
	if !errors.As(back, &se) {
		t.Fatalf("back = %v: no status", back)
	}
	got := se.GRPCStatus()
	if got.Code() != codes.ResourceExhausted || len(got.Details()) != 1 || got.Details()[0].(*errdetails.ErrorInfo).GetReason() != "RATE_LIMITED" {
		t.Errorf("status = %v %v", got, got.Details())
	}
	if back := fromStatus(status.Error(codes.Unavailable, "conn reset")); !errors.Is(back, driver.ErrUnavailable) {
		t.Errorf("bare unavailable = %v", back)
	}
}
