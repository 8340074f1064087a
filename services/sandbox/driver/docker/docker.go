// Package docker is the driver that runs each sandbox in a container of its
// own on a Docker Engine, through the Engine API (github.com/docker/docker's
// client, API version negotiated, so 20.10's API 1.41 and current engines
// both work).
//
// The workspace is a host directory bind-mounted at the working directory
// (default /workspace): a managed one under Config.WorkspaceRoot (removed on
// delete), or the host directory given by the "host_dir" option (kept). File
// and search operations run on the host side of that mount through the local
// driver, so they keep its confinement (os.Root, no symbolic link out of the
// workspace is ever followed; links with absolute targets count as leaving
// it). Commands run in the container through the exec API, each under a small
// wrapper (wrapper.pl) that puts bash in its own process group, is a child
// subreaper, and kills the whole tree on stop and after bash exits.
//
// Containers are hardened by default: a non-root user, every capability
// dropped, no-new-privileges, a read-only root filesystem with a tmpfs /tmp,
// no network unless the spec allows it, the Docker socket never mounted.
// Memory, process, CPU and network limits are the container's own.
package docker

import (
	"cmp"
	"context"
	"crypto/rand"
	_ "embed"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/network"
	"github.com/docker/docker/client"

	"github.com/fabro-sh/fabro-go/sdk/sandbox/driver"
	"github.com/fabro-sh/fabro-go/services/sandbox/driver/local"
	"github.com/fabro-sh/fabro-go/services/sandbox/internal/hostnet"

	"github.com/fabro-sh/fabro-go/services/sandbox/internal/diskimage"
)

// Name is the driver's name in a spec.
const Name = "docker"

// DefaultImage is the image sandboxes run when neither the configuration nor
// the spec names one; `make sandbox-base` builds it offline.
const DefaultImage = "fabro/sandbox-base:dev"

// Labels on every container the driver makes.
const (
	LabelID    = "dev.fabro.sandbox.id"    // the sandbox id
	LabelOwner = "dev.fabro.sandbox.owner" // the service that owns it
	labelUser  = "dev.fabro.label."        // prefix of the spec's labels
	// LabelProcess names the process that made the container (host, pid,
	// start time), so that a later service can tell whether it is alive.
	LabelProcess = "dev.fabro.sandbox.process"
	// labelWorkspace names a managed workspace, removed with the container.
	labelWorkspace = "dev.fabro.sandbox.workspace"
)

// Options a spec may give.
const (
	OptionImage   = "image"    // an image on the engine, never pulled
	OptionHostDir = "host_dir" // an existing host directory to mount as the workspace (kept on delete)
)

const (
	defaultWorkdir = "/workspace"
	defaultUser    = "1000:1000"
	tmpfsOptions   = "rw,nosuid,nodev,size=1g"
	containerHome  = "/tmp"
	pidsDir        = "/tmp/.fabro-exec"
)

//go:embed wrapper.pl
var wrapperScript string

// Config configures the driver.
type Config struct {
	// Image is the default image; default DefaultImage. BuildHint says how
	// to build it, for the error when it is missing.
	Image     string
	BuildHint string
	// WorkspaceRoot holds managed workspaces; default os.TempDir().
	WorkspaceRoot string
	// Owner names the owning service in the containers' labels, so that
	// services sharing an engine leave each other's containers alone;
	// default "fabro".
	Owner string
	// User is the uid:gid commands run as; default 1000:1000, or the
	// service's own ids when it is not root. A host_dir not owned by root
	// is worked in as its owner instead.
	User string
	// UIDs, when set and the service runs as root, gives each managed
	// workspace a uid of its own from the range, which owns it (0700) and
	// runs its commands; User is then for host_dir sandboxes only.
	UIDs *local.UIDs
	// Client talks to the engine; default one from the environment
	// (DOCKER_HOST and friends) with API version negotiation.
	Client *client.Client
}

// Driver is the docker driver.
type Driver struct {
	cfg      Config
	cli      *client.Client
	cliErr   error
	uid, gid int
	files    *local.Driver
}

var _ driver.Driver = (*Driver)(nil)
var _ driver.Reopener = (*Driver)(nil)

// New returns the driver. It does not reach the engine: Available does.
func New(cfg Config) *Driver {
	cfg.Image = cmp.Or(cfg.Image, DefaultImage)
	cfg.BuildHint = cmp.Or(cfg.BuildHint, "build it with `make sandbox-base`")
	cfg.WorkspaceRoot = cmp.Or(cfg.WorkspaceRoot, os.TempDir())
	cfg.Owner = cmp.Or(cfg.Owner, "fabro")
	if cfg.User == "" {
		cfg.User = defaultUser
		if os.Geteuid() != 0 {
			cfg.User = fmt.Sprintf("%d:%d", os.Geteuid(), os.Getegid())
		}
	}
	d := &Driver{cfg: cfg, cli: cfg.Client, files: local.New(local.Config{NoCgroups: true, UIDs: cfg.UIDs})} // files and search only: no host command needs a cgroup
	if d.cli == nil {
		d.cli, d.cliErr = client.NewClientWithOpts(client.FromEnv, client.WithAPIVersionNegotiation())
	}
	u, g, _ := strings.Cut(cfg.User, ":")
	d.uid, _ = strconv.Atoi(u)
	d.gid, _ = strconv.Atoi(g)
	return d
}

// Name implements driver.Driver.
func (d *Driver) Name() string { return Name }

// Capabilities implements driver.Driver.
func (d *Driver) Capabilities() driver.Capabilities {
	return driver.Capabilities{
		Isolation: driver.IsolationContainer, LiveStreaming: true, StreamsSeparated: true, Stdin: true, Cancel: true, Commands: true, Processes: true,
		Limits: driver.LimitSupport{Memory: true, Processes: true, CPU: true, NetworkNone: true, Disk: d.diskSupported() == nil},
	}
}

// Available implements driver.Driver: the engine must answer.
func (d *Driver) Available(ctx context.Context) error {
	if d.cliErr != nil {
		return fmt.Errorf("%w: docker client: %v", driver.ErrUnavailable, d.cliErr)
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if _, err := d.cli.Ping(ctx); err != nil {
		return fmt.Errorf("%w: the Docker engine at %s does not answer: %v", driver.ErrUnavailable, d.cli.DaemonHost(), err)
	}
	return nil
}

// Close closes the engine client.
func (d *Driver) Close() error {
	if d.cli == nil {
		return nil
	}
	return d.cli.Close()
}

// plan is what a sandbox is made of, worked out from its spec alone, so
// that Reopen finds the same container and workspace as Create made.
type plan struct {
	id, name, image, workdir, hostDir string
	managed                           bool
	disk                              int64  // the managed workspace's disk image size; 0: none
	netAllow                          bool   // the bridge, with the host's addresses routed away (blockHost)
	user                              string // uid:gid of commands
	uid, gid                          int
}

// pooled reports whether managed workspaces get uids of the range.
func (d *Driver) pooled() bool { return d.cfg.UIDs != nil && os.Geteuid() == 0 }

// setUID makes uid (of the range) the workspace's owner and its
// commands' user, with a group of its own.
func (p *plan) setUID(uid int) {
	p.uid, p.gid = uid, uid
	p.user = fmt.Sprintf("%d:%d", uid, uid)
}

// diskSupported says why a disk limit cannot be enforced, or nil: the
// workspace's image is mounted on the service's host, which must be the
// engine's.
func (d *Driver) diskSupported() error {
	if err := diskimage.Supported(); err != nil {
		return err
	}
	if !strings.HasPrefix(d.cli.DaemonHost(), "unix://") {
		return errors.New("a disk limit needs the Docker engine on the service's own host (a unix socket)")
	}
	return nil
}

// planDisk decides the workspace's disk image. The rootfs is read-only
// and /tmp a tmpfs sized by the limit (tmpOptions), so the image and /tmp
// are all a command can fill.
func (d *Driver) planDisk(p *plan, l driver.Limits) error {
	switch {
	case l.DiskBytes < 0:
		return fmt.Errorf("%w: limits must not be negative", driver.ErrInvalid)
	case l.DiskBytes == 0:
		return nil
	case !p.managed:
		if !l.BestEffort {
			return fmt.Errorf("%w: a disk limit bounds managed workspaces only, not host_dir %s; mark the limits best-effort to bound /tmp alone", driver.ErrLimitUnsupported, p.hostDir)
		}
		return nil
	}
	if err := d.diskSupported(); err != nil {
		if !l.BestEffort {
			return fmt.Errorf("%w: the docker driver cannot enforce the disk limit here: %v", driver.ErrLimitUnsupported, err)
		}
		return nil
	}
	p.disk = l.DiskBytes
	return nil
}

// tmpOptions are /tmp's tmpfs options: sized by the disk limit when one
// is set.
func tmpOptions(l driver.Limits) string {
	if l.DiskBytes > 0 {
		return "rw,nosuid,nodev,size=" + strconv.FormatInt(l.DiskBytes, 10)
	}
	return tmpfsOptions
}

func (d *Driver) plan(spec driver.Spec) (plan, error) {
	p := plan{id: spec.ID, image: d.cfg.Image, workdir: defaultWorkdir, managed: true}
	for k, v := range spec.Options {
		switch k {
		case OptionImage:
			if v == "" {
				return p, fmt.Errorf("%w: driver_options: image is empty", driver.ErrInvalid)
			}
			p.image = v
		case OptionHostDir:
			if !filepath.IsAbs(v) {
				return p, fmt.Errorf("%w: driver_options: host_dir %q must be an absolute host path", driver.ErrInvalid, v)
			}
			if strings.ContainsAny(v, ":,") {
				// The engine's bind syntax splits on them.
				return p, fmt.Errorf("%w: driver_options: host_dir %q must not hold ':' or ','", driver.ErrInvalid, v)
			}
			p.hostDir, p.managed = filepath.Clean(v), false
		default:
			return p, fmt.Errorf("%w: driver_options: the docker driver has no option %q (it has image and host_dir)", driver.ErrInvalid, k)
		}
	}
	if wd := spec.WorkingDirectory; wd != "" {
		clean := path.Clean(wd)
		if !path.IsAbs(wd) || clean == "/" || clean == "/tmp" || strings.HasPrefix(clean, "/tmp/") ||
			clean == "/proc" || strings.HasPrefix(clean, "/proc/") || clean == "/sys" || strings.HasPrefix(clean, "/sys/") || clean == "/dev" || strings.HasPrefix(clean, "/dev/") {
			return p, fmt.Errorf("%w: working_directory %q must be an absolute path in the container, not /, /tmp, /proc, /sys or /dev", driver.ErrInvalid, wd)
		}
		if strings.ContainsAny(clean, ":,") {
			return p, fmt.Errorf("%w: working_directory %q must not hold ':' or ','", driver.ErrInvalid, wd)
		}
		p.workdir = clean
	}
	if p.id == "" {
		p.id = "anon-" + randHex(8)
	}
	for _, r := range p.id {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' || r == '.') {
			return p, fmt.Errorf("%w: sandbox id %q", driver.ErrInvalid, p.id)
		}
	}
	p.name = "fabro-" + p.id
	if err := d.planDisk(&p, spec.Limits); err != nil {
		return p, err
	}
	if p.netAllow = spec.Limits.Network == driver.NetworkAllow; p.netAllow && !spec.Limits.BestEffort {
		if err := d.canBlock(); err != nil {
			return p, fmt.Errorf("%w: network allow: %v; mark the limits best-effort to allow the network without it", driver.ErrLimitUnsupported, err)
		}
	}
	p.user, p.uid, p.gid = d.cfg.User, d.uid, d.gid
	if p.managed {
		p.hostDir = filepath.Join(d.cfg.WorkspaceRoot, "docker-"+p.id)
		// A workspace of the range keeps its uid across restarts: it is
		// the owner's.
		if fi, err := os.Stat(p.hostDir); err == nil && d.pooled() {
			if st, ok := fi.Sys().(*syscall.Stat_t); ok && d.cfg.UIDs.Contains(st.Uid) {
				p.setUID(int(st.Uid))
			}
		}
	} else if fi, err := os.Stat(p.hostDir); err == nil {
		// A designated directory's owner runs the commands, so that
		// they can change its files; never root.
		if st, ok := fi.Sys().(*syscall.Stat_t); ok && st.Uid != 0 {
			p.uid, p.gid = int(st.Uid), int(st.Gid)
			p.user = fmt.Sprintf("%d:%d", p.uid, p.gid)
		}
	}
	return p, nil
}

// Create implements driver.Driver.
func (d *Driver) Create(ctx context.Context, spec driver.Spec) (driver.Sandbox, error) {
	p, err := d.plan(spec)
	if err != nil {
		return nil, err
	}
	if err := d.Available(ctx); err != nil {
		return nil, err
	}
	if _, err := d.cli.ImageInspect(ctx, p.image); err != nil {
		if cerrdefs.IsNotFound(err) {
			return nil, fmt.Errorf("%w: image %s is not on the Docker engine; %s (no pull is tried)", driver.ErrImageMissing, p.image, d.cfg.BuildHint)
		}
		return nil, fmt.Errorf("inspect image %s: %w", p.image, err)
	}
	release := func() {}
	if p.managed {
		if d.pooled() {
			uid, err := d.cfg.UIDs.Take()
			if err != nil {
				return nil, fmt.Errorf("%w: %v", driver.ErrUnavailable, err)
			}
			p.setUID(int(uid))
			release = func() { d.cfg.UIDs.Release(uid) }
		}
		if err := os.MkdirAll(d.cfg.WorkspaceRoot, 0o755); err != nil {
			release()
			return nil, fmt.Errorf("create workspace root: %w", err)
		}
		if d.pooled() && filepath.Clean(d.cfg.WorkspaceRoot) != filepath.Clean(os.TempDir()) {
			os.Chmod(d.cfg.WorkspaceRoot, 0o711) // passed through, not listed
		}
		// Its commands' alone: 0700, even to the host's other users.
		if err := os.Mkdir(p.hostDir, 0o700); err != nil {
			release()
			return nil, fmt.Errorf("create workspace: %w", err)
		}
		// A filesystem of its own, mounted nosuid,nodev, bounds the
		// workspace's disk space.
		if p.disk > 0 {
			if err := diskimage.Attach(ctx, p.hostDir, p.disk); err != nil {
				diskimage.Detach(p.hostDir)
				os.Remove(p.hostDir)
				release()
				return nil, fmt.Errorf("%w: %v", driver.ErrUnavailable, err)
			}
		}
		if os.Geteuid() == 0 {
			os.Chown(p.hostDir, p.uid, p.gid)
		}
	} else if fi, err := os.Stat(p.hostDir); err != nil || !fi.IsDir() {
		return nil, fmt.Errorf("%w: host_dir %s is not a directory", driver.ErrNotFound, p.hostDir)
	}
	cleanup := func() {
		d.cli.ContainerRemove(context.WithoutCancel(ctx), p.name, container.RemoveOptions{Force: true, RemoveVolumes: true})
		if p.managed {
			removeAll(p.hostDir)
		}
		release()
	}
	key := hostnet.Key() // what blockHost routes away, for reblock
	if err := d.createContainer(ctx, p, spec); err != nil {
		cleanup()
		return nil, err
	}
	sb, err := d.open(ctx, p, spec)
	if err != nil {
		cleanup()
		return nil, err
	}
	sb.hostKey = key
	return sb, nil
}

func (d *Driver) createContainer(ctx context.Context, p plan, spec driver.Spec) error {
	labels := map[string]string{LabelID: p.id, LabelOwner: d.cfg.Owner, LabelProcess: processLabel(os.Getpid())}
	for k, v := range spec.Labels {
		labels[labelUser+k] = v
	}
	if p.managed {
		labels[labelWorkspace] = p.hostDir
	}
	env := []string{"HOME=" + containerHome, "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "LANG=C.UTF-8"}
	for k, v := range spec.Env {
		env = append(env, k+"="+v)
	}
	lim := spec.Limits
	hc := &container.HostConfig{
		Binds:          []string{p.hostDir + ":" + p.workdir + ":rw"},
		NetworkMode:    "none",
		CapDrop:        []string{"ALL"},
		SecurityOpt:    []string{"no-new-privileges"},
		ReadonlyRootfs: true,
		Tmpfs:          map[string]string{"/tmp": tmpOptions(lim)},
		Resources: container.Resources{
			Memory: lim.MemoryBytes, NanoCPUs: int64(lim.CPU * 1e9),
		},
	}
	if lim.MemoryBytes > 0 {
		hc.Resources.MemorySwap = lim.MemoryBytes // no swap on top
	}
	if lim.Processes > 0 {
		n := int64(lim.Processes)
		hc.Resources.PidsLimit = &n
	}
	if lim.Network == driver.NetworkAllow {
		hc.NetworkMode = "bridge"
	}
	cfg := &container.Config{
		Image: p.image, User: p.user, Env: env, Labels: labels, WorkingDir: p.workdir,
		Cmd: []string{"sleep", "infinity"}, Entrypoint: []string{},
	}
	if _, err := d.cli.ContainerCreate(ctx, cfg, hc, &network.NetworkingConfig{}, nil, p.name); err != nil {
		return fmt.Errorf("create container %s: %w", p.name, err)
	}
	if err := d.cli.ContainerStart(ctx, p.name, container.StartOptions{}); err != nil {
		return fmt.Errorf("start container %s: %w", p.name, err)
	}
	if lim.Network == driver.NetworkAllow {
		return d.blockHost(ctx, p.name)
	}
	return nil
}

// blockHost keeps a container allowed the network from the host's own
// addresses: the bridge forwards to them like to any other, so a service
// bound to 0.0.0.0 (or to docker0's address) would answer its commands.
// Each gets an unreachable route in the container's network namespace,
// which its commands, without capabilities, cannot remove; so does the
// rest of the bridge's network, the other sandboxes' containers. That takes
// root on the engine's own host; elsewhere it is not done (docs/SECURITY.md).
func (d *Driver) blockHost(ctx context.Context, name string) error {
	// A container just started may not show its init yet, and the engine
	// changes bridges for other containers meanwhile: a failed attempt is
	// tried again a few times before the sandbox is refused.
	var err error
	for attempt := range 4 {
		if err = d.blockHostOnce(ctx, name); err == nil || ctx.Err() != nil {
			break
		}
		select {
		case <-ctx.Done():
		case <-time.After(time.Duration(attempt+1) * 100 * time.Millisecond):
			continue
		}
		break
	}
	if err != nil {
		// Not our bug: the engine or the host's network; the sandbox is
		// refused rather than left reaching the host.
		return fmt.Errorf("%w: %v", driver.ErrUnavailable, err)
	}
	return nil
}

// canBlock says why blockHost cannot keep a container off the host's
// addresses here, or nil: it enters the container's network namespace
// through /proc, which takes root on the engine's own host.
func (d *Driver) canBlock() error {
	if os.Geteuid() != 0 {
		return errors.New("keeping a sandbox off the host's own addresses needs the service to run as root")
	}
	if !strings.HasPrefix(d.cli.DaemonHost(), "unix://") {
		return errors.New("keeping a sandbox off the host's own addresses needs the Docker engine on the service's own host (a unix socket)")
	}
	return nil
}

func (d *Driver) blockHostOnce(ctx context.Context, name string) error {
	if d.canBlock() != nil {
		return nil // best effort, refused in plan otherwise
	}
	ci, err := d.cli.ContainerInspect(ctx, name)
	if err != nil || ci.State == nil || ci.State.Pid <= 0 {
		return fmt.Errorf("the network namespace of container %s: %v", name, err)
	}
	netns, err := os.Open("/proc/" + strconv.Itoa(ci.State.Pid) + "/ns/net")
	if err != nil {
		return fmt.Errorf("the network namespace of container %s: %w", name, err)
	}
	defer netns.Close()
	// A pid of another host's (an engine in a VM behind the socket) could
	// name one of ours: never route away the host's own namespace.
	var own, theirs syscall.Stat_t
	if err := syscall.Stat("/proc/self/ns/net", &own); err != nil {
		return err
	}
	if err := syscall.Fstat(int(netns.Fd()), &theirs); err != nil {
		return err
	}
	if own.Ino == theirs.Ino && own.Dev == theirs.Dev {
		return fmt.Errorf("container %s shares the service's network namespace", name)
	}
	// The bridge's other containers are other sandboxes: none may reach
	// another's listening ports.
	var shared []*net.IPNet
	if ci.NetworkSettings != nil {
		for _, n := range ci.NetworkSettings.Networks {
			if ip := net.ParseIP(n.IPAddress); ip != nil && n.IPPrefixLen > 0 {
				shared = append(shared, &net.IPNet{IP: ip, Mask: net.CIDRMask(n.IPPrefixLen, 32)})
			}
		}
	}
	return hostnet.Block(netns, shared...)
}

// open makes the sandbox of a running container: the host-side file
// operations on its workspace, and a probe of the image.
func (d *Driver) open(ctx context.Context, p plan, spec driver.Spec) (*sandbox, error) {
	files, err := d.files.Create(ctx, driver.Spec{WorkingDirectory: p.hostDir})
	if err != nil {
		return nil, fmt.Errorf("open workspace %s: %w", p.hostDir, err)
	}
	root, err := os.OpenRoot(p.hostDir)
	if err != nil {
		files.Delete(ctx)
		return nil, fmt.Errorf("open workspace %s: %w", p.hostDir, err)
	}
	s := &sandbox{d: d, p: p, files: files, root: root}
	osVersion, arch, err := s.probe(ctx)
	if err != nil {
		s.closeFiles(ctx)
		return nil, err
	}
	s.arch = arch
	s.info = driver.Info{
		Capabilities: d.Capabilities(), Platform: "linux", OSVersion: osVersion,
		WorkingDirectory: p.workdir, RootDirectory: p.workdir, ManagedWorkspace: p.managed,
	}
	return s, nil
}

// Reopen implements driver.Reopener: the container of an earlier run is
// found by its name and labels, and started again if it stopped.
func (d *Driver) Reopen(ctx context.Context, spec driver.Spec, _ driver.Info) (driver.Sandbox, error) {
	p, err := d.plan(spec)
	if err != nil {
		return nil, err
	}
	if err := d.Available(ctx); err != nil {
		return nil, err
	}
	// After a reboot the workspace's image is mounted again before its
	// container starts on it.
	if p.disk > 0 && diskimage.Has(p.hostDir) {
		if err := diskimage.Attach(ctx, p.hostDir, p.disk); err != nil {
			return nil, fmt.Errorf("%w: %v", driver.ErrUnavailable, err)
		}
	}
	if err := d.check(ctx, p, true); err != nil {
		return nil, err
	}
	if d.cfg.UIDs.Contains(uint32(p.uid)) {
		d.cfg.UIDs.Hold(uint32(p.uid))
	}
	sb, err := d.open(ctx, p, spec)
	if err != nil {
		d.cfg.UIDs.Release(uint32(p.uid))
		return nil, err
	}
	// Commands the previous service started live on in a container that
	// kept running: nobody waits for them any more, and a re-adopted
	// sandbox starts with none. kill -1 reaches every process of the
	// commands' user but the container's init and the killer itself.
	if _, _, err := sb.run(ctx, []string{"bash", "-c", "kill -KILL -1 2>/dev/null; true"}); err != nil {
		sb.closeFiles(ctx)
		d.cfg.UIDs.Release(uint32(p.uid))
		return nil, fmt.Errorf("kill the commands of the previous service: %w", err)
	}
	return sb, nil
}

// check reports ErrGone when p's container or workspace is gone; start
// starts a stopped container instead of reporting it.
func (d *Driver) check(ctx context.Context, p plan, start bool) error {
	ci, err := d.cli.ContainerInspect(ctx, p.name)
	switch {
	case cerrdefs.IsNotFound(err):
		return fmt.Errorf("%w: its container %s was removed", driver.ErrGone, p.name)
	case err != nil:
		return fmt.Errorf("%w: the Docker engine: %v", driver.ErrUnavailable, err)
	case ci.Config == nil || ci.Config.Labels[LabelID] != p.id || ci.Config.Labels[LabelOwner] != d.cfg.Owner:
		return fmt.Errorf("%w: container %s is not this sandbox's (labels differ)", driver.ErrGone, p.name)
	}
	if fi, err := os.Stat(p.hostDir); err != nil || !fi.IsDir() {
		return fmt.Errorf("%w: its workspace %s is gone", driver.ErrGone, p.hostDir)
	}
	if ci.State != nil && !ci.State.Running {
		if !start {
			return fmt.Errorf("%w: its container %s is %s (exit code %d)", driver.ErrGone, p.name, ci.State.Status, ci.State.ExitCode)
		}
		if err := d.cli.ContainerStart(ctx, p.name, container.StartOptions{}); err != nil {
			return fmt.Errorf("%w: its container %s is %s and does not start: %v", driver.ErrGone, p.name, ci.State.Status, err)
		}
		// A new start is a new network namespace.
		if ci.HostConfig != nil && ci.HostConfig.NetworkMode == "bridge" {
			return d.blockHost(ctx, p.name)
		}
	}
	return nil
}

// Sweep removes the containers this driver's owner made whose sandbox id
// keep does not know, and the managed workspaces likewise: what a crashed
// service left behind. It returns the ids removed.
//
// With dead given, only containers whose process label it calls dead are
// considered, and workspaces are left alone (they may be a live service's).
func (d *Driver) Sweep(ctx context.Context, keep func(id string) bool, dead ...func(label string) bool) ([]string, error) {
	if err := d.Available(ctx); err != nil {
		return nil, err
	}
	list, err := d.cli.ContainerList(ctx, container.ListOptions{All: true, Filters: filters.NewArgs(filters.Arg("label", LabelOwner+"="+d.cfg.Owner))})
	if err != nil {
		return nil, fmt.Errorf("list containers: %w", err)
	}
	var removed []string
	var errs []error
	for _, c := range list {
		id := c.Labels[LabelID]
		if len(dead) > 0 {
			if !dead[0](c.Labels[LabelProcess]) {
				continue
			}
		} else if keep(id) {
			continue
		}
		if err := d.cli.ContainerRemove(ctx, c.ID, container.RemoveOptions{Force: true, RemoveVolumes: true}); err != nil && !cerrdefs.IsNotFound(err) {
			errs = append(errs, err)
			continue
		}
		if ws := c.Labels[labelWorkspace]; ws != "" && filepath.Dir(ws) == filepath.Clean(d.cfg.WorkspaceRoot) {
			removeAll(ws)
		}
		removed = append(removed, id)
	}
	var ents []os.DirEntry
	if len(dead) == 0 {
		ents, _ = os.ReadDir(d.cfg.WorkspaceRoot)
	}
	for _, e := range ents {
		id, ok := strings.CutPrefix(e.Name(), "docker-")
		if !ok || !e.IsDir() || keep(id) {
			continue
		}
		if err := removeAll(filepath.Join(d.cfg.WorkspaceRoot, e.Name())); err != nil {
			errs = append(errs, err)
		}
	}
	return removed, errors.Join(errs...)
}

// probe checks the image has what commands need and reads its OS version
// and machine.
func (s *sandbox) probe(ctx context.Context) (string, string, error) {
	out, code, err := s.run(ctx, []string{"bash", "-c", `command -v perl >/dev/null || { echo "no perl" >&2; exit 3; }; uname -m; . /etc/os-release 2>/dev/null; echo "${PRETTY_NAME:-unknown}"`})
	switch {
	case err != nil && strings.Contains(err.Error(), "executable file not found"):
		return "", "", fmt.Errorf("%w: image %s has no bash", driver.ErrBashMissing, s.p.image)
	case err != nil:
		return "", "", err
	case code == 3:
		return "", "", fmt.Errorf("%w: image %s has no perl, which the docker driver's command wrapper needs (Debian's perl-base)", driver.ErrImageMissing, s.p.image)
	case code != 0:
		return "", "", fmt.Errorf("probe image %s: exit %d", s.p.image, code)
	}
	arch, osVersion, _ := strings.Cut(strings.TrimSpace(out), "\n")
	return cmp.Or(strings.TrimSpace(osVersion), "unknown"), arch, nil
}

func randHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// removeAll removes dir, making directories a command left unwritable
// writable first when needed; links are removed, never followed.
func removeAll(dir string) error {
	if err := diskimage.Detach(dir); err != nil {
		return err
	}
	if err := os.RemoveAll(dir); err == nil || !errors.Is(err, fs.ErrPermission) {
		return err
	}
	filepath.WalkDir(dir, func(p string, e fs.DirEntry, err error) error {
		if err == nil && e.IsDir() {
			os.Chmod(p, 0o700)
		}
		return nil
	})
	return os.RemoveAll(dir)
}

// Purge removes what is left of the sandbox of spec: its container and its
// managed workspace, whichever still exist.
func (d *Driver) Purge(ctx context.Context, spec driver.Spec) error {
	p, err := d.plan(spec)
	if err != nil {
		return err
	}
	var errs []error
	if err := d.cli.ContainerRemove(ctx, p.name, container.RemoveOptions{Force: true, RemoveVolumes: true}); err != nil && !cerrdefs.IsNotFound(err) {
		errs = append(errs, fmt.Errorf("remove container %s: %w", p.name, err))
	}
	if p.managed {
		if err := removeAll(p.hostDir); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// processLabel names process pid of this host: host, pid and start time
// (in clock ticks since boot), which together are never reused.
func processLabel(pid int) string {
	host, _ := os.Hostname()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return ""
	}
	_, rest, ok := strings.Cut(string(b), ") ")
	if f := strings.Fields(rest); ok && len(f) > 19 {
		return fmt.Sprintf("%s:%d:%s", host, pid, f[19])
	}
	return ""
}

// SweepDead removes the containers of this driver's owner made by a
// process of this host that is no longer alive: what a crashed service
// without a registry left behind. It returns the sandbox ids removed.
func (d *Driver) SweepDead(ctx context.Context) ([]string, error) {
	host, _ := os.Hostname()
	return d.Sweep(ctx, func(id string) bool { return true }, func(label string) bool {
		parts := strings.Split(label, ":")
		if len(parts) != 3 || parts[0] != host {
			return false
		}
		pid, err := strconv.Atoi(parts[1])
		return err == nil && processLabel(pid) != label
	})
}
