package grpcerr_test

import (
	"fmt"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/fabro-sh/fabro-go/platform/grpcerr"
)

// A service declares its domain once and builds every error from it: the
// code, a reason to switch on, metadata, and RetryInfo when a retry helps.
func ExampleDomain_New() {
	const domain grpcerr.Domain = "example.fabro.dev"
	err := domain.New(codes.Unavailable, "SHUTTING_DOWN", "the service is shutting down",
		grpcerr.Meta("replica", "a"), grpcerr.RetryAfter(time.Second))

	info := grpcerr.InfoOf(err)
	delay, _ := grpcerr.RetryDelayOf(err)
	fmt.Println(status.Code(err), info.GetDomain(), info.GetReason(), info.GetMetadata()["replica"], delay)
	// Output: Unavailable example.fabro.dev SHUTTING_DOWN a 1s
}

// A request field at fault: INVALID_ARGUMENT with the field in the
// metadata and a BadRequest violation a client can show next to it.
func ExampleDomain_InvalidField() {
	const domain grpcerr.Domain = "example.fabro.dev"
	err := domain.InvalidField("spec.limits.cpus", "must be between 0 and 64")

	for _, v := range grpcerr.ViolationsOf(err) {
		fmt.Println(grpcerr.ReasonOf(err), v.GetField()+":", v.GetDescription())
	}
	// Output: INVALID_ARGUMENT spec.limits.cpus: must be between 0 and 64
}
