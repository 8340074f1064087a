// Package local is the driver that runs sandboxes on the service's own host:
// a workspace directory confined with os.Root, commands run by bash in their
// own process group with an allowlisted environment (the service becomes
// a child subreaper so that no descendant outlives its command, see
// reap_linux.go), and search by ripgrep or POSIX grep. Its isolation is none: commands run as the service's user.
package local

import (
	"bufio"
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"

	"github.com/fabro-sh/fabro-go/sdk/sandbox/driver"
	"github.com/fabro-sh/fabro-go/services/sandbox/internal/diskimage"
)

// Name is the driver's name in a spec.
const Name = "local"

// DefaultAllowedEnv are the variables of the service's environment that
// commands get; nothing else passes, so the service's secrets never reach
// a command.
var DefaultAllowedEnv = []string{"PATH", "HOME", "USER", "LOGNAME", "SHELL", "LANG", "LC_ALL", "LC_CTYPE", "TERM", "TMPDIR", "TZ"}

const defaultPath = "/usr/local/bin:/usr/bin:/bin"

// Config configures the local driver.
type Config struct {
	// WorkspaceRoot is where managed workspaces are created; default
	// os.TempDir().
	WorkspaceRoot string
	// Environ is the service's environment, from which the allowlisted
	// variables are taken; default os.Environ().
	Environ []string
	// AllowedEnv replaces DefaultAllowedEnv when not nil.
	AllowedEnv []string
	// NoCgroups turns per-command cgroups off even where the host has
	// them (see cgroup_linux.go): no limits, and stopping relies on the
	// process-group kill and the sweep alone.
	NoCgroups bool
	// UIDs, when set and the service runs as root, gives each managed
	// workspace a uid of its own (see UIDs); a designated directory owned
	// by one of its uids (a workspace reopened after a restart) is worked
	// in as that uid. User is then for designated directories only.
	UIDs *UIDs
	// PrivateTmp gives each managed workspace a temporary directory of its
	// own (TmpDirName), its commands' TMPDIR. Off for drivers whose
	// commands have a /tmp of their own (bwrap, docker).
	PrivateTmp bool
	// Nosuid mounts each managed workspace without a disk image
	// nosuid,nodev when the service is root (see nosuid). The workspace
	// is then a mount point: whoever removes it unmounts it first
	// (diskimage.Detach; the driver's Delete and ClaimWorkspaceRoot do).
	Nosuid bool
	// User is who commands run as when the service runs as root (see
	// runas_linux.go): default DefaultUser when it exists, else "nobody";
	// "root" keeps root.
	User string
}

// Driver is the local driver.
type Driver struct {
	cfg  Config
	base []string // allowlisted KEY=value pairs
	path string   // the PATH commands (and the probes) use
	cg   *cgroupHost
}

var _ driver.Driver = (*Driver)(nil)

// New returns the local driver.
func New(cfg Config) *Driver {
	if cfg.Environ == nil {
		cfg.Environ = os.Environ()
	}
	allowed := cfg.AllowedEnv
	if allowed == nil {
		allowed = DefaultAllowedEnv
	}
	d := &Driver{cfg: cfg, cg: &cgroupHost{reason: "per-command cgroups are turned off (NoCgroups)"}}
	if !cfg.NoCgroups {
		d.cg = hostCgroups()
	}
	for _, kv := range cfg.Environ {
		k, v, _ := strings.Cut(kv, "=")
		for _, a := range allowed {
			if k == a {
				d.base = append(d.base, kv)
				if k == "PATH" {
					d.path = v
				}
			}
		}
	}
	if d.path == "" {
		d.path = defaultPath
		d.base = append(d.base, "PATH="+defaultPath)
	}
	return d
}

// Name implements driver.Driver.
func (d *Driver) Name() string { return Name }

// Capabilities implements driver.Driver. The limits are those the host's
// cgroups let the driver enforce on each command; network none it never
// enforces (commands share the service's network).
func (d *Driver) Capabilities() driver.Capabilities {
	l := d.cg.limits
	l.Disk = diskimage.Supported() == nil
	return driver.Capabilities{Isolation: driver.IsolationNone, LiveStreaming: true, StreamsSeparated: true, Stdin: true, Cancel: true, Commands: true, Processes: true, Terminals: true,
		Limits: l}
}

// CgroupStatus says whether commands run in cgroups of their own, and if
// not, why.
func (d *Driver) CgroupStatus() (bool, string) { return d.cg.enabled(), d.cg.reason }

// KilledAtStart is how many processes of dead service instances (commands
// a service killed with SIGKILL left running) the driver killed when it
// found the host's cgroups.
func (d *Driver) KilledAtStart() int { return d.cg.swept }

// checkLimits refuses a limit the driver cannot enforce, unless the spec
// allows best effort; what is kept is what will be enforced.
func (d *Driver) checkLimits(l driver.Limits) (driver.Limits, error) {
	sup := d.cg.limits
	var missing []string
	if l.MemoryBytes < 0 || l.Processes < 0 || l.CPU < 0 {
		return l, fmt.Errorf("%w: limits must not be negative", driver.ErrInvalid)
	}
	if l.MemoryBytes > 0 && !sup.Memory {
		missing, l.MemoryBytes = append(missing, "memory"), 0
	}
	if l.Processes > 0 && !sup.Processes {
		missing, l.Processes = append(missing, "processes"), 0
	}
	if l.CPU > 0 && !sup.CPU {
		missing, l.CPU = append(missing, "cpu"), 0
	}
	if l.Network == driver.NetworkNone {
		missing, l.Network = append(missing, "network none"), driver.NetworkDefault
	}
	diskWhy := ""
	if l.DiskBytes < 0 {
		return l, fmt.Errorf("%w: limits must not be negative", driver.ErrInvalid)
	}
	if err := diskimage.Supported(); l.DiskBytes > 0 && err != nil {
		missing, l.DiskBytes, diskWhy = append(missing, "disk"), 0, err.Error()
	}
	if len(missing) > 0 && !l.BestEffort {
		why := ""
		if r := strings.Join(slices.DeleteFunc([]string{d.cg.reason, diskWhy}, func(s string) bool { return s == "" }), "; "); r != "" {
			why = " (" + r + ")"
		}
		return l, fmt.Errorf("%w: the local driver cannot enforce %s here%s; mark the limits best-effort to run without", driver.ErrLimitUnsupported, strings.Join(missing, ", "), why)
	}
	return l, nil
}

// Available implements driver.Driver: the host needs bash (and Linux, for
// the way commands are reaped).
func (d *Driver) Available(context.Context) error {
	if runtime.GOOS != "linux" {
		return fmt.Errorf("%w: the local driver runs on linux only, not %s", driver.ErrUnavailable, runtime.GOOS)
	}
	_, err := d.lookPath("bash")
	return err
}

// lookPath finds a program in the commands' PATH, not the service's.
func (d *Driver) lookPath(name string) (string, error) {
	for dir := range strings.SplitSeq(d.path, ":") {
		if dir == "" || !filepath.IsAbs(dir) {
			continue
		}
		p := filepath.Join(dir, name)
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	if name == "bash" {
		return "", fmt.Errorf("%w: no executable bash in PATH=%s", driver.ErrBashMissing, d.path)
	}
	return "", fmt.Errorf("%s not found in PATH", name)
}

// Create implements driver.Driver.
func (d *Driver) Create(ctx context.Context, spec driver.Spec) (driver.Sandbox, error) {
	for k := range spec.Options {
		return nil, fmt.Errorf("%w: driver_options: the local driver has no option %q", driver.ErrInvalid, k)
	}
	if runtime.GOOS != "linux" {
		return nil, d.Available(ctx)
	}
	bash, err := d.lookPath("bash")
	if err != nil {
		return nil, err
	}
	limits, err := d.checkLimits(spec.Limits)
	if err != nil {
		return nil, err
	}
	// Orphaned descendants of commands come to the service, so that
	// those which left their command's group can still be killed.
	enableSubreaper()
	dir, managed := spec.WorkingDirectory, false
	if dir == "" {
		base := cmp.Or(d.cfg.WorkspaceRoot, os.TempDir())
		if err := os.MkdirAll(base, 0o755); err != nil {
			return nil, fmt.Errorf("create workspace root: %w", err)
		}
		if dir, err = os.MkdirTemp(base, workspacePrefix); err != nil {
			return nil, fmt.Errorf("create workspace: %w", err)
		}
		managed = true
		// A filesystem of its own, mounted nosuid,nodev, bounds the
		// workspace's disk space.
		if limits.DiskBytes > 0 {
			if err := diskimage.Attach(ctx, dir, limits.DiskBytes); err != nil {
				diskimage.Detach(dir)
				os.Remove(dir)
				return nil, fmt.Errorf("%w: %v", driver.ErrUnavailable, err)
			}
		} else if err := d.nosuid(dir); err != nil {
			os.Remove(dir)
			return nil, err
		}
	} else if !filepath.IsAbs(dir) {
		return nil, fmt.Errorf("%w: working_directory %q must be an absolute host path", driver.ErrInvalid, dir)
	} else if limits.DiskBytes > 0 {
		// Reopened after a restart: the managed workspace's image, mounted
		// again if the host rebooted. A directory of the caller's cannot be
		// bounded.
		if !diskimage.Has(dir) {
			if !limits.BestEffort {
				return nil, fmt.Errorf("%w: a disk limit bounds managed workspaces only, not the given directory %s; leave working_directory empty or mark the limits best-effort", driver.ErrLimitUnsupported, dir)
			}
			limits.DiskBytes = 0
		} else if err := diskimage.Attach(ctx, dir, limits.DiskBytes); err != nil {
			return nil, fmt.Errorf("%w: %v", driver.ErrUnavailable, err)
		}
	}
	// The canonical path, so absolute paths the sandbox reports are the
	// ones clients can send back.
	canon, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return nil, fmt.Errorf("%w: working_directory %s", driver.ErrNotFound, dir)
	}
	if fi, err := os.Stat(canon); err != nil || !fi.IsDir() {
		return nil, fmt.Errorf("%w: working_directory %s", driver.ErrNotDirectory, dir)
	}
	root, err := os.OpenRoot(canon)
	if err != nil {
		return nil, fmt.Errorf("open workspace: %w", err)
	}
	// Temporary files left by a writer killed mid-write (this service's
	// previous incarnation) go before anyone sees the workspace.
	sweepTemps(root)
	user, err := d.commandUser(root, canon, managed)
	if err != nil {
		root.Close()
		if managed {
			removeAll(canon)
		}
		return nil, err
	}
	tmp, err := d.privateTmp(root, canon, managed, user)
	if err != nil {
		root.Close()
		if managed {
			removeAll(canon)
		}
		return nil, err
	}
	s := &sandbox{
		d: d, root: root, dir: canon, bash: bash, managed: managed, limits: limits, user: user, disk: limits.DiskBytes > 0,
		env: append(append(append(append([]string(nil), d.base...), user.env()...), tmp...), envList(spec.Env)...),
	}
	// Probed once per sandbox: which search programs the host has.
	s.rg, _ = d.lookPath("rg")
	s.grep, _ = d.lookPath("grep")
	s.info = driver.Info{
		Capabilities: d.Capabilities(), Platform: runtime.GOOS, OSVersion: osVersion(),
		WorkingDirectory: canon, RootDirectory: canon, ManagedWorkspace: managed,
	}
	return s, nil
}

// nosuid mounts a new managed workspace without a disk image nosuid,nodev
// (its image is mounted so already), when the service is root: whoever
// commands run as (root, with User "root"; a sandbox uid; a bwrap
// sandbox's uid), a setuid binary or device node planted in the
// workspace grants no host user anything. A service that is not root
// needs none: what its commands plant is its own user's.
func (d *Driver) nosuid(dir string) error {
	if !d.cfg.Nosuid {
		return nil
	}
	return Nosuid(dir)
}

// Nosuid mounts a managed workspace nosuid,nodev (when the service is
// root), or again when it is reopened after a reboot; see nosuid.
func Nosuid(dir string) error {
	if os.Geteuid() != 0 {
		return nil
	}
	if err := diskimage.Nosuid(dir); err != nil {
		diskimage.Detach(dir)
		return fmt.Errorf("%w: %v", driver.ErrUnavailable, err)
	}
	return nil
}

// TmpDirName is the managed workspace's own temporary directory, the
// commands' TMPDIR: what they write there is the workspace's, counted by
// its disk limit and removed with it, where the host's /tmp would take
// whatever a command (mktemp, sort, a compiler, go build) put there,
// unbounded and left after the sandbox. /tmp itself is still the host's:
// the local driver isolates nothing, and a command naming /tmp writes it.
const TmpDirName = ".fabro-tmp"

// privateTmp makes a managed workspace's TmpDirName (with
// Config.PrivateTmp) and returns the TMPDIR naming it; a workspace that
// has one (reopened after a restart) uses it.
func (d *Driver) privateTmp(root *os.Root, dir string, managed bool, user runAs) ([]string, error) {
	if !d.cfg.PrivateTmp {
		return nil, nil
	}
	if managed {
		if err := root.Mkdir(TmpDirName, 0o700); err != nil && !errors.Is(err, os.ErrExist) {
			return nil, fmt.Errorf("%w: the workspace's temporary directory: %v", driver.ErrUnavailable, err)
		}
		if err := user.adopt(root, TmpDirName); err != nil {
			return nil, fmt.Errorf("%w: the workspace's temporary directory: %v", driver.ErrUnavailable, err)
		}
	}
	if fi, err := root.Lstat(TmpDirName); err != nil || !fi.IsDir() {
		return nil, nil
	}
	return []string{"TMPDIR=" + filepath.Join(dir, TmpDirName)}, nil
}

func envList(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for k, v := range m {
		out = append(out, k+"="+v)
	}
	return out
}

func osVersion() string {
	f, err := os.Open("/etc/os-release")
	if err != nil {
		return "unknown"
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "PRETTY_NAME="); ok {
			return strings.Trim(v, `"`)
		}
	}
	return "unknown"
}

// sandbox is one local sandbox: the workspace is both root and working
// directory.
type sandbox struct {
	d        *Driver
	root     *os.Root
	dir      string // canonical host path of the workspace
	bash     string
	rg, grep string
	env      []string
	managed  bool
	disk     bool          // the workspace is a disk image's filesystem (diskimage)
	limits   driver.Limits // those enforced, on each command
	user     runAs         // who commands run as
	info     driver.Info

	mu      sync.Mutex
	running map[*exec.Cmd]struct{}
	deleted bool
}

// Info implements driver.Sandbox.
func (s *sandbox) Info() driver.Info { return s.info }

// Delete implements driver.Sandbox. Commands are killed by the service
// first (their contexts); any still registered here are killed too.
func (s *sandbox) Delete(ctx context.Context) error {
	s.mu.Lock()
	if s.deleted {
		s.mu.Unlock()
		return nil
	}
	s.deleted = true
	for c := range s.running {
		killGroup(c.Process.Pid)
	}
	s.mu.Unlock()
	s.root.Close()
	if s.disk && !s.managed {
		// Reopened: the service removes the directory, once unmounted.
		if err := diskimage.Detach(s.dir); err != nil {
			return err
		}
	}
	if s.managed {
		if err := removeAll(s.dir); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("remove workspace: %w", err)
		}
	}
	s.user.release(s.d.cfg.UIDs)
	return nil
}
