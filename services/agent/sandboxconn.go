package agent

import (
	"context"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	sandboxv1 "github.com/fabro-sh/fabro-go/gen/fabro/sandbox/v1"
)

// sandboxRetryable names the sandbox calls that may be sent again after
// a connection that broke mid-call: reads, and writes whose repeat leaves
// the same state. A call that creates, deletes, renames or runs something
// is not retried once it may have reached the service (a stream is
// retried only when it could not open: grpcclient.AwaitRestart).
func sandboxRetryable(method string) bool {
	switch method {
	case sandboxv1.SandboxService_ListDrivers_FullMethodName,
		sandboxv1.SandboxService_GetDriver_FullMethodName,
		sandboxv1.SandboxService_GetSandbox_FullMethodName,
		sandboxv1.SandboxService_ListSandboxes_FullMethodName,
		sandboxv1.SandboxService_ReadFile_FullMethodName,
		sandboxv1.SandboxService_WriteFile_FullMethodName,
		sandboxv1.SandboxService_StatFile_FullMethodName,
		sandboxv1.SandboxService_ListDirectory_FullMethodName,
		sandboxv1.SandboxService_MakeDirectory_FullMethodName,
		sandboxv1.SandboxService_Grep_FullMethodName,
		sandboxv1.SandboxService_Glob_FullMethodName:
		return true
	}
	return false
}

// sandboxGone reports whether a session's sandbox is surely gone (the
// sandbox service says so), as opposed to a sandbox service that cannot
// be reached now: only the first ends the session; the second fails the
// prompt, and the session waits to be prompted again.
func (s *Service) sandboxGone(ctx context.Context, sandboxID string) bool {
	// Generous: an answer too late reads as "cannot be reached", which
	// leaves open a session whose sandbox is gone.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	_, err := s.sandbox.GetSandbox(ctx, &sandboxv1.GetSandboxRequest{SandboxId: sandboxID})
	return status.Code(err) == codes.NotFound
}
