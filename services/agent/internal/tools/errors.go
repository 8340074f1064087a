package tools

import (
	"context"
	"errors"
	"fmt"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// toolError is a failure a tool describes itself, with its kind.
type toolError struct {
	kind string
	msg  string
}

func (e *toolError) Error() string { return e.msg }

func invalidArgs(format string, a ...any) error {
	return &toolError{kind: KindInvalidArguments, msg: fmt.Sprintf(format, a...)}
}

func failed(format string, a ...any) error {
	return &toolError{kind: KindFailed, msg: fmt.Sprintf(format, a...)}
}

// describe turns any error of a tool into the result the model sees. It
// names the sandbox when the sandbox is gone, so the loop (and the model)
// know no further tool call can work.
func (s *Set) describe(ctx context.Context, err error) output {
	if te, ok := errors.AsType[*toolError](err); ok {
		return output{failed: true, kind: te.kind, text: te.msg}
	}
	if ctx.Err() != nil && (errors.Is(err, context.Canceled) || status.Code(err) == codes.Canceled) {
		return output{failed: true, kind: KindCancelled, text: "Cancelled"}
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return output{failed: true, kind: KindTimeout, text: "Timed out: " + err.Error()}
	}
	if errors.Is(err, context.Canceled) {
		return output{failed: true, kind: KindCancelled, text: "Cancelled"}
	}
	st, isStatus := status.FromError(err)
	if !isStatus {
		return output{failed: true, kind: KindFailed, text: "Error: " + err.Error()}
	}
	msg := st.Message()
	switch st.Code() {
	case codes.NotFound:
		if reason(st) == "SANDBOX_NOT_FOUND" {
			return output{failed: true, kind: KindSandboxUnavailable,
				text: fmt.Sprintf("The sandbox %s no longer exists (it was deleted or stopped); no tool can run in it.", s.env.SandboxID)}
		}
		return output{failed: true, kind: KindFailed, text: "Not found: " + msg}
	case codes.Unavailable:
		return output{failed: true, kind: KindSandboxUnavailable, text: "The sandbox is unavailable: " + msg}
	case codes.PermissionDenied:
		return output{failed: true, kind: KindFailed, text: "Permission denied: " + msg}
	case codes.InvalidArgument:
		return output{failed: true, kind: KindInvalidArguments, text: "Invalid argument: " + msg}
	case codes.DeadlineExceeded:
		return output{failed: true, kind: KindTimeout, text: "Timed out: " + msg}
	case codes.Canceled:
		return output{failed: true, kind: KindCancelled, text: "Cancelled"}
	case codes.FailedPrecondition, codes.AlreadyExists:
		return output{failed: true, kind: KindFailed, text: "Error: " + msg}
	}
	return output{failed: true, kind: KindFailed, text: fmt.Sprintf("Sandbox error (%s): %s", st.Code(), msg)}
}

// reason is the ErrorInfo reason of a sandbox status, or "".
func reason(st *status.Status) string {
	for _, d := range st.Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok {
			return info.GetReason()
		}
	}
	return ""
}

// isNotFound reports a missing file (not a missing sandbox).
func isNotFound(err error) bool {
	st, ok := status.FromError(err)
	return ok && st.Code() == codes.NotFound && reason(st) != "SANDBOX_NOT_FOUND"
}

// brokenConnection reports an UNAVAILABLE the transport made (the
// connection to the sandbox service broke), not one the service answered:
// every status of a fabro service carries an ErrorInfo.
func brokenConnection(err error) bool {
	st, ok := status.FromError(err)
	return ok && st.Code() == codes.Unavailable && reason(st) == ""
}
