package grpcerr_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/fabro-sh/fabro-go/platform/grpcerr"
)

const (
	here  grpcerr.Domain = "here.fabro.dev"
	there grpcerr.Domain = "there.fabro.dev"
)

func TestNew(t *testing.T) {
	err := here.New(codes.NotFound, "THING_NOT_FOUND", "no thing", grpcerr.Meta("thing_id", "t1", "odd"), grpcerr.RetryAfter(2*time.Second))
	if got := status.Code(err); got != codes.NotFound {
		t.Fatalf("code = %v", got)
	}
	info := grpcerr.InfoOf(err)
	if info.GetDomain() != string(here) || info.GetReason() != "THING_NOT_FOUND" || info.GetMetadata()["thing_id"] != "t1" || len(info.GetMetadata()) != 1 {
		t.Fatalf("info = %v", info)
	}
	if d, ok := grpcerr.RetryDelayOf(err); !ok || d != 2*time.Second {
		t.Fatalf("retry = %v %v", d, ok)
	}
}

func TestInvalidField(t *testing.T) {
	err := here.InvalidField("spec.limits.memory_bytes", "must not be negative")
	if status.Code(err) != codes.InvalidArgument || grpcerr.ReasonOf(err) != grpcerr.ReasonInvalidArgument {
		t.Fatalf("err = %v", err)
	}
	v := grpcerr.ViolationsOf(err)
	if len(v) != 1 || v[0].GetField() != "spec.limits.memory_bytes" || grpcerr.InfoOf(err).GetMetadata()["field"] != "spec.limits.memory_bytes" {
		t.Fatalf("violations = %v", v)
	}
}

func TestUpstream(t *testing.T) {
	withInfo := there.New(codes.FailedPrecondition, "NO_CREDENTIAL", "no key", grpcerr.Meta("provider", "openai"))
	tests := []struct {
		name       string
		in         error
		wantCode   codes.Code
		wantDomain string
		wantReason string
		wantRetry  bool
	}{
		{"details pass through", withInfo, codes.FailedPrecondition, string(there), "NO_CREDENTIAL", false},
		{"bare status keeps its code", status.Error(codes.NotFound, "nope"), codes.NotFound, string(here), "NOT_FOUND", false},
		{"bare unavailable", status.Error(codes.Unavailable, "conn refused"), codes.Unavailable, string(here), grpcerr.ReasonUpstreamUnavailable, true},
		{"not a status", errors.New("dial tcp: refused"), codes.Unavailable, string(here), grpcerr.ReasonUpstreamUnavailable, true},
		{"context", fmt.Errorf("wrapped: %w", context.DeadlineExceeded), codes.DeadlineExceeded, string(here), grpcerr.ReasonDeadlineExceeded, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := here.Upstream("llmgateway", tt.in)
			info := grpcerr.InfoOf(err)
			_, retry := grpcerr.RetryDelayOf(err)
			if status.Code(err) != tt.wantCode || info.GetDomain() != tt.wantDomain || info.GetReason() != tt.wantReason || retry != tt.wantRetry {
				t.Fatalf("got %v %v retry=%v", status.Code(err), info, retry)
			}
		})
	}
	if got := status.Convert(here.Upstream("llmgateway", withInfo)).Message(); got != "llmgateway: no key" {
		t.Fatalf("message = %q", got)
	}
	if here.Upstream("x", nil) != nil {
		t.Fatal("nil in, non-nil out")
	}
}

func TestEnsure(t *testing.T) {
	withInfo := there.New(codes.NotFound, "THING_NOT_FOUND", "no thing")
	bare := status.Error(codes.Unimplemented, "method X not implemented")
	if got := here.Ensure(withInfo); got != withInfo {
		t.Errorf("Ensure changed an error with ErrorInfo: %v", got)
	}
	if got := here.Ensure(nil); got != nil {
		t.Errorf("Ensure(nil) = %v", got)
	}
	plain := errors.New("not a status")
	if got := here.Ensure(plain); got != plain {
		t.Errorf("Ensure changed a non-status: %v", got)
	}
	got := here.Ensure(bare)
	if status.Code(got) != codes.Unimplemented || status.Convert(got).Message() != "method X not implemented" {
		t.Fatalf("Ensure = %v", got)
	}
	if info := grpcerr.InfoOf(got); info.GetDomain() != string(here) || info.GetReason() != "UNIMPLEMENTED" {
		t.Errorf("info = %v", info)
	}
	detailed := here.Status(codes.InvalidArgument, "X", "m", grpcerr.Field("f", "bad")).Proto()
	detailed.Details = detailed.Details[1:] // BadRequest only
	got = there.Ensure(status.FromProto(detailed).Err())
	if grpcerr.ReasonOf(got) != "INVALID_ARGUMENT" || len(grpcerr.ViolationsOf(got)) != 1 {
		t.Errorf("Ensure lost a detail or added no ErrorInfo: %v", status.Convert(got).Details())
	}
}
