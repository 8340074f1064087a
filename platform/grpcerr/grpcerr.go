// Package grpcerr builds every gRPC status the services return, so that each
// error carries the same details: google.rpc.ErrorInfo always (domain, reason,
// metadata), BadRequest when a field is at fault, RetryInfo when a retry can
// succeed. Services declare one Domain and build their errors from it.
package grpcerr

import (
	"context"
	"errors"
	"fmt"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/protoadapt"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
)

// Reasons shared by every domain.
const (
	// ReasonInvalidArgument marks a request field that fails validation; the
	// field is named in the metadata ("field") and in BadRequest.
	ReasonInvalidArgument = "INVALID_ARGUMENT"
	// ReasonMalformedRequest marks a request whose bytes are not the message
	// (undecodable protobuf, invalid UTF-8 in a string field).
	ReasonMalformedRequest = "MALFORMED_REQUEST"
	// ReasonUpstreamUnavailable marks a dependency (another service, NATS)
	// that could not be reached; metadata "service" names it.
	ReasonUpstreamUnavailable = "UPSTREAM_UNAVAILABLE"
	// ReasonCancelled and ReasonDeadlineExceeded mark a call ended by its
	// context.
	ReasonCancelled        = "CANCELLED"
	ReasonDeadlineExceeded = "DEADLINE_EXCEEDED"
	// ReasonInternal marks a bug in our code: nothing the caller can change.
	ReasonInternal = "INTERNAL"
)

// Domain is the ErrorInfo domain of one service, for example
// "vault.fabro.dev". Its methods build that service's errors.
type Domain string

// Option adds a detail or metadata to an error being built.
type Option func(*builder)

type builder struct {
	md         map[string]string
	violations []*errdetails.BadRequest_FieldViolation
	retry      *time.Duration
	extra      []protoadapt.MessageV1
}

// Meta adds metadata pairs (key, value, key, value...) to the ErrorInfo.
// An odd trailing key is ignored.
func Meta(kv ...string) Option {
	return func(b *builder) {
		for i := 0; i+1 < len(kv); i += 2 {
			b.md[kv[i]] = kv[i+1]
		}
	}
}

// Metadata adds every entry of md to the ErrorInfo.
func Metadata(md map[string]string) Option {
	return func(b *builder) {
		for k, v := range md {
			b.md[k] = v
		}
	}
}

// Field adds a BadRequest field violation (field in the request's proto
// path form, "spec.limits.memory_bytes").
func Field(field, description string) Option {
	return func(b *builder) {
		b.violations = append(b.violations, &errdetails.BadRequest_FieldViolation{Field: field, Description: description})
	}
}

// RetryAfter adds RetryInfo: the call may succeed when repeated after d.
func RetryAfter(d time.Duration) Option {
	return func(b *builder) { b.retry = &d }
}

// Detail adds any other detail message (a service's own detail type).
func Detail(m protoadapt.MessageV1) Option {
	return func(b *builder) { b.extra = append(b.extra, m) }
}

// New builds a status error with ErrorInfo{Domain: d, Reason: reason}.
func (d Domain) New(code codes.Code, reason, msg string, opts ...Option) error {
	return d.Status(code, reason, msg, opts...).Err()
}

// Newf is New with a formatted message.
func (d Domain) Newf(code codes.Code, reason, format string, args ...any) error {
	return d.New(code, reason, fmt.Sprintf(format, args...))
}

// Status is New returning the *status.Status, for callers that add more.
func (d Domain) Status(code codes.Code, reason, msg string, opts ...Option) *status.Status {
	b := builder{md: map[string]string{}}
	for _, o := range opts {
		o(&b)
	}
	details := []protoadapt.MessageV1{&errdetails.ErrorInfo{Domain: string(d), Reason: reason, Metadata: b.md}}
	if len(b.violations) > 0 {
		details = append(details, &errdetails.BadRequest{FieldViolations: b.violations})
	}
	if b.retry != nil {
		details = append(details, &errdetails.RetryInfo{RetryDelay: durationpb.New(*b.retry)})
	}
	details = append(details, b.extra...)
	st := status.New(code, msg)
	if withDetails, err := st.WithDetails(details...); err == nil {
		return withDetails
	}
	return st
}

// InvalidField is INVALID_ARGUMENT for one request field: ErrorInfo reason
// INVALID_ARGUMENT with metadata field, and a BadRequest violation.
func (d Domain) InvalidField(field, msg string, opts ...Option) error {
	return d.New(codes.InvalidArgument, ReasonInvalidArgument, msg, append([]Option{Meta("field", field), Field(field, msg)}, opts...)...)
}

// Internal is INTERNAL: a bug in our code. The message must not carry
// secrets or upstream text; log the cause where it is known.
func (d Domain) Internal(msg string) error {
	return d.New(codes.Internal, ReasonInternal, msg)
}

// FromContext turns a context's end into CANCELLED or DEADLINE_EXCEEDED; nil
// when err is neither.
func (d Domain) FromContext(err error) error {
	switch {
	case errors.Is(err, context.Canceled):
		return d.New(codes.Canceled, ReasonCancelled, "the call was cancelled")
	case errors.Is(err, context.DeadlineExceeded):
		return d.New(codes.DeadlineExceeded, ReasonDeadlineExceeded, "the deadline passed")
	}
	return nil
}

// Upstream turns the error of a call to another service (named by service,
// "llmgateway") into this service's answer. A status with an ErrorInfo keeps
// its code and every detail, its message prefixed with the service: the
// caller sees the upstream's reason, not a flattened UNAVAILABLE. A status
// without details keeps its code and gains this domain's ErrorInfo. An error
// that is not a status (the connection failed) is UNAVAILABLE with
// UPSTREAM_UNAVAILABLE and RetryInfo.
func (d Domain) Upstream(service string, err error) error {
	if err == nil {
		return nil
	}
	if e := d.FromContext(err); e != nil {
		if _, isStatus := status.FromError(err); !isStatus {
			return e
		}
	}
	st, ok := status.FromError(err)
	if !ok {
		return d.New(codes.Unavailable, ReasonUpstreamUnavailable, service+" unavailable: "+err.Error(),
			Meta("service", service), RetryAfter(time.Second))
	}
	msg := service + ": " + st.Message()
	if st.Code() == codes.Unavailable && InfoOf(err) == nil {
		return d.New(codes.Unavailable, ReasonUpstreamUnavailable, msg, Meta("service", service), RetryAfter(time.Second))
	}
	if InfoOf(err) == nil {
		return d.New(st.Code(), CodeReason(st.Code()), msg, Meta("service", service))
	}
	p := st.Proto()
	p.Message = msg
	return status.FromProto(p).Err()
}

// Ensure returns err unchanged when it has an ErrorInfo or is not a status;
// a status without one keeps its code, message and details and gains this
// domain's ErrorInfo, its reason spelled from the code (NOT_FOUND). The
// server runtime applies it to every answer, so no error leaves without one.
func (d Domain) Ensure(err error) error {
	st, ok := status.FromError(err)
	if !ok || err == nil || InfoOf(err) != nil {
		return err
	}
	p := st.Proto()
	info, aerr := anypb.New(&errdetails.ErrorInfo{Domain: string(d), Reason: CodeReason(st.Code())})
	if aerr != nil {
		return err
	}
	p.Details = append([]*anypb.Any{info}, p.Details...)
	return status.FromProto(p).Err()
}

// codeReason spells a code as a reason: NotFound becomes NOT_FOUND.
func CodeReason(c codes.Code) string {
	name := c.String()
	out := make([]byte, 0, len(name)+4)
	for i := 0; i < len(name); i++ {
		ch := name[i]
		if ch >= 'A' && ch <= 'Z' && i > 0 {
			out = append(out, '_')
		}
		if ch >= 'a' && ch <= 'z' {
			ch -= 'a' - 'A'
		}
		out = append(out, ch)
	}
	return string(out)
}

// InfoOf returns the ErrorInfo of err, or nil.
func InfoOf(err error) *errdetails.ErrorInfo {
	st, ok := status.FromError(err)
	if !ok {
		return nil
	}
	for _, det := range st.Details() {
		if info, ok := det.(*errdetails.ErrorInfo); ok {
			return info
		}
	}
	return nil
}

// ReasonOf returns the ErrorInfo reason of err, or "".
func ReasonOf(err error) string {
	if info := InfoOf(err); info != nil {
		return info.GetReason()
	}
	return ""
}

// RetryDelayOf returns the RetryInfo delay of err and whether it has one.
func RetryDelayOf(err error) (time.Duration, bool) {
	st, ok := status.FromError(err)
	if !ok {
		return 0, false
	}
	for _, det := range st.Details() {
		if ri, ok := det.(*errdetails.RetryInfo); ok {
			return ri.GetRetryDelay().AsDuration(), true
		}
	}
	return 0, false
}

// ViolationsOf returns the BadRequest field violations of err.
func ViolationsOf(err error) []*errdetails.BadRequest_FieldViolation {
	st, ok := status.FromError(err)
	if !ok {
		return nil
	}
	var out []*errdetails.BadRequest_FieldViolation
	for _, det := range st.Details() {
		if br, ok := det.(*errdetails.BadRequest); ok {
			out = append(out, br.GetFieldViolations()...)
		}
	}
	return out
}
