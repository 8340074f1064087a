package llmgateway

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"

	llmv1 "github.com/fabro-sh/fabro-go/gen/fabro/llm/v1"
	"github.com/fabro-sh/fabro-go/platform/grpcerr"
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
	llmv1.ErrorKind_ERROR_KIND_RESPONSE_DECODE: {codes.Unavailable, false, false}, // the provider's reply, not our code
	llmv1.ErrorKind_ERROR_KIND_UNSPECIFIED:     {codes.Internal, false, false},
}

// quotaCodes are provider error codes of a rate-limit kind that waiting will
// not fix (billing exhausted): not retryable, but another route may work.
var quotaCodes = map[string]bool{"insufficient_quota": true, "ServiceQuotaExceededException": true}

// domain is the google.rpc.ErrorInfo domain of every gateway error.
const domain grpcerr.Domain = "llmgateway.fabro.dev"

// gwError is a failure with its public detail and gRPC code. Everything the
// gateway returns to a caller is built from one.
type gwError struct {
	code   codes.Code
	detail *llmv1.ErrorDetail
	reason string // ErrorInfo reason; "" means the kind's name
	field  string // the request field at fault, for BadRequest; "" if none
	// upstream is the status of the service that failed (the vault), whose
	// details pass through; nil for the gateway's own errors.
	upstream *status.Status
}

func (e *gwError) Error() string { return e.detail.GetMessage() }

// GRPCStatus lets status.FromError see the code and details: ErrorInfo,
// BadRequest for a field, RetryInfo when the call may succeed again, and
// the ErrorDetail. An upstream's status keeps its own details, and gains
// the ErrorDetail.
func (e *gwError) GRPCStatus() *status.Status {
	if e.upstream != nil {
		p := e.upstream.Proto()
		p.Code, p.Message = int32(e.code), e.detail.GetMessage()
		if d, err := anypb.New(e.detail); err == nil {
			p.Details = append(p.Details, d)
		}
		return status.FromProto(p)
	}
	md := map[string]string{}
	for k, v := range map[string]string{"provider": e.detail.GetProviderId(), "model": e.detail.GetModelId(),
		"provider_error_code": e.detail.GetProviderErrorCode(), "missing_credentials": strings.Join(e.detail.GetMissingCredentials(), ","), "field": e.field} {
		if v != "" {
			md[k] = v
		}
	}
	if c := e.detail.GetStatusCode(); c != 0 {
		md["http_status"] = strconv.Itoa(int(c))
	}
	opts := []grpcerr.Option{grpcerr.Metadata(md), grpcerr.Detail(e.detail)}
	if e.field != "" {
		opts = append(opts, grpcerr.Field(e.field, e.detail.GetMessage()))
	}
	if e.detail.GetRetryable() {
		opts = append(opts, grpcerr.RetryAfter(max(e.retryAfter(), time.Second)))
	}
	return domain.Status(e.code, e.reasonName(), e.detail.GetMessage(), opts...)
}

// reasonName is the ErrorInfo reason: the one set, or the kind's name
// (RATE_LIMIT), INTERNAL for no kind.
func (e *gwError) reasonName() string {
	if e.reason != "" {
		return e.reason
	}
	if e.detail.GetKind() == llmv1.ErrorKind_ERROR_KIND_UNSPECIFIED {
		return grpcerr.CodeReason(e.code)
	}
	return strings.TrimPrefix(e.detail.GetKind().String(), "ERROR_KIND_")
}

// withReason sets the ErrorInfo reason.
func (e *gwError) withReason(reason string) *gwError {
	e.reason = reason
	return e
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
		ProviderId:        route.Provider.GetProviderId(),
		ModelId:           route.Model.GetModelId(),
		Retryable:         pol.retryable,
		FailoverEligible:  pol.failover,
		StatusCode:        int32(ce.StatusCode),
		ProviderErrorCode: ce.Code,
		ProviderRequestId: ce.RequestID,
	}
	// A provider's failure: PROVIDER_RATE_LIMIT, PROVIDER_OVERLOADED...
	reason := "PROVIDER_" + strings.TrimPrefix(ce.Kind.String(), "ERROR_KIND_")
	if quotaCodes[ce.Code] {
		d.Retryable = false
		reason = "PROVIDER_QUOTA_EXHAUSTED"
	}
	if ce.RetryAfter > 0 {
		d.RetryAfter = durationpb.New(ce.RetryAfter)
	}
	return &gwError{code: pol.code, detail: d, reason: reason}
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
	reason := ""
	switch {
	case ctx.Err() != nil && errors.Is(context.Cause(ctx), context.DeadlineExceeded), errors.Is(err, context.DeadlineExceeded):
		kind, msg, reason = llmv1.ErrorKind_ERROR_KIND_TIMEOUT, "deadline exceeded", grpcerr.ReasonDeadlineExceeded
	case ctx.Err() != nil, errors.Is(err, context.Canceled):
		kind, msg, reason = llmv1.ErrorKind_ERROR_KIND_CANCELLED, "the call was cancelled", grpcerr.ReasonCancelled
	case errors.Is(err, io.ErrUnexpectedEOF):
		kind, msg = llmv1.ErrorKind_ERROR_KIND_STREAM_DECODE, "upstream closed the stream before its end"
	case errors.As(err, &ne) && ne.Timeout():
		kind, msg = llmv1.ErrorKind_ERROR_KIND_TIMEOUT, "upstream timed out"
	}
	e := fromCodecError(&codec.Error{Kind: kind, Message: msg}, route)
	if reason != "" {
		e.reason = reason
	}
	return e
}

// retryAfter is the provider's hint, 0 when none.
func (e *gwError) retryAfter() time.Duration {
	if d := e.detail.GetRetryAfter(); d != nil {
		return d.AsDuration()
	}
	return 0
}

// catalogError maps a selector resolution failure to a gateway error; field
// is where the request gave the selector.
func catalogError(field string, err error) *gwError {
	var nf *catalog.NotFoundError
	var de *catalog.DisabledError
	switch {
	case errors.Is(err, catalog.ErrEmptySelector):
		return invalid(field, "a model selector is required")
	case errors.As(err, &nf):
		e := newError(codes.NotFound, llmv1.ErrorKind_ERROR_KIND_NOT_FOUND, "%s", nf.Error()).withReason("MODEL_NOT_FOUND")
		e.detail.Hints = nf.Hints
		return e
	case errors.As(err, &de):
		e := newError(codes.FailedPrecondition, llmv1.ErrorKind_ERROR_KIND_UNSPECIFIED, "%s", de.Error()).withReason("MODEL_DISABLED")
		e.detail.ProviderId, e.detail.ModelId = de.Provider, de.Model
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
	if e := domain.FromContext(ctx.Err()); e != nil {
		return e
	}
	return newError(codes.Internal, llmv1.ErrorKind_ERROR_KIND_UNSPECIFIED, "internal error").statusErr()
}
