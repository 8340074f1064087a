package sandbox

import (
	"context"

	"google.golang.org/grpc/codes"

	sandboxv1 "github.com/fabro-sh/fabro-go/gen/fabro/sandbox/v1"
	"github.com/fabro-sh/fabro-go/platform/grpcerr"
	"github.com/fabro-sh/fabro-go/sdk/sandbox/driver"
)

// The pause facet: PauseSandbox freezes a sandbox's processes through its
// driver and marks the entry paused, so that no command starts (it would
// only hang frozen) until ResumeSandbox.

func errSandboxPaused(id string) error {
	return domain.New(codes.FailedPrecondition, "SANDBOX_PAUSED", "the sandbox is paused: ResumeSandbox it first",
		grpcerr.Meta("sandbox_id", id))
}

// pauser is the sandbox's driver.Pauser, or CAPABILITY_UNSUPPORTED.
func (s *Service) pauser(ctx context.Context, id string) (*entry, driver.Pauser, error) {
	e, sb, err := s.lookup(ctx, id)
	if err != nil {
		return nil, nil, err
	}
	pz, ok := sb.(driver.Pauser)
	if !ok || !sb.Info().Capabilities.Pause {
		return nil, nil, domain.New(codes.FailedPrecondition, "CAPABILITY_UNSUPPORTED",
			"this sandbox's driver ("+e.driver+") does not offer the pause facet (PauseSandbox, ResumeSandbox)",
			grpcerr.Meta("capability", "pause"), grpcerr.Meta("sandbox_id", e.id), grpcerr.Meta("driver", e.driver))
	}
	return e, pz, nil
}

// PauseSandbox implements SandboxService.
func (s *Service) PauseSandbox(ctx context.Context, req *sandboxv1.PauseSandboxRequest) (*sandboxv1.PauseSandboxResponse, error) {
	e, pz, err := s.pauser(ctx, req.GetSandboxId())
	if err != nil {
		return nil, err
	}
	// Held across the driver's call: no command starts meanwhile, and
	// DeleteSandbox comes before or after.
	e.mu.Lock()
	if e.deleting {
		e.mu.Unlock()
		return nil, errSandboxNotFound(e.id)
	}
	err = pz.Pause(ctx)
	if err == nil {
		e.paused = true
	}
	e.mu.Unlock()
	if err != nil {
		return nil, s.callErr(ctx, e, err)
	}
	s.logger.InfoContext(ctx, "sandbox paused", "sandbox_id", e.id)
	return &sandboxv1.PauseSandboxResponse{Sandbox: e.toProto()}, nil
}

// ResumeSandbox implements SandboxService.
func (s *Service) ResumeSandbox(ctx context.Context, req *sandboxv1.ResumeSandboxRequest) (*sandboxv1.ResumeSandboxResponse, error) {
	e, pz, err := s.pauser(ctx, req.GetSandboxId())
	if err != nil {
		return nil, err
	}
	e.mu.Lock()
	if e.deleting {
		e.mu.Unlock()
		return nil, errSandboxNotFound(e.id)
	}
	err = pz.Resume(ctx)
	if err == nil {
		e.paused = false
	}
	e.mu.Unlock()
	if err != nil {
		return nil, s.callErr(ctx, e, err)
	}
	s.logger.InfoContext(ctx, "sandbox resumed", "sandbox_id", e.id)
	return &sandboxv1.ResumeSandboxResponse{Sandbox: e.toProto()}, nil
}
