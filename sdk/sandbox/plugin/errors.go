package plugin

import (
	"context"
	"errors"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/fabro-sh/fabro-go/sdk/sandbox/driver"
)

// errorDomain is the ErrorInfo domain of the plugin protocol's statuses.
const errorDomain = "plugin.sandbox.fabro.dev"

// wireErrors maps each driver error to its reason on the wire and a code.
// Order matters where one error could wrap two: the first match wins.
var wireErrors = []struct {
	err    error
	reason string
	code   codes.Code
}{
	{driver.ErrGone, "SANDBOX_GONE", codes.NotFound},
	{driver.ErrPathEscapes, "PATH_ESCAPES_ROOT", codes.PermissionDenied},
	{driver.ErrNotFound, "FILE_NOT_FOUND", codes.NotFound},
	{driver.ErrInvalidPattern, "INVALID_PATTERN", codes.InvalidArgument},
	{driver.ErrInvalid, "INVALID_ARGUMENT", codes.InvalidArgument},
	{driver.ErrIsDirectory, "IS_A_DIRECTORY", codes.FailedPrecondition},
	{driver.ErrNotDirectory, "NOT_A_DIRECTORY", codes.FailedPrecondition},
	{driver.ErrNotEmpty, "DIRECTORY_NOT_EMPTY", codes.FailedPrecondition},
	{driver.ErrExists, "ALREADY_EXISTS", codes.AlreadyExists},
	{driver.ErrNotUTF8, "NOT_UTF8", codes.FailedPrecondition},
	{driver.ErrBashMissing, "BASH_MISSING", codes.FailedPrecondition},
	{driver.ErrLimitUnsupported, "LIMIT_UNSUPPORTED", codes.FailedPrecondition},
	{driver.ErrUnsupported, "CAPABILITY_UNSUPPORTED", codes.FailedPrecondition},
	{driver.ErrUnavailable, "DRIVER_UNAVAILABLE", codes.Unavailable},
}

// toStatus turns a driver's error into a status that names the driver
// error, for the host to turn back with fromStatus.
func toStatus(err error) error {
	if err == nil {
		return nil
	}
	for _, w := range wireErrors {
		if errors.Is(err, w.err) {
			st := status.New(w.code, err.Error())
			if d, derr := st.WithDetails(&errdetails.ErrorInfo{Domain: errorDomain, Reason: w.reason}); derr == nil {
				st = d
			}
			return st.Err()
		}
	}
	// A driver's own status with details (a remote API's reason) crosses
	// as it is: the host passes it on to the client.
	var own interface{ GRPCStatus() *status.Status }
	if errors.As(err, &own) && len(own.GRPCStatus().Details()) > 0 {
		return own.GRPCStatus().Err()
	}
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return status.Error(codes.DeadlineExceeded, err.Error())
	case errors.Is(err, context.Canceled):
		return status.Error(codes.Canceled, err.Error())
	}
	return status.Error(codes.Unknown, err.Error())
}

// remoteError is a plugin's error as the host sees it: the plugin's text,
// wrapping the driver error it names.
type remoteError struct {
	msg  string
	kind error
}

func (e *remoteError) Error() string { return e.msg }
func (e *remoteError) Unwrap() error { return e.kind }

// remoteStatus is a plugin driver's own status, with its details (a remote
// API's reason): the host's service returns it as it is, not flattened.
type remoteStatus struct{ st *status.Status }

func (e *remoteStatus) Error() string              { return "plugin: " + e.st.Message() }
func (e *remoteStatus) GRPCStatus() *status.Status { return e.st }

// fromStatus turns a status from the plugin back into a driver error. A
// status naming no driver error stays a plain error with the plugin's text.
func fromStatus(err error) error {
	st, ok := status.FromError(err)
	if !ok {
		return err
	}
	for _, d := range st.Details() {
		info, ok := d.(*errdetails.ErrorInfo)
		if !ok || info.GetDomain() != errorDomain {
			continue
		}
		for _, w := range wireErrors {
			if w.reason == info.GetReason() {
				return &remoteError{msg: st.Message(), kind: w.err}
			}
		}
	}
	if len(st.Details()) > 0 {
		return &remoteStatus{st: st}
	}
	switch st.Code() {
	case codes.Unavailable:
		return &remoteError{msg: "plugin: " + st.Message(), kind: driver.ErrUnavailable}
	case codes.DeadlineExceeded:
		return &remoteError{msg: "plugin: " + st.Message(), kind: context.DeadlineExceeded}
	case codes.Canceled:
		return &remoteError{msg: "plugin: " + st.Message(), kind: context.Canceled}
	}
	return errors.New("plugin: " + st.Message())
}
