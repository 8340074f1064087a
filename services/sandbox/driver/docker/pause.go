package docker

import (
	"context"

	"github.com/fabro-sh/fabro-go/sdk/sandbox/driver"
)

var _ driver.Pauser = (*sandbox)(nil)

// Pause implements driver.Pauser: the engine freezes the container's
// cgroup (docker pause). Files are the host's, so they stay reachable.
func (s *sandbox) Pause(ctx context.Context) error {
	if err := s.d.cli.ContainerPause(ctx, s.p.name); err != nil {
		// Already paused is done; the engine says so only in words.
		if ci, ierr := s.d.cli.ContainerInspect(ctx, s.p.name); ierr == nil && ci.State != nil && ci.State.Paused {
			return nil
		}
		return s.engineErr(ctx, "pause", err)
	}
	return nil
}

// Resume implements driver.Pauser (docker unpause).
func (s *sandbox) Resume(ctx context.Context) error {
	if err := s.d.cli.ContainerUnpause(ctx, s.p.name); err != nil {
		if ci, ierr := s.d.cli.ContainerInspect(ctx, s.p.name); ierr == nil && ci.State != nil && ci.State.Running && !ci.State.Paused {
			return nil
		}
		return s.engineErr(ctx, "resume", err)
	}
	return nil
}
