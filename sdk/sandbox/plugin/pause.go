package plugin

import (
	"context"
	"fmt"

	pluginv1 "github.com/fabro-sh/fabro-go/gen/fabro/sandbox/plugin/v1"
	"github.com/fabro-sh/fabro-go/sdk/sandbox/driver"
)

// The pause facet over the protocol: the Pause and Resume RPCs.

// pauser is the plugin's sandbox as a driver.Pauser, or the error of one
// without the facet.
func (s *server) pauser(handle string) (driver.Pauser, error) {
	sb, err := s.sandbox(handle)
	if err != nil {
		return nil, err
	}
	p, ok := sb.(driver.Pauser)
	if !ok || !sb.Info().Capabilities.Pause {
		return nil, toStatus(fmt.Errorf("%w: this driver has no pause facet", driver.ErrUnsupported))
	}
	return p, nil
}

func (s *server) Pause(ctx context.Context, req *pluginv1.PauseRequest) (*pluginv1.PauseResponse, error) {
	p, err := s.pauser(req.GetSandbox())
	if err != nil {
		return nil, err
	}
	if err := p.Pause(ctx); err != nil {
		return nil, toStatus(err)
	}
	return &pluginv1.PauseResponse{}, nil
}

func (s *server) Resume(ctx context.Context, req *pluginv1.ResumeRequest) (*pluginv1.ResumeResponse, error) {
	p, err := s.pauser(req.GetSandbox())
	if err != nil {
		return nil, err
	}
	if err := p.Resume(ctx); err != nil {
		return nil, toStatus(err)
	}
	return &pluginv1.ResumeResponse{}, nil
}

var _ driver.Pauser = (*sandbox)(nil)

// Pause implements driver.Pauser.
func (s *sandbox) Pause(ctx context.Context) error {
	ctx, cancel, err := s.call(ctx)
	if err != nil {
		return err
	}
	defer cancel()
	if _, err := s.client().Pause(ctx, &pluginv1.PauseRequest{Sandbox: s.handle}); err != nil {
		return s.d.callErr(ctx, s.p, err)
	}
	return nil
}

// Resume implements driver.Pauser.
func (s *sandbox) Resume(ctx context.Context) error {
	ctx, cancel, err := s.call(ctx)
	if err != nil {
		return err
	}
	defer cancel()
	if _, err := s.client().Resume(ctx, &pluginv1.ResumeRequest{Sandbox: s.handle}); err != nil {
		return s.d.callErr(ctx, s.p, err)
	}
	return nil
}
