// Package sandbox is the sandbox service: it keeps many sandboxes by id,
// each made by a driver (see package driver), and offers their file, exec
// and search operations over gRPC and the REST gateway.
package sandbox

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"google.golang.org/grpc"

	sandboxv1 "github.com/fabro-sh/fabro-go/gen/fabro/sandbox/v1"
	"github.com/fabro-sh/fabro-go/sdk/sandbox/driver"
	"github.com/fabro-sh/fabro-go/services/sandbox/driver/local"
)

// Config configures the service.
type Config struct {
	// DataDir, when set, holds managed local workspaces under
	// DataDir/sandbox/workspaces; otherwise they go to the system's
	// temporary directory. The service claims that directory while it
	// runs and, at start, removes the workspaces an earlier run left
	// there (sandboxes live in memory only, so none can refer to them).
	DataDir string
	// Drivers are the drivers sandboxes can be made with; default the
	// local driver alone.
	Drivers []driver.Driver
}

// Service is the sandbox service. It implements the gRPC SandboxService and
// the server runtime's Service interface.
type Service struct {
	sandboxv1.UnimplementedSandboxServiceServer

	logger  *slog.Logger
	drivers map[string]driver.Driver
	wsLock  *local.WorkspaceLock // held while the service owns DataDir's workspaces

	mu        sync.Mutex
	sandboxes map[string]*entry
	order     []string // ids, oldest first
}

// entry is one sandbox and its running commands.
type entry struct {
	id      string
	driver  string
	spec    driver.Spec
	sb      driver.Sandbox
	created time.Time

	mu       sync.Mutex
	deleting bool
	execs    map[string]*running
}

// running is one running command's handles: cancel starts a graceful stop
// (or a kill, with cause driver.ErrKill), and closing kill escalates a
// graceful stop already under way to KILL at once.
type running struct {
	cancel context.CancelCauseFunc
	kill   chan struct{}
	killed bool
}

// stop stops the command; e.mu is held.
func (r *running) stop(kill bool) {
	if !kill {
		r.cancel(errors.New("cancelled by CancelExec"))
		return
	}
	if !r.killed {
		r.killed = true
		close(r.kill)
	}
	r.cancel(driver.ErrKill)
}

// New returns the service. It starts nothing: sandboxes are made on request.
func New(cfg Config, logger *slog.Logger) (*Service, error) {
	initMetrics()
	s := &Service{logger: logger, drivers: map[string]driver.Driver{}, sandboxes: map[string]*entry{}}
	if len(cfg.Drivers) == 0 {
		lc := local.Config{}
		if cfg.DataDir != "" {
			lc.WorkspaceRoot = filepath.Join(cfg.DataDir, "sandbox", "workspaces")
			if err := s.sweep(lc.WorkspaceRoot); err != nil {
				return nil, err
			}
		}
		cfg.Drivers = []driver.Driver{local.New(lc)}
	}
	for _, d := range cfg.Drivers {
		if _, dup := s.drivers[d.Name()]; dup {
			s.wsLock.Release()
			return nil, fmt.Errorf("sandbox: driver %q given twice", d.Name())
		}
		s.drivers[d.Name()] = d
	}
	return s, nil
}

// sweep claims the workspace root and removes orphaned workspaces. Another
// live service on the same root is not an error: its workspaces are left
// alone.
func (s *Service) sweep(root string) error {
	lock, removed, err := local.ClaimWorkspaceRoot(root)
	switch {
	case errors.Is(err, local.ErrWorkspaceRootBusy):
		s.logger.Warn("workspace root in use by another sandbox service; orphaned workspaces are not swept", "workspace_root", root)
		return nil
	case lock == nil:
		return fmt.Errorf("sandbox: %w", err)
	case err != nil:
		s.logger.Warn("some orphaned workspaces could not be removed", "workspace_root", root, "error", err)
	}
	s.wsLock = lock
	if len(removed) > 0 {
		s.logger.Info("orphaned workspaces removed", "workspace_root", root, "count", len(removed))
	}
	return nil
}

// Close deletes every sandbox, killing their commands and removing managed
// workspaces.
func (s *Service) Close(ctx context.Context) error {
	s.mu.Lock()
	ids := slices.Clone(s.order)
	s.mu.Unlock()
	var errs []error
	for _, id := range ids {
		if _, err := s.deleteSandbox(ctx, id); err != nil {
			errs = append(errs, err)
		}
	}
	if err := s.wsLock.Release(); err != nil {
		errs = append(errs, err)
	}
	s.wsLock = nil
	return errors.Join(errs...)
}

// Name implements the server runtime's Service.
func (s *Service) Name() string { return sandboxv1.SandboxService_ServiceDesc.ServiceName }

// RegisterGRPC implements the server runtime's Service.
func (s *Service) RegisterGRPC(r grpc.ServiceRegistrar) { sandboxv1.RegisterSandboxServiceServer(r, s) }

// RegisterGateway implements the server runtime's Service.
func (s *Service) RegisterGateway(ctx context.Context, mux *runtime.ServeMux, conn *grpc.ClientConn) error {
	return sandboxv1.RegisterSandboxServiceHandler(ctx, mux, conn)
}

func (s *Service) lookup(id string) (*entry, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.sandboxes[id]
	if !ok {
		return nil, errSandboxNotFound(id)
	}
	return e, nil
}

func (s *Service) add(e *entry) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.sandboxes[e.id] = e
	s.order = append(s.order, e.id)
}

func (s *Service) deleteSandbox(ctx context.Context, id string) (bool, error) {
	s.mu.Lock()
	e, ok := s.sandboxes[id]
	if ok {
		delete(s.sandboxes, id)
		s.order = slices.DeleteFunc(s.order, func(x string) bool { return x == id })
	}
	s.mu.Unlock()
	if !ok {
		return false, nil
	}
	e.mu.Lock()
	e.deleting = true
	for _, r := range e.execs {
		r.stop(true)
	}
	e.mu.Unlock()
	if err := e.sb.Delete(ctx); err != nil {
		return true, err
	}
	s.logger.InfoContext(ctx, "sandbox deleted", "sandbox_id", id)
	return true, nil
}

// startExec registers an exec id on e and returns a context that
// CancelExec and DeleteSandbox cancel, the channel they close to kill at
// once, and a function to unregister it.
func (e *entry) startExec(ctx context.Context, id string) (context.Context, <-chan struct{}, func(), error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.deleting {
		return nil, nil, nil, errSandboxNotFound(e.id)
	}
	if _, busy := e.execs[id]; busy {
		return nil, nil, nil, errExecIDInUse(id)
	}
	ctx, cancel := context.WithCancelCause(ctx)
	if e.execs == nil {
		e.execs = map[string]*running{}
	}
	r := &running{cancel: cancel, kill: make(chan struct{})}
	e.execs[id] = r
	return ctx, r.kill, func() {
		e.mu.Lock()
		delete(e.execs, id)
		e.mu.Unlock()
		cancel(nil)
	}, nil
}

// cancelExec stops the command with exec id id. A second call may
// escalate: kill after a graceful stop sends KILL at once.
func (e *entry) cancelExec(id string, kill bool) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	r, ok := e.execs[id]
	if !ok {
		return false
	}
	r.stop(kill)
	return true
}

func newID(prefix string) string { return prefix + rand.Text()[:16] }

func hasLabels(have, want map[string]string) bool {
	for k, v := range want {
		if hv, ok := have[k]; !ok || hv != v {
			return false
		}
	}
	return true
}

func cloneMap(m map[string]string) map[string]string {
	if m == nil {
		return nil
	}
	return maps.Clone(m)
}
