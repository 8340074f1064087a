// Package bwrap is the bubblewrap sandbox driver, served as a plugin by
// cmd/fabro-sandbox-bwrap. Workspaces are the local driver's; every command
// runs in bwrap with new user, pid, ipc, uts and network namespaces, in a
// new session, dying with its parent, with no capabilities, as an
// unprivileged host uid of its sandbox's own (identity.go), never root.
// Its view of the filesystem is a minimal set of system directories
// read-only (/usr and its links, /etc with the shadow files masked), a
// private /proc (its sysctls read-only), /dev, a /tmp of a bounded size
// and /run, and the workspace read-write at its own path: the host's other
// directories (the service's data directory, other workspaces, /root and
// /home) are not there at all. A command allowed the network gets a
// user-mode stack that cannot reach the host's loopback (network.go). File
// and search operations act as the sandbox's uid (files.go).
//
// What it enforces is what its capabilities state: isolation namespace, the
// network limit, and the memory (swap included where the host accounts
// it), process and CPU limits for which the host gives it a writable
// cgroup v1 controller (probed at start): each command, bwrap and all,
// runs in a cgroup of its own. A spec asking for a limit not enforced is
// refused unless it allows best effort. At most Config.MaxExecs commands
// run at once; one more is refused up front with RESOURCE_EXHAUSTED.
package bwrap

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/fabro-sh/fabro-go/platform/grpcerr"
	"github.com/fabro-sh/fabro-go/sdk/sandbox/driver"
	"github.com/fabro-sh/fabro-go/services/sandbox/driver/local"

	"github.com/fabro-sh/fabro-go/services/sandbox/internal/diskimage"
)

// busyErr is the domain of the plugin's own refusals.
const busyErr grpcerr.Domain = "sandbox.fabro.dev"

// Name is the driver's name in a spec.
const Name = "bwrap"

// initPath is where the init (this binary) is mounted in the sandbox.
const initPath = "/run/fabro/init"

const (
	chunkSize  = 32 << 10
	drainGrace = 2 * time.Second
	// commandPath is the PATH commands get.
	commandPath = "/usr/local/bin:/usr/bin:/bin:/usr/local/sbin:/usr/sbin:/sbin"
)

// Config configures the driver.
type Config struct {
	// Bwrap is the bwrap binary; default "bwrap" in PATH, then /usr/bin.
	Bwrap string
	// Init is the binary run as the sandbox's init with [InitArg]; default
	// [InitName] beside this process's executable when it is there and
	// as trusted as the executable, else the executable itself.
	Init string
	// WorkspaceRoot is where managed workspaces are made; default the
	// system's temporary directory, or, as root, a directory of root's in
	// it (fabro-bwrap) that no other user can create names in.
	WorkspaceRoot string
	// Instance is the service instance the plugin serves ([InstanceEnv]):
	// a root plugin's default workspace root is then [InstanceRoot].
	Instance string
	// UIDBase and UIDCount are the host uids given to sandboxes when the
	// plugin runs as root; default [DefaultUIDBase], [DefaultUIDCount].
	UIDBase, UIDCount uint32
	// TmpBytes sizes each command's /tmp, a tmpfs; default
	// [DefaultTmpBytes].
	TmpBytes int64
	// MaxExecs is how many commands run at once in this plugin; one more
	// is refused up front with RESOURCE_EXHAUSTED. Default
	// [DefaultMaxExecs].
	MaxExecs int
	// Slirp4netns gives commands allowed the network a network namespace
	// of their own; default "slirp4netns" in the commands' PATH. Without it, network
	// allow is refused.
	Slirp4netns string
}

const (
	// DefaultTmpBytes is the size of a command's /tmp.
	DefaultTmpBytes = 256 << 20
	// DefaultMaxExecs bounds the commands running at once: each is a
	// bwrap, an init and bash, and on a small host a storm of them would
	// starve the plugin's own gRPC server (and its health check) of CPU.
	DefaultMaxExecs = 32
)

// Driver is the bwrap driver.
type Driver struct {
	cfg       Config
	local     *local.Driver
	cgroups   cgroups // probed once: the limits this host lets us enforce
	rg, grep  string  // the search programs, "" when missing
	execSlots chan struct{}
	// searchSlots bound the searches running at once (a quarter of
	// MaxExecs, at least 4), apart from commands, so that long commands
	// never hold searches up.
	searchSlots chan struct{}

	probeOnce sync.Once
	probeErr  error
	rootErr   error  // the default workspace root could not be made
	init      string // the init binary as sandboxes reach it (set by the probe)

	mu   sync.Mutex
	uids map[uint32]bool // the sandbox uids this process holds
}

var (
	_ driver.Driver   = (*Driver)(nil)
	_ driver.Reopener = (*Driver)(nil)
	_ driver.Checker  = (*sandbox)(nil)
)

// New returns the driver.
func New(cfg Config) *Driver {
	if cfg.Bwrap == "" {
		if p, err := exec.LookPath("bwrap"); err == nil {
			cfg.Bwrap = p
		} else {
			cfg.Bwrap = "/usr/bin/bwrap"
		}
	}
	if cfg.Init == "" {
		cfg.Init = defaultInit()
	}
	if cfg.Slirp4netns == "" {
		// The plugin's own PATH may be empty (the service passes none).
		cfg.Slirp4netns, _ = lookPath("slirp4netns")
	}
	if cfg.UIDCount == 0 {
		cfg.UIDBase, cfg.UIDCount = DefaultUIDBase, DefaultUIDCount
	}
	var rootErr error
	if cfg.WorkspaceRoot == "" && os.Geteuid() == 0 {
		cfg.WorkspaceRoot, rootErr = privateRoot(cfg.Instance)
	}
	cfg.TmpBytes = cmp.Or(cfg.TmpBytes, DefaultTmpBytes)
	cfg.MaxExecs = cmp.Or(cfg.MaxExecs, DefaultMaxExecs)
	d := &Driver{
		cfg: cfg, cgroups: probeCgroups(), uids: map[uint32]bool{},
		execSlots: make(chan struct{}, cfg.MaxExecs), searchSlots: make(chan struct{}, max(4, cfg.MaxExecs/4)),
		// The local driver only makes and removes workspaces and serves
		// their files; this driver decides who acts on them (identity.go),
		// so it keeps the local driver's own user switch off.
		local: local.New(local.Config{WorkspaceRoot: cfg.WorkspaceRoot, Environ: []string{"PATH=" + commandPath}, User: "root", Nosuid: true}),
	}
	d.rootErr = rootErr
	d.rg, _ = lookPath("rg")
	d.grep, _ = lookPath("grep")
	return d
}

// lookPath finds a program in the commands' PATH, which bwrap mounts.
func lookPath(name string) (string, error) {
	for dir := range strings.SplitSeq(commandPath, ":") {
		p := filepath.Join(dir, name)
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", exec.ErrNotFound
}

// Name implements driver.Driver.
func (d *Driver) Name() string { return Name }

// Capabilities implements driver.Driver.
func (d *Driver) Capabilities() driver.Capabilities {
	return driver.Capabilities{
		Isolation: driver.IsolationNamespace, LiveStreaming: true, StreamsSeparated: true, Stdin: true, Cancel: true, Commands: true,
		Processes: true, Terminals: true, Pause: freezerRoot() != "",
		Limits: d.limitSupport(),
	}
}

// limitSupport is what the cgroups enforce, and the disk limit where the
// plugin can make disk images (as root).
func (d *Driver) limitSupport() driver.LimitSupport {
	l := d.cgroups.support()
	l.Disk = diskimage.Supported() == nil
	return l
}

// Available implements driver.Driver: bwrap is installed and the kernel
// lets it make the namespaces (probed once).
func (d *Driver) Available(ctx context.Context) error {
	if runtime.GOOS != "linux" {
		return fmt.Errorf("%w: bwrap runs on linux only", driver.ErrUnavailable)
	}
	if err := d.local.Available(ctx); err != nil {
		return err
	}
	if d.rootErr != nil {
		return fmt.Errorf("%w: workspace root: %v", driver.ErrUnavailable, d.rootErr)
	}
	d.probeOnce.Do(func() {
		if _, err := os.Stat(d.cfg.Bwrap); err != nil {
			d.probeErr = fmt.Errorf("%w: bwrap not found (%v); install Debian's bubblewrap package", driver.ErrUnavailable, err)
			return
		}
		if d.cfg.Init == "" {
			d.probeErr = fmt.Errorf("%w: the sandbox init binary is unknown", driver.ErrUnavailable)
			return
		}
		// As a sandbox would run: an unprivileged uid making a user
		// namespace. A kernel refusing those is not worked around by
		// running commands as root.
		var probe ident
		if os.Geteuid() == 0 {
			probe.cred = &syscall.Credential{Uid: d.cfg.UIDBase, Gid: d.cfg.UIDBase, Groups: []uint32{}}
		}
		init, err := d.reachableInit(probe)
		if err != nil {
			d.probeErr = fmt.Errorf("%w: the sandbox init: %v", driver.ErrUnavailable, err)
			return
		}
		d.init = init
		cmd := exec.CommandContext(ctx, d.cfg.Bwrap, append(d.baseArgs(false, d.cfg.TmpBytes), "--", "/usr/bin/test", "-x", initPath)...)
		cmd.Env = hostEnv
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: probe.cred}
		if out, err := cmd.CombinedOutput(); err != nil {
			d.probeErr = fmt.Errorf("%w: bwrap cannot run as an unprivileged uid (does the kernel refuse unprivileged user namespaces? see the sysctls "+
				"user.max_user_namespaces and kernel.unprivileged_userns_clone; bwrap never runs commands as root): %v: %s", driver.ErrUnavailable, err, bytes.TrimSpace(out))
		}
	})
	return d.probeErr
}

// Create implements driver.Driver.
func (d *Driver) Create(ctx context.Context, spec driver.Spec) (driver.Sandbox, error) {
	if err := d.Available(ctx); err != nil {
		return nil, err
	}
	for k := range spec.Options {
		return nil, fmt.Errorf("%w: driver_options: the bwrap driver has no option %q", driver.ErrInvalid, k)
	}
	if err := d.checkLimits(spec.Limits); err != nil {
		return nil, err
	}
	if spec.Limits.Network == driver.NetworkAllow && d.cfg.Slirp4netns == "" {
		return nil, fmt.Errorf("%w: network allow needs slirp4netns (Debian's slirp4netns package): without it bwrap would share the host's network, loopback included",
			driver.ErrLimitUnsupported)
	}
	// The local driver makes the workspace, with its disk image.
	disk := driver.Limits{DiskBytes: spec.Limits.DiskBytes, BestEffort: spec.Limits.BestEffort}
	inner, err := d.local.Create(ctx, driver.Spec{ID: spec.ID, WorkingDirectory: spec.WorkingDirectory, Labels: spec.Labels, Limits: disk})
	if err != nil {
		return nil, err
	}
	return d.wrap(ctx, inner, spec, inner.Info().ManagedWorkspace, false)
}

// checkLimits refuses limits the host does not let the driver enforce,
// unless they are best effort.
func (d *Driver) checkLimits(l driver.Limits) error {
	if l.MemoryBytes < 0 || l.Processes < 0 || l.CPU < 0 || l.DiskBytes < 0 {
		return fmt.Errorf("%w: limits must not be negative", driver.ErrInvalid)
	}
	if err := diskimage.Supported(); l.DiskBytes > 0 && err != nil && !l.BestEffort {
		return fmt.Errorf("%w: bwrap cannot enforce the disk limit here: %v; ask for best effort to skip it", driver.ErrLimitUnsupported, err)
	}
	sup := d.cgroups.support()
	if !l.BestEffort {
		for _, c := range []struct {
			set, enforced bool
			name          string
		}{{l.MemoryBytes > 0, sup.Memory, "memory"}, {l.Processes > 0, sup.Processes, "processes"}, {l.CPU > 0, sup.CPU, "cpu"}} {
			if c.set && !c.enforced {
				return fmt.Errorf("%w: bwrap cannot enforce the %s limit on this host (no writable cgroup v1 %s controller); ask for best effort to skip it",
					driver.ErrLimitUnsupported, c.name, c.name)
			}
		}
	}
	return nil
}

// Reopen implements driver.Reopener: the workspace outlives the plugin
// process (a command does not), so a sandbox is re-adopted from the
// directory its info names, as long as that is still there.
func (d *Driver) Reopen(ctx context.Context, spec driver.Spec, info driver.Info) (driver.Sandbox, error) {
	if err := d.Available(ctx); err != nil {
		return nil, err
	}
	if err := d.checkLimits(spec.Limits); err != nil {
		return nil, err
	}
	if fi, err := os.Stat(info.RootDirectory); err != nil || !fi.IsDir() || !filepath.IsAbs(info.RootDirectory) {
		return nil, fmt.Errorf("%w: the workspace %s is gone", driver.ErrGone, info.RootDirectory)
	}
	if info.ManagedWorkspace && !diskimage.Has(info.RootDirectory) {
		// Its nosuid mount, gone if the host rebooted.
		if err := local.Nosuid(info.RootDirectory); err != nil {
			return nil, err
		}
	}
	disk := driver.Limits{DiskBytes: spec.Limits.DiskBytes, BestEffort: spec.Limits.BestEffort}
	inner, err := d.local.Create(ctx, driver.Spec{ID: spec.ID, WorkingDirectory: info.RootDirectory, Labels: spec.Labels, Limits: disk})
	if err != nil {
		return nil, fmt.Errorf("%w: reopen %s: %v", driver.ErrGone, info.RootDirectory, err)
	}
	return d.wrap(ctx, inner, spec, info.ManagedWorkspace, true)
}

// wrap makes a local sandbox a bwrap one. managed: the workspace is the
// driver's, removed on Delete; reopen: it was made by an earlier process.
func (d *Driver) wrap(ctx context.Context, inner driver.Sandbox, spec driver.Spec, managed, reopen bool) (driver.Sandbox, error) {
	l := spec.Limits
	info := inner.Info()
	info.Capabilities = d.Capabilities()
	info.ManagedWorkspace = managed
	if strings.HasPrefix(info.RootDirectory+"/", "/usr/") || strings.HasPrefix(info.RootDirectory+"/", "/etc/") || info.RootDirectory == "/" {
		inner.Delete(ctx)
		return nil, fmt.Errorf("%w: working_directory %s: a bwrap workspace cannot be a system directory", driver.ErrInvalid, info.RootDirectory)
	}
	id, claimed, err := d.identity(info.RootDirectory, managed, reopen)
	if err != nil {
		if !reopen {
			inner.Delete(ctx)
		}
		return nil, err
	}
	root, err := os.OpenRoot(info.RootDirectory)
	if err != nil {
		if claimed {
			d.releaseUID(id.cred.Uid)
		}
		inner.Delete(ctx)
		return nil, fmt.Errorf("open workspace: %w", err)
	}
	env := []string{"PATH=" + commandPath, "HOME=" + info.WorkingDirectory, "TMPDIR=/tmp", "LANG=C.UTF-8"}
	for k, v := range spec.Env {
		env = append(env, k+"="+v)
	}
	return &sandbox{Sandbox: inner, d: d, info: info, env: env, network: l.Network == driver.NetworkAllow, limits: l, managed: managed,
		id: id, claimed: claimed, root: root}, nil
}

// hostEnv is the whole environment of the host-side processes of an exec.
var hostEnv = []string{"PATH=/usr/bin:/bin"}

// envArgs are the bwrap options that give the command exactly base and
// then extra (a later value wins), and nothing of bwrap's own environment.
func envArgs(base []string, extra map[string]string) []string {
	a := []string{"--clearenv"}
	for _, kv := range base {
		k, v, _ := strings.Cut(kv, "=")
		a = append(a, "--setenv", k, v)
	}
	for _, k := range slices.Sorted(maps.Keys(extra)) {
		a = append(a, "--setenv", k, extra[k])
	}
	return a
}

// Args is the bwrap command line (bwrap itself aside) that runs argv in
// the sandbox of workspace ws, in dir: what Exec runs, with argv the init
// and bash; for a baseline and for debugging.
func (d *Driver) Args(ws, dir string, network bool, argv ...string) []string {
	return d.args(d.cfg.TmpBytes, ws, dir, network, argv...)
}

// args is Args with a /tmp of tmpBytes.
func (d *Driver) args(tmpBytes int64, ws, dir string, network bool, argv ...string) []string {
	return append(append(d.baseArgs(network, tmpBytes), "--bind", ws, ws, "--chdir", dir, "--"), argv...)
}

// baseArgs are bwrap's namespaces and mounts, workspace aside. The
// network namespace is always new: a command allowed the network is given
// one by slirp4netns (network.go), never the host's.
func (d *Driver) baseArgs(network bool, tmpBytes int64) []string {
	a := []string{
		"--die-with-parent", "--new-session", "--as-pid-1",
		"--unshare-user", "--disable-userns",
		"--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-net", "--unshare-cgroup-try", "--hostname", "fabro-sandbox",
		"--cap-drop", "ALL",
	}
	if network {
		a = append(a, "--info-fd", strconv.Itoa(infoFD))
	}
	a = append(a, hostMounts()...)
	return append(a, "--dev", "/dev", "--size", strconv.FormatInt(tmpBytes, 10), "--tmpfs", "/tmp", "--size", "1048576", "--tmpfs", "/run",
		"--ro-bind", d.init, initPath)
}

// hostMounts are the system directories and masks, probed on the host
// once (a dozen stats per exec otherwise): the host's layout does not
// change under a running plugin.
var hostMounts = sync.OnceValue(func() []string {
	a := []string{"--ro-bind", "/usr", "/usr"}
	for _, dir := range []string{"/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"} {
		fi, err := os.Lstat(dir)
		switch {
		case err != nil:
		case fi.Mode()&os.ModeSymlink != 0:
			if target, err := os.Readlink(dir); err == nil {
				a = append(a, "--symlink", target, dir)
			}
		case fi.IsDir():
			a = append(a, "--ro-bind", dir, dir)
		}
	}
	a = append(a, "--ro-bind", "/etc", "/etc")
	for _, f := range []string{"/etc/shadow", "/etc/gshadow", "/etc/shadow-", "/etc/gshadow-"} {
		if _, err := os.Stat(f); err == nil {
			a = append(a, "--ro-bind", "/dev/null", f)
		}
	}
	// /proc/sys read-only: a root without capabilities could otherwise
	// still write the host's sysctls.
	a = append(a, "--proc", "/proc", "--ro-bind", "/proc/sys", "/proc/sys")
	// The /proc files Docker masks too: a root without capabilities could
	// still reboot the host through sysrq-trigger, or read kernel memory
	// and keys.
	for _, f := range []string{"/proc/sysrq-trigger", "/proc/kcore", "/proc/keys", "/proc/timer_list"} {
		if _, err := os.Stat(f); err == nil {
			a = append(a, "--ro-bind", "/dev/null", f)
		}
	}
	return slices.Clip(a)
})

// sandbox is a local workspace whose commands run in bwrap.
type sandbox struct {
	driver.Sandbox // files and search: the local driver's
	d              *Driver
	info           driver.Info
	env            []string
	network        bool
	limits         driver.Limits // applied to each command, in a cgroup of its own
	managed        bool          // the workspace is removed on Delete
	id             ident         // who the commands and the file operations are
	claimed        bool          // id's uid is from the range, released on Delete
	root           *os.Root      // the workspace, for Grep's open
	releaseOnce    atomic.Bool
	procs          procSet // StartProcess's (process.go)
	frz            freezer // Pause's (pause.go)
}

// Info implements driver.Sandbox.
func (s *sandbox) Info() driver.Info { return s.info }

// Check implements driver.Checker: the workspace is still there.
func (s *sandbox) Check(context.Context) error {
	if fi, err := os.Stat(s.info.RootDirectory); err != nil || !fi.IsDir() {
		return fmt.Errorf("%w: the workspace %s is gone", driver.ErrGone, s.info.RootDirectory)
	}
	return nil
}

// Delete implements driver.Sandbox. A reopened managed workspace is the
// local driver's as a given directory, so it is removed here.
func (s *sandbox) Delete(ctx context.Context) error {
	s.endAll()
	if err := s.Sandbox.Delete(ctx); err != nil {
		return err
	}
	if s.managed && !s.Sandbox.Info().ManagedWorkspace {
		if err := diskimage.Detach(s.info.RootDirectory); err != nil {
			return err
		}
		if err := os.RemoveAll(s.info.RootDirectory); err != nil {
			return fmt.Errorf("remove workspace: %w", err)
		}
	}
	s.root.Close()
	s.frz.remove()
	if s.claimed && s.releaseOnce.CompareAndSwap(false, true) {
		s.d.releaseUID(s.id.cred.Uid)
	}
	return nil
}

// dir resolves an exec's working directory: confined like any path (the
// local sandbox's Stat says whether it escapes), then named at the same
// path inside bwrap, where the workspace is mounted where it is.
func (s *sandbox) dir(ctx context.Context, dir string) (string, error) {
	if dir == "" {
		return s.info.WorkingDirectory, nil
	}
	fi, err := s.Sandbox.Stat(ctx, dir)
	if err != nil {
		return "", err
	}
	if fi.Type != driver.TypeDirectory {
		return "", fmt.Errorf("%w: working_dir %s", driver.ErrNotDirectory, dir)
	}
	if path.IsAbs(dir) {
		return path.Clean(dir), nil
	}
	return path.Join(s.info.WorkingDirectory, dir), nil
}

// Exec implements driver.Execer.
func (s *sandbox) Exec(ctx context.Context, spec driver.ExecSpec, out driver.Output) (driver.ExecResult, error) {
	select {
	case s.d.execSlots <- struct{}{}:
		defer func() { <-s.d.execSlots }()
	default:
		return driver.ExecResult{}, busyErr.New(codes.ResourceExhausted, "BWRAP_EXEC_LIMIT",
			fmt.Sprintf("the bwrap plugin runs at most %d commands at once; try again when one ends", s.d.cfg.MaxExecs), grpcerr.RetryAfter(time.Second))
	}
	dir, err := s.dir(ctx, spec.Dir)
	if err != nil {
		return driver.ExecResult{}, err
	}
	var stdin io.Reader
	if len(spec.Stdin) > 0 {
		stdin = bytes.NewReader(spec.Stdin)
	}
	start := time.Now()
	l, err := s.launch(dir, spec.Command, spec.Env, stdin, nil)
	if err != nil {
		return driver.ExecResult{}, err
	}
	defer l.close()
	cmd, pipes := l.cmd, l.pipes

	var sinkMu sync.Mutex
	sinkOK := out != nil && out.Started() == nil
	stdout, stderr := driver.NewCapture(spec.RetainLimit), driver.NewCapture(spec.RetainLimit)
	var readers sync.WaitGroup
	read := func(r *os.File, c *driver.Capture, stream driver.Stream) {
		buf := make([]byte, chunkSize)
		for {
			n, err := r.Read(buf)
			if n > 0 {
				sinkMu.Lock()
				c.Write(buf[:n])
				if sinkOK {
					sinkOK = out.Chunk(stream, buf[:n]) == nil
				}
				sinkMu.Unlock()
			}
			if err != nil {
				return
			}
		}
	}
	readers.Go(func() { read(pipes.outR, stdout, driver.Stdout) })
	readers.Go(func() { read(pipes.errR, stderr, driver.Stderr) })
	statusCh := make(chan string, 1)
	go func() { statusCh <- l.readStatus() }()
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()

	ctl := func(b byte) { l.ctl(b) }
	term := driver.Exited
	stop := func(t driver.Termination) {
		term = t
		ctl('T')
		grace := time.NewTimer(driver.StopGrace)
		defer grace.Stop()
		select {
		case err := <-exited:
			exited <- err
		case <-grace.C:
			ctl('K')
		case <-spec.Kill:
			ctl('K')
			term = driver.Killed
		}
	}
	timer := time.NewTimer(spec.Timeout)
	defer timer.Stop()
	var werr error
	select {
	case werr = <-exited:
		exited <- werr
	case <-timer.C:
		stop(driver.TimedOut)
	case <-spec.Kill:
		term = driver.Killed
		ctl('K')
	case <-ctx.Done():
		if errors.Is(context.Cause(ctx), driver.ErrKill) {
			term = driver.Killed
			ctl('K')
		} else {
			stop(driver.Cancelled)
		}
	}
	// The init ends promptly once told; if it does not, bwrap is killed,
	// and the namespace with it.
	select {
	case werr = <-exited:
	case <-time.After(drainGrace):
		syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		werr = <-exited
	}
	drained := make(chan struct{})
	go func() { readers.Wait(); close(drained) }()
	select {
	case <-drained:
	case <-time.After(drainGrace):
		pipes.outR.SetReadDeadline(time.Now())
		pipes.errR.SetReadDeadline(time.Now())
		<-drained
	}
	st := <-statusCh
	res := driver.ExecResult{
		Termination: term, Duration: time.Since(start), StreamsSeparated: true,
		Stdout: stdout.Bytes(), Stderr: stderr.Bytes(), StdoutStats: stdout.Stats(), StderrStats: stderr.Stats(),
	}
	if l.group != nil {
		res.LimitHit = l.group.hit()
	}
	if res.LimitHit == driver.LimitNone && s.limits.DiskBytes > 0 && diskimage.Has(s.info.RootDirectory) && diskimage.Full(s.info.RootDirectory) {
		res.LimitHit = driver.LimitDisk
	}
	if err := l.result(st, werr, stderr.Bytes(), &res); err != nil {
		return driver.ExecResult{}, err
	}
	return res, nil
}

// pipes are an exec's stdout, stderr, control and status pipes.
type pipes struct {
	outR, outW, errR, errW, ctlR, ctlW, stR, stW *os.File
}

func newPipes() (*pipes, error) {
	p := &pipes{}
	for _, pair := range [][2]**os.File{{&p.outR, &p.outW}, {&p.errR, &p.errW}, {&p.ctlR, &p.ctlW}, {&p.stR, &p.stW}} {
		r, w, err := os.Pipe()
		if err != nil {
			p.close()
			return nil, err
		}
		*pair[0], *pair[1] = r, w
	}
	return p, nil
}

// closeChildEnds closes the ends the child holds, once it has them.
func (p *pipes) closeChildEnds() {
	for _, f := range []**os.File{&p.outW, &p.errW, &p.ctlR, &p.stW} {
		if *f != nil {
			(*f).Close()
			*f = nil
		}
	}
}

func (p *pipes) close() {
	for _, f := range []*os.File{p.outR, p.outW, p.errR, p.errW, p.ctlR, p.ctlW, p.stR, p.stW} {
		if f != nil {
			f.Close()
		}
	}
}
