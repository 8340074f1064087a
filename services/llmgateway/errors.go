package llmgateway

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	llmv1 "github.com/fabro-sh/fabro-go/gen/fabro/llm/v1"
	"github.com/fabro-sh/fabro-go/services/llmgateway/internal/catalog"
	"github.com/fabro-sh/fabro-go/services/llmgateway/internal/codec"
)

// kindPolicy is what each error kind means for the caller and for the
// retry loop; the codes follow the ErrorKind comments in types.proto.
type kindPolicy struct {
	code      codes.Code
	retryable bool // the same route may be tried again
	failover  bool // a fallback route may be tried
}

var kindPolicies = map[llmv1.ErrorKind]kindPolicy{
	llmv1.ErrorKind_ERROR_KIND_AUTHENTICATION:  {codes.FailedPrecondition, false, true},
	llmv1.ErrorKind_ERROR_KIND_PERMISSION:      {codes.PermissionDenied, false, true},
	llmv1.ErrorKind_ERROR_KIND_NOT_FOUND:       {codes.NotFound, false, true},
	llmv1.ErrorKind_ERROR_KIND_INVALID_REQUEST: {codes.InvalidArgument, false, false},
	llmv1.ErrorKind_ERROR_KIND_CONTEXT_LENGTH:  {codes.OutOfRange, false, true}, // a larger-context fallback may fit
	llmv1.ErrorKind_ERROR_KIND_CONTENT_FILTER:  {codes.FailedPrecondition, false, false},
	llmv1.ErrorKind_ERROR_KIND_RATE_LIMIT:      {codes.ResourceExhausted, true, true},
	llmv1.ErrorKind_ERROR_KIND_OVERLOADED:      {codes.Unavailable, true, true},
	llmv1.ErrorKind_ERROR_KIND_SERVER:          {codes.Unavailable, true, true},
	llmv1.ErrorKind_ERROR_KIND_TIMEOUT:         {codes.DeadlineExceeded, true, true},
	llmv1.ErrorKind_ERROR_KIND_NETWORK:         {codes.Unavailable, true, true},
	llmv1.ErrorKind_ERROR_KIND_STREAM_DECODE:   {codes.Unavailable, true, true},
	llmv1.ErrorKind_ERROR_KIND_CANCELLED:       {codes.Canceled, false, false},
	llmv1.ErrorKind_ERROR_KIND_RESPONSE_DECODE: {codes.Internal, false, false},
	llmv1.ErrorKind_ERROR_KIND_UNSPECIFIED:     {codes.Internal, false, false},
}

// quotaCodes are provider error codes of a rate-limit kind that waiting will
// not fix (billing exhausted): not retryable, but another route may work.
var quotaCodes = map[string]bool{"insufficient_quota": true, "ServiceQuotaExceededException": true}

// gwError is a failure with its public detail and gRPC code. Everything the
// gateway returns to a caller is built from one.
type gwError struct {
	code   codes.Code
	detail *llmv1.ErrorDetail
}

func (e *gwError) Error() string { return e.detail.GetMessage() }

// GRPCStatus lets status.FromError see the code and details.
func (e *gwError) GRPCStatus() *status.Status {
	st := status.New(e.code, e.detail.GetMessage())
	if ds, err := st.WithDetails(e.detail); err == nil {
		return ds
	}
	return st
}

// statusErr returns the error the RPC handlers return: a plain status error,
// which the server runtime passes through with its details.
func (e *gwError) statusErr() error { return e.GRPCStatus().Err() }

// newError builds a gateway error outside the upstream path.
func newError(code codes.Code, kind llmv1.ErrorKind, format string, args ...any) *gwError {
	return &gwError{code: code, detail: &llmv1.ErrorDetail{Kind: kind, Message: fmt.Sprintf(format, args...)}}
}

// fromCodecError classifies a codec's upstream error for one route.
func fromCodecError(ce *codec.Error, route catalog.Route) *gwError {
	pol := kindPolicies[ce.Kind]
	d := &llmv1.ErrorDetail{
		Kind:              ce.Kind,
		Message:           fmt.Sprintf("%s: %s", route.Canonical(), ce.Message),
		Provider:          route.Provider.GetProviderId(),
		Model:             route.Model.GetModelId(),
		Retryable:         pol.retryable,
		FailoverEligible:  pol.failover,
		StatusCode:        int32(ce.StatusCode),
		ProviderErrorCode: ce.Code,
		ProviderRequestId: ce.RequestID,
	}
	if quotaCodes[ce.Code] {
		d.Retryable = false
	}
	if ce.RetryAfter > 0 {
		d.RetryAfter = durationpb.New(ce.RetryAfter)
	}
	return &gwError{code: pol.code, detail: d}
}

// classify turns any error of an attempt into a gateway error: codec errors
// keep their kind; context and transport errors get theirs here.
func classify(ctx context.Context, err error, route catalog.Route) *gwError {
	var ge *gwError
	if errors.As(err, &ge) {
		return ge
	}
	var ce *codec.Error
	if errors.As(err, &ce) {
		return fromCodecError(ce, route)
	}
	kind := llmv1.ErrorKind_ERROR_KIND_NETWORK
	msg := "upstream connection failed"
	var ne net.Error
	switch {
	case ctx.Err() != nil && errors.Is(context.Cause(ctx), context.DeadlineExceeded), errors.Is(err, context.DeadlineExceeded):
		kind, msg = llmv1.ErrorKind_ERROR_KIND_TIMEOUT, "deadline exceeded"
	case ctx.Err() != nil, errors.Is(err, context.Canceled):
		kind, msg = llmv1.ErrorKind_ERROR_KIND_CANCELLED, "the call was cancelled"
	case errors.Is(err, io.ErrUnexpectedEOF):
		kind, msg = llmv1.ErrorKind_ERROR_KIND_STREAM_DECODE, "upstream closed the stream before its end"
	case errors.As(err, &ne) && ne.Timeout():
		kind, msg = llmv1.ErrorKind_ERROR_KIND_TIMEOUT, "upstream timed out"
	}
	return fromCodecError(&codec.Error{Kind: kind, Message: msg}, route)
}

// retryAfter is the provider's hint, 0 when none.
func (e *gwError) retryAfter() time.Duration {
	if d := e.detail.GetRetryAfter(); d != nil {
		return d.AsDuration()
	}
	return 0
}

// catalogError maps a selector resolution failure to a gateway error.
func catalogError(err error) *gwError {
	var nf *catalog.NotFoundError
	var de *catalog.DisabledError
	switch {
	case errors.Is(err, catalog.ErrEmptySelector):
		return newError(codes.InvalidArgument, llmv1.ErrorKind_ERROR_KIND_INVALID_REQUEST, "a model selector is required")
	case errors.As(err, &nf):
		e := newError(codes.NotFound, llmv1.ErrorKind_ERROR_KIND_NOT_FOUND, "%s", nf.Error())
		e.detail.Hints = nf.Hints
		return e
	case errors.As(err, &de):
		e := newError(codes.FailedPrecondition, llmv1.ErrorKind_ERROR_KIND_UNSPECIFIED, "%s", de.Error())
		e.detail.Provider, e.detail.Model = de.Provider, de.Model
		return e
	}
	return newError(codes.Internal, llmv1.ErrorKind_ERROR_KIND_UNSPECIFIED, "internal error")
}

// toStatus is the edge conversion for every RPC: gateway errors keep their
// detail; context errors become Canceled or DeadlineExceeded; anything else
// is Internal with a generic message.
func toStatus(ctx context.Context, err error) error {
	if err == nil {
		return nil
	}
	var ge *gwError
	if errors.As(err, &ge) {
		return ge.statusErr()
	}
	if ctx.Err() != nil {
		return status.FromContextError(ctx.Err()).Err()
	}
	return newError(codes.Internal, llmv1.ErrorKind_ERROR_KIND_UNSPECIFIED, "internal error").statusErr()
}
