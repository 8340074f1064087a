package sandbox_test

import (
	"context"

	"google.golang.org/grpc/codes"

	sandboxv1 "github.com/fabro-sh/fabro-go/gen/fabro/sandbox/v1"
	"github.com/fabro-sh/fabro-go/platform/grpcerr"
	"github.com/fabro-sh/fabro-go/platform/server/malformedtest"
)

// processMalformedCases are TestMalformedInput's cases of the processes
// facet, on sandbox id.
func processMalformedCases(c sandboxv1.SandboxServiceClient, id string) []malformedtest.Case {
	ia, invalid := codes.InvalidArgument, grpcerr.ReasonInvalidArgument
	start := func(sandboxID string, spec *sandboxv1.ProcessSpec) func(context.Context) error {
		return func(ctx context.Context) error {
			_, err := c.StartProcess(ctx, &sandboxv1.StartProcessRequest{SandboxId: sandboxID, Spec: spec})
			return err
		}
	}
	attach := func(first *sandboxv1.AttachProcessRequest) func(context.Context) error {
		return func(ctx context.Context) error {
			st, err := c.AttachProcess(ctx)
			if err != nil {
				return err
			}
			if err := st.Send(first); err != nil {
				return err
			}
			_, err = st.Recv()
			return err
		}
	}
	return []malformedtest.Case{
		{Method: "StartProcess", Name: "no id", Call: start("", &sandboxv1.ProcessSpec{Command: "true"}), Code: ia, Reason: invalid, Field: "sandbox_id"},
		{Method: "StartProcess", Name: "no spec", Call: start(id, nil), Code: ia, Reason: invalid, Field: "spec.command"},
		{Method: "StartProcess", Name: "command and args", Call: start(id, &sandboxv1.ProcessSpec{Command: "true", Args: []string{"true"}}), Code: ia, Reason: invalid, Field: "spec.args"},
		{Method: "StartProcess", Name: "command with NUL", Call: start(id, &sandboxv1.ProcessSpec{Command: "echo \x00"}), Code: ia, Reason: invalid, Field: "spec.command"},
		{Method: "StartProcess", Name: "negative output limit", Call: start(id, &sandboxv1.ProcessSpec{Command: "true", RetainedOutputLimitBytes: -1}), Code: ia, Reason: invalid, Field: "spec.retained_output_limit_bytes"},
		{Method: "StartProcess", Name: "service without name", Call: start(id, &sandboxv1.ProcessSpec{Command: "true", Service: true}), Code: ia, Reason: invalid, Field: "spec.name"},
		{Method: "AttachProcess", Name: "stdin first", Call: attach(&sandboxv1.AttachProcessRequest{Event: &sandboxv1.AttachProcessRequest_Stdin{Stdin: []byte("x")}}), Code: ia, Reason: invalid, Field: "open"},
		{Method: "AttachProcess", Name: "no process id", Call: attach(&sandboxv1.AttachProcessRequest{Event: &sandboxv1.AttachProcessRequest_Open{Open: &sandboxv1.AttachOpen{SandboxId: id}}}), Code: ia, Reason: invalid, Field: "process_id"},
		{Method: "SignalProcess", Name: "no id", Code: ia, Reason: invalid, Field: "sandbox_id", Call: func(ctx context.Context) error {
			_, err := c.SignalProcess(ctx, &sandboxv1.SignalProcessRequest{ProcessId: "p", Signal: "TERM"})
			return err
		}},
		{Method: "SignalProcess", Name: "unknown process", Code: codes.NotFound, Reason: "PROCESS_NOT_FOUND", Call: func(ctx context.Context) error {
			_, err := c.SignalProcess(ctx, &sandboxv1.SignalProcessRequest{SandboxId: id, ProcessId: "proc-nope", Signal: "TERM"})
			return err
		}},
		{Method: "WaitProcess", Name: "no process id", Code: ia, Reason: invalid, Field: "process_id", Call: func(ctx context.Context) error {
			_, err := c.WaitProcess(ctx, &sandboxv1.WaitProcessRequest{SandboxId: id})
			return err
		}},
		{Method: "ListProcesses", Name: "no id", Code: ia, Reason: invalid, Field: "sandbox_id", Call: func(ctx context.Context) error {
			_, err := c.ListProcesses(ctx, &sandboxv1.ListProcessesRequest{})
			return err
		}},
		{Method: "PauseSandbox", Name: "no id", Code: ia, Reason: invalid, Field: "sandbox_id", Call: func(ctx context.Context) error {
			_, err := c.PauseSandbox(ctx, &sandboxv1.PauseSandboxRequest{})
			return err
		}},
		{Method: "PauseSandbox", Name: "unknown id", Code: codes.NotFound, Reason: "SANDBOX_NOT_FOUND", Call: func(ctx context.Context) error {
			_, err := c.PauseSandbox(ctx, &sandboxv1.PauseSandboxRequest{SandboxId: "sbx-nope"})
			return err
		}},
		{Method: "PauseSandbox", Name: "a local sandbox (no pause facet)", Code: codes.FailedPrecondition, Reason: "CAPABILITY_UNSUPPORTED", Call: func(ctx context.Context) error {
			_, err := c.PauseSandbox(ctx, &sandboxv1.PauseSandboxRequest{SandboxId: id})
			return err
		}},
		{Method: "ResumeSandbox", Name: "no id", Code: ia, Reason: invalid, Field: "sandbox_id", Call: func(ctx context.Context) error {
			_, err := c.ResumeSandbox(ctx, &sandboxv1.ResumeSandboxRequest{})
			return err
		}},
		{Method: "ResumeSandbox", Name: "a local sandbox (no pause facet)", Code: codes.FailedPrecondition, Reason: "CAPABILITY_UNSUPPORTED", Call: func(ctx context.Context) error {
			_, err := c.ResumeSandbox(ctx, &sandboxv1.ResumeSandboxRequest{SandboxId: id})
			return err
		}},
	}
}
