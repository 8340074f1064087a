package agent

import (
	"context"

	"google.golang.org/grpc"

	sandboxv1 "github.com/fabro-sh/fabro-go/gen/fabro/sandbox/v1"
)

// The processes facet's methods of actingSandbox (tenancy.go).

func (a actingSandbox) StartProcess(ctx context.Context, in *sandboxv1.StartProcessRequest, opts ...grpc.CallOption) (*sandboxv1.StartProcessResponse, error) {
	return a.c.StartProcess(forwarding(ctx), in, opts...)
}

func (a actingSandbox) AttachProcess(ctx context.Context, opts ...grpc.CallOption) (grpc.BidiStreamingClient[sandboxv1.AttachProcessRequest, sandboxv1.AttachProcessResponse], error) {
	return a.c.AttachProcess(forwarding(ctx), opts...)
}

func (a actingSandbox) SignalProcess(ctx context.Context, in *sandboxv1.SignalProcessRequest, opts ...grpc.CallOption) (*sandboxv1.SignalProcessResponse, error) {
	return a.c.SignalProcess(forwarding(ctx), in, opts...)
}

func (a actingSandbox) WaitProcess(ctx context.Context, in *sandboxv1.WaitProcessRequest, opts ...grpc.CallOption) (*sandboxv1.WaitProcessResponse, error) {
	return a.c.WaitProcess(forwarding(ctx), in, opts...)
}

func (a actingSandbox) ListProcesses(ctx context.Context, in *sandboxv1.ListProcessesRequest, opts ...grpc.CallOption) (*sandboxv1.ListProcessesResponse, error) {
	return a.c.ListProcesses(forwarding(ctx), in, opts...)
}

// The pause facet's.

func (a actingSandbox) PauseSandbox(ctx context.Context, in *sandboxv1.PauseSandboxRequest, opts ...grpc.CallOption) (*sandboxv1.PauseSandboxResponse, error) {
	return a.c.PauseSandbox(forwarding(ctx), in, opts...)
}

func (a actingSandbox) ResumeSandbox(ctx context.Context, in *sandboxv1.ResumeSandboxRequest, opts ...grpc.CallOption) (*sandboxv1.ResumeSandboxResponse, error) {
	return a.c.ResumeSandbox(forwarding(ctx), in, opts...)
}
