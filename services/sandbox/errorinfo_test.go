package sandbox

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"testing"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/fabro-sh/fabro-go/sdk/sandbox/driver"
)

// Every status the service makes of a driver error carries an ErrorInfo,
// as the contract promises, with a reason a client can switch on.
func TestEveryErrorCarriesErrorInfo(t *testing.T) {
	s := &Service{logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
	tests := []struct {
		err    error
		code   codes.Code
		reason string
	}{
		{fmt.Errorf("%w: a", driver.ErrPathEscapes), codes.PermissionDenied, "PATH_ESCAPES_ROOT"},
		{fmt.Errorf("%w: a", driver.ErrNotFound), codes.NotFound, "FILE_NOT_FOUND"},
		{fmt.Errorf("%w: path contains NUL", driver.ErrInvalid), codes.InvalidArgument, "INVALID_ARGUMENT"},
		{fmt.Errorf("%w: x", driver.ErrInvalidPattern), codes.InvalidArgument, "INVALID_PATTERN"},
		{fmt.Errorf("%w: a", driver.ErrIsDirectory), codes.FailedPrecondition, "IS_A_DIRECTORY"},
		{fmt.Errorf("%w: a", driver.ErrNotDirectory), codes.FailedPrecondition, "NOT_A_DIRECTORY"},
		{fmt.Errorf("%w: a", driver.ErrNotEmpty), codes.FailedPrecondition, "DIRECTORY_NOT_EMPTY"},
		{fmt.Errorf("%w: a", driver.ErrNotUTF8), codes.FailedPrecondition, "NOT_UTF8"},
		{fmt.Errorf("%w: a", driver.ErrExists), codes.AlreadyExists, "EXISTS_AS_NON_DIRECTORY"},
		{fmt.Errorf("%w: memory", driver.ErrLimitUnsupported), codes.FailedPrecondition, "LIMIT_UNSUPPORTED"},
		{fmt.Errorf("%w: the container vanished", driver.ErrGone), codes.FailedPrecondition, "SANDBOX_GONE"},
		{fmt.Errorf("%w: down", driver.ErrUnavailable), codes.Unavailable, "DRIVER_UNAVAILABLE"},
		{fmt.Errorf("grep: %w", context.DeadlineExceeded), codes.DeadlineExceeded, "DEADLINE_EXCEEDED"},
		{context.Canceled, codes.Canceled, "CANCELLED"},
		{errors.New("a bug"), codes.Internal, "INTERNAL"},
		// A driver's own status passes through, even wrapped.
		{fmt.Errorf("create: %w", domain.New(codes.ResourceExhausted, "RATE_LIMITED", "slow down")), codes.ResourceExhausted, "RATE_LIMITED"},
	}
	for _, tt := range tests {
		t.Run(tt.reason, func(t *testing.T) {
			st := status.Convert(s.toStatus(t.Context(), tt.err))
			if st.Code() != tt.code {
				t.Errorf("code %v; want %v", st.Code(), tt.code)
			}
			var got string
			for _, d := range st.Details() {
				if info, ok := d.(*errdetails.ErrorInfo); ok {
					got = info.GetDomain() + "/" + info.GetReason()
				}
			}
			if want := string(domain) + "/" + tt.reason; got != want {
				t.Errorf("ErrorInfo %q; want %q", got, want)
			}
		})
	}
	if r := reasonOf(domain.InvalidField("spec.command", "empty")); r != "INVALID_ARGUMENT" {
		t.Errorf("InvalidField's ErrorInfo reason %q; want INVALID_ARGUMENT", r)
	}
}

func reasonOf(err error) string {
	for _, d := range status.Convert(err).Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok {
			return info.GetReason()
		}
	}
	return ""
}
