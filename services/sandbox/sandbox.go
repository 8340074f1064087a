// Package sandbox is the sandbox service: it keeps many sandboxes by id,
// each made by a driver (see package driver), and offers their file, exec
// and search operations over gRPC and the REST gateway.
package sandbox

import (
	"cmp"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	sandboxv1 "github.com/fabro-sh/fabro-go/gen/fabro/sandbox/v1"
	"github.com/fabro-sh/fabro-go/platform/grpcerr"
	"github.com/fabro-sh/fabro-go/sdk/sandbox/driver"
	"github.com/fabro-sh/fabro-go/sdk/sandbox/plugin"
	"github.com/fabro-sh/fabro-go/services/sandbox/driver/bwrap"
	"github.com/fabro-sh/fabro-go/services/sandbox/driver/daytona"
	"github.com/fabro-sh/fabro-go/services/sandbox/driver/docker"
	"github.com/fabro-sh/fabro-go/services/sandbox/driver/local"

	"github.com/fabro-sh/fabro-go/services/sandbox/internal/diskimage"
)

// Config configures the service.
type Config struct {
	// DataDir, when set, makes sandboxes durable: the registry of
	// sandboxes is kept in DataDir/sandbox (locked while the service
	// runs), managed local workspaces under DataDir/sandbox/workspaces and
	// docker ones under DataDir/sandbox/docker. At start the service
	// reopens every registered sandbox (re-adopting Docker containers by
	// their labels, keeping local directories) and removes what an
	// earlier run left that the registry does not name. Close then keeps
	// the sandboxes. Without DataDir sandboxes live in memory, their
	// workspaces in the system's temporary directory, and Close deletes
	// them.
	DataDir string
	// Drivers are the drivers sandboxes can be made with; default the
	// local and docker drivers.
	Drivers []driver.Driver
	// Plugins and PluginDir (see ReadPluginDir) name out-of-process
	// driver plugins, added to Drivers (plugins.go).
	Plugins   []PluginConfig
	PluginDir string
	// DefaultDriver is used when a spec names none; default "local".
	DefaultDriver string
	// DockerImage is the docker driver's default image (when Drivers is
	// not given); default docker.DefaultImage.
	DockerImage string
	// DaytonaCredentials resolves DAYTONA_API_URL and DAYTONA_API_KEY on
	// every call (the vault, under the sandbox service's identity). When
	// set, and Drivers is not given, the daytona driver is offered too.
	DaytonaCredentials daytona.Credentials
	// Security confines sandboxes to allowed roots (roots.go).
	Security Security
}

// Service is the sandbox service. It implements the gRPC SandboxService and
// the server runtime's Service interface.
type Service struct {
	sandboxv1.UnimplementedSandboxServiceServer

	logger        *slog.Logger
	drivers       map[string]driver.Driver
	defaultDriver string
	reg           *registry        // nil without DataDir
	plugins       []*plugin.Driver // killed on Close
	roots         rootPolicy
	security      Security // its disk default and maximum (diskLimit)
	tmpWorkspaces string   // the managed workspace root made without a data directory; removed on Close
	dataDir       string   // the data directory, "" without one

	mu        sync.Mutex
	sandboxes map[string]*entry
	order     []string // ids, oldest first
}

// entry is one sandbox and its running commands.
type entry struct {
	id      string
	driver  string
	spec    driver.Spec
	info    driver.Info // as created, kept in the registry
	created time.Time
	owner   string // auth.Owner of its creator; only it and admins reach it
	// removeDir is a managed workspace to remove after Delete, for a
	// sandbox reopened by a driver that cannot reopen (see reopen).
	removeDir string

	mu     sync.Mutex
	sb     driver.Sandbox // nil once failed
	failed string         // why the sandbox is FAILED
	gone   driver.Sandbox // the handle of a sandbox found gone, for Delete
	// retry: reopening failed for a passing reason (the engine was
	// down), so it is tried again on use, at most every reviveEvery.
	retry    bool
	lastTry  time.Time
	deleting bool
	paused   bool // by PauseSandbox (pause.go): no command starts
	execs    map[string]*running
	procs    procTable // StartProcess's (process.go)
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

// sweeper is a driver that can remove what an earlier run left behind
// (containers by their labels) that the registry does not name.
type sweeper interface {
	Sweep(ctx context.Context, keep func(id string) bool) ([]string, error)
}

// ephemeralOwner owns the containers of services without a data
// directory; they are told apart by the process that made them.
const ephemeralOwner = "fabro-sandbox:ephemeral"

// deadSweeper is a driver that can remove what crashed services without a
// registry left, by whether the process that made it is alive.
type deadSweeper interface {
	SweepDead(ctx context.Context) ([]string, error)
}

// sweepDead removes, without a registry, the sandboxes of dead services.
func (s *Service) sweepDead(ctx context.Context) {
	for _, name := range slices.Sorted(maps.Keys(s.drivers)) {
		sw, ok := s.drivers[name].(deadSweeper)
		if !ok {
			continue
		}
		removed, err := sw.SweepDead(ctx)
		if err != nil && !errors.Is(err, driver.ErrUnavailable) {
			s.logger.WarnContext(ctx, "sandboxes of dead services not swept", "driver", name, "error", err)
		}
		if len(removed) > 0 {
			s.logger.InfoContext(ctx, "sandboxes of dead services removed", "driver", name, "sandbox_ids", removed)
		}
	}
}

// startupTimeout bounds reopening the registry's sandboxes at start.
const startupTimeout = 2 * time.Minute

// New returns the service. With a data directory it reopens the sandboxes
// of the registry; otherwise it starts nothing.
func New(cfg Config, logger *slog.Logger) (*Service, error) {
	initMetrics()
	s := &Service{logger: logger, drivers: map[string]driver.Driver{}, sandboxes: map[string]*entry{}, defaultDriver: cfg.DefaultDriver}
	// Without a data directory the managed workspaces get a directory of
	// their own, so that what the policy exempts is only them, not every
	// path under the system's temporary directory.
	var workspaces string
	if cfg.DataDir != "" {
		workspaces = filepath.Join(cfg.DataDir, "sandbox", "workspaces")
	} else {
		dir, err := os.MkdirTemp("", "fabro-sandbox-workspaces-")
		if err != nil {
			return nil, fmt.Errorf("sandbox: workspace root: %w", err)
		}
		// Traversable, as the temporary directory was, by the user commands
		// run as; each workspace carries its own permissions.
		if err := os.Chmod(dir, 0o755); err != nil {
			return nil, fmt.Errorf("sandbox: workspace root: %w", err)
		}
		workspaces, s.tmpWorkspaces = dir, dir
	}
	s.roots = newRootPolicy(cfg, workspaces)
	s.dataDir = cfg.DataDir
	s.security = cfg.Security
	if err := harden(cfg.DataDir); err != nil {
		return nil, err
	}
	var recs []record
	if cfg.DataDir != "" {
		var err error
		if s.reg, recs, err = openRegistry(filepath.Join(cfg.DataDir, "sandbox")); err != nil {
			return nil, fmt.Errorf("sandbox: %w", err)
		}
	}
	if len(cfg.Drivers) == 0 {
		lc := local.Config{User: cfg.Security.User, WorkspaceRoot: workspaces, UIDs: cfg.Security.UIDs}
		dc := docker.Config{Image: cfg.DockerImage, Owner: ephemeralOwner, UIDs: cfg.Security.UIDs}
		if cfg.DataDir != "" {
			abs, _ := filepath.Abs(cfg.DataDir)
			lc.WorkspaceRoot = filepath.Join(cfg.DataDir, "sandbox", "workspaces")
			dc.WorkspaceRoot = filepath.Join(cfg.DataDir, "sandbox", "docker")
			dc.Owner = "fabro-sandbox:" + abs
		}
		cfg.Drivers = []driver.Driver{local.New(lc), docker.New(dc)}
		if cfg.DaytonaCredentials != nil {
			cfg.Drivers = append(cfg.Drivers, daytona.New(daytona.Config{Credentials: cfg.DaytonaCredentials}))
		}
	}
	pds, plugins, err := pluginDrivers(cfg, logger)
	if err != nil {
		s.reg.close()
		return nil, err
	}
	s.plugins = plugins
	cfg.Drivers = append(cfg.Drivers, pds...)
	for _, d := range cfg.Drivers {
		if _, dup := s.drivers[d.Name()]; dup {
			s.reg.close()
			return nil, fmt.Errorf("sandbox: driver %q given twice", d.Name())
		}
		s.drivers[d.Name()] = d
	}
	if s.defaultDriver == "" {
		s.defaultDriver = cfg.Drivers[0].Name()
		if _, ok := s.drivers[local.Name]; ok {
			s.defaultDriver = local.Name
		}
	}
	if _, ok := s.drivers[s.defaultDriver]; !ok {
		s.reg.close()
		return nil, fmt.Errorf("sandbox: the default driver %q is not configured", s.defaultDriver)
	}
	ctx, cancel := context.WithTimeout(context.Background(), startupTimeout)
	defer cancel()
	if ld, ok := s.drivers[local.Name].(*local.Driver); ok && ld.KilledAtStart() > 0 {
		s.logger.InfoContext(ctx, "commands of dead sandbox services killed", "driver", local.Name, "processes", ld.KilledAtStart())
	}
	if s.reg != nil {
		s.restore(ctx, recs, filepath.Join(cfg.DataDir, "sandbox", "workspaces"))
	} else {
		s.sweepDead(ctx)
	}
	return s, nil
}

// restore reopens the registry's sandboxes, then removes what no record
// names: local managed workspaces, and what sweeping drivers own.
func (s *Service) restore(ctx context.Context, recs []record, localRoot string) {
	known := map[string]bool{}
	dirs, bwrapDirs := map[string]bool{}, map[string]bool{}
	for _, rec := range recs {
		e := &entry{id: rec.ID, driver: rec.Driver, spec: rec.Spec, info: rec.Info, created: rec.Created, owner: rec.Owner}
		known[rec.ID] = true
		if rec.Driver == local.Name {
			dirs[rec.Info.RootDirectory] = true
		}
		if rec.Driver == bwrap.Name {
			bwrapDirs[rec.Info.RootDirectory] = true
		}
		sb, removeDir, err := s.reopen(ctx, rec)
		switch {
		case err != nil:
			e.failed = err.Error()
			e.retry, e.lastTry = !errors.Is(err, driver.ErrGone), time.Now()
			s.logger.WarnContext(ctx, "sandbox not reopened: FAILED", "sandbox_id", rec.ID, "driver", rec.Driver, "reason", e.failed)
		default:
			e.sb, e.removeDir = sb, removeDir
			s.logger.InfoContext(ctx, "sandbox reopened", "sandbox_id", rec.ID, "driver", rec.Driver)
		}
		s.sandboxes[e.id] = e
		s.order = append(s.order, e.id)
	}
	if ents, err := os.ReadDir(localRoot); err == nil {
		for _, de := range ents {
			p := filepath.Join(localRoot, de.Name())
			if img, ok := strings.CutSuffix(p, diskimage.Suffix); ok && strings.HasPrefix(de.Name(), "sandbox-") && !dirs[img] {
				// A disk image whose workspace is gone (or is removed next).
				diskimage.Detach(img)
				continue
			}
			if de.IsDir() && strings.HasPrefix(de.Name(), "sandbox-") && !dirs[p] {
				err := diskimage.Detach(p)
				if err == nil {
					err = os.RemoveAll(p)
				}
				if err != nil {
					s.logger.WarnContext(ctx, "orphaned workspace not removed", "workspace", p, "error", err)
				} else {
					s.logger.InfoContext(ctx, "orphaned workspace removed", "workspace", p)
				}
			}
		}
	}
	if _, ok := s.drivers[bwrap.Name]; ok && os.Geteuid() == 0 {
		s.sweepBwrap(ctx, instanceID(s.dataDir), bwrapDirs)
	}
	for _, name := range slices.Sorted(maps.Keys(s.drivers)) {
		sw, ok := s.drivers[name].(sweeper)
		if !ok {
			continue
		}
		removed, err := sw.Sweep(ctx, func(id string) bool { return known[id] })
		if err != nil {
			s.logger.WarnContext(ctx, "orphans of the driver not swept", "driver", name, "error", err)
		}
		if len(removed) > 0 {
			s.logger.InfoContext(ctx, "orphaned sandboxes removed", "driver", name, "sandbox_ids", removed)
		}
	}
}

// reopen finds a registered sandbox again. A driver that cannot reopen
// (local) is asked to create it on the workspace it had: a managed
// workspace is then removed by the service on delete (removeDir).
func (s *Service) reopen(ctx context.Context, rec record) (driver.Sandbox, string, error) {
	d, ok := s.drivers[rec.Driver]
	if !ok {
		return nil, "", fmt.Errorf("its driver %q is not configured any more", rec.Driver)
	}
	// The policy may have narrowed since the sandbox was made.
	if err := s.roots.checkCreated(rec.Spec.WorkingDirectory, rec.Info); err != nil {
		return nil, "", fmt.Errorf("its root is no longer allowed: %s", status.Convert(err).Message())
	}
	if hostDir, ok := rec.Spec.Options["host_dir"]; ok {
		if err := s.roots.checkHostDir(hostDir); err != nil {
			return nil, "", fmt.Errorf("its host directory is no longer allowed: %s", status.Convert(err).Message())
		}
	}
	if ro, ok := d.(driver.Reopener); ok {
		sb, err := ro.Reopen(ctx, rec.Spec, rec.Info)
		return sb, "", err
	}
	if rec.Driver != local.Name {
		return nil, "", fmt.Errorf("driver %q cannot reopen a sandbox after a restart", rec.Driver)
	}
	dir := rec.Info.RootDirectory
	if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
		return nil, "", fmt.Errorf("%w: its workspace %s is gone", driver.ErrGone, dir)
	}
	spec := rec.Spec
	spec.WorkingDirectory = dir
	sb, err := d.Create(ctx, spec)
	if err != nil {
		return nil, "", err
	}
	if rec.Info.ManagedWorkspace {
		return sb, dir, nil
	}
	return sb, "", nil
}

// persist writes the registry; s.mu is held.
func (s *Service) persist() error {
	if s.reg == nil {
		return nil
	}
	recs := make([]record, 0, len(s.order))
	for _, id := range s.order {
		e := s.sandboxes[id]
		recs = append(recs, e.record())
	}
	return s.reg.save(recs)
}

// Close ends the service. Without a data directory it deletes every
// sandbox, killing their commands and removing managed workspaces; with one
// the sandboxes stay for the next start, and only running commands are
// killed.
func (s *Service) Close(ctx context.Context) error {
	s.mu.Lock()
	ids := slices.Clone(s.order)
	durable := s.reg != nil
	s.mu.Unlock()
	var errs []error
	for _, id := range ids {
		if durable {
			if e, err := s.get(id); err == nil {
				e.mu.Lock()
				for _, r := range e.execs {
					r.stop(true)
				}
				e.procs.killAll() // processes do not outlive the service
				e.mu.Unlock()
			}
			continue
		}
		if _, err := s.deleteSandbox(ctx, id); err != nil {
			errs = append(errs, err)
		}
	}
	for _, p := range s.plugins {
		p.Close()
	}
	if s.tmpWorkspaces != "" {
		// Its sandboxes were deleted above: only what they left remains.
		os.RemoveAll(s.tmpWorkspaces)
	}
	if err := s.reg.close(); err != nil {
		errs = append(errs, err)
	}
	for _, d := range s.drivers {
		if c, ok := d.(interface{ Close() error }); ok {
			c.Close()
		}
	}
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

// get returns the sandbox id, whatever its state.
func (s *Service) get(id string) (*entry, error) {
	if id == "" {
		return nil, errNoSandboxID()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.sandboxes[id]
	if !ok {
		return nil, errSandboxNotFound(id)
	}
	return e, nil
}

// lookup returns the sandbox id for a file, exec or search call: a FAILED
// one is refused with the reason.
func (s *Service) lookup(ctx context.Context, id string) (*entry, driver.Sandbox, error) {
	e, err := s.owned(ctx, id)
	if err != nil {
		return nil, nil, err
	}
	s.revive(ctx, e)
	sb, err := e.use()
	if err != nil {
		return nil, nil, err
	}
	return e, sb, nil
}

// reviveEvery spaces the attempts to reopen a sandbox whose driver was
// unavailable at start.
var reviveEvery = 5 * time.Second

// revive reopens a sandbox that failed to reopen at start for a passing
// reason, such as the Docker engine not up yet.
func (s *Service) revive(ctx context.Context, e *entry) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.sb != nil || !e.retry || e.deleting || time.Since(e.lastTry) < reviveEvery {
		return
	}
	e.lastTry = time.Now()
	sb, removeDir, err := s.reopen(ctx, e.record())
	if err != nil {
		e.failed, e.retry = err.Error(), !errors.Is(err, driver.ErrGone)
		return
	}
	e.sb, e.removeDir, e.failed, e.retry = sb, removeDir, "", false
	s.logger.InfoContext(ctx, "sandbox reopened", "sandbox_id", e.id, "driver", e.driver)
}

// use returns the driver's sandbox, or the FAILED error.
func (e *entry) use() (driver.Sandbox, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.sb == nil {
		return nil, errSandboxFailed(e.id, e.failed, e.retry)
	}
	return e.sb, nil
}

// check asks a sandbox whose backing can vanish whether it is still there,
// and marks it FAILED when not. It returns the state message, "" if fine.
func (e *entry) check(ctx context.Context) string {
	e.mu.Lock()
	sb, failed := e.sb, e.failed
	e.mu.Unlock()
	if sb == nil {
		return failed
	}
	c, ok := sb.(driver.Checker)
	if !ok {
		return ""
	}
	err := c.Check(ctx)
	if err == nil || !errors.Is(err, driver.ErrGone) {
		return ""
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.sb != nil {
		e.failed = err.Error()
		e.sb = nil
		// Its commands cannot be running any more; the handle is kept
		// only to delete what is left.
		e.gone = sb
	}
	return e.failed
}

// callErr maps a failed call's error: when the sandbox's backing has
// vanished meanwhile, that is what the caller learns.
func (s *Service) callErr(ctx context.Context, e *entry, err error) error {
	if errors.Is(err, driver.ErrGone) || (!errors.Is(err, context.Canceled) && status.Code(s.toStatus(ctx, err)) == codes.Internal) {
		if msg := e.check(context.WithoutCancel(ctx)); msg != "" {
			// A driver that went away under this very call (a plugin that
			// exited) makes the call UNAVAILABLE; from now on the sandbox
			// is FAILED.
			if errors.Is(err, driver.ErrUnavailable) {
				return domain.New(codes.Unavailable, "DRIVER_UNAVAILABLE", err.Error(), grpcerr.Meta("sandbox_id", e.id))
			}
			return errSandboxFailed(e.id, msg, false)
		}
	}
	return s.toStatus(ctx, err)
}

func (s *Service) add(e *entry) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.sandboxes[e.id] = e
	s.order = append(s.order, e.id)
	if err := s.persist(); err != nil {
		delete(s.sandboxes, e.id)
		s.order = s.order[:len(s.order)-1]
		return err
	}
	return nil
}

func (s *Service) deleteSandbox(ctx context.Context, id string) (bool, error) {
	s.mu.Lock()
	e, ok := s.sandboxes[id]
	var perr error
	if ok {
		delete(s.sandboxes, id)
		s.order = slices.DeleteFunc(s.order, func(x string) bool { return x == id })
		perr = s.persist()
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
	e.procs.killAll()
	sb := cmp.Or(e.sb, e.gone)
	e.mu.Unlock()
	var errs []error
	if sb != nil {
		errs = append(errs, sb.Delete(ctx))
	} else if d, ok := s.drivers[e.driver]; ok {
		errs = append(errs, s.deleteFailed(ctx, d, e))
	}
	if e.removeDir != "" {
		err := diskimage.Detach(e.removeDir) // its image, or its nosuid mount
		if err == nil {
			err = os.RemoveAll(e.removeDir)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("remove workspace: %w", err))
		}
	}
	if err := errors.Join(append(errs, perr)...); err != nil {
		return true, err
	}
	s.logger.InfoContext(ctx, "sandbox deleted", "sandbox_id", id)
	return true, nil
}

// purger is a driver that can remove what is left of a sandbox it could
// not reopen (a container whose workspace vanished, or the reverse).
type purger interface {
	Purge(ctx context.Context, spec driver.Spec) error
}

// deleteFailed removes what is left of a sandbox that failed to reopen.
func (s *Service) deleteFailed(ctx context.Context, d driver.Driver, e *entry) error {
	if p, ok := d.(purger); ok {
		return p.Purge(ctx, e.spec)
	}
	return nil
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
	if e.paused {
		return nil, nil, nil, errSandboxPaused(e.id)
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
