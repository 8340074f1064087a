// Package driver defines what a sandbox driver is: a way of making sandboxes
// (local processes, a container, a remote VM, a plugin) that offer file, exec
// and search operations confined to a root. The sandbox service keeps
// sandboxes by id and calls drivers through these interfaces; the drivertest
// package checks that a driver keeps the contract.
//
// Paths given to a [Sandbox] are as the client sent them: absolute in the
// sandbox's view, or relative to its working directory, always with "/".
// The driver confines them to the root and reports an escape with
// [ErrPathEscapes], touching nothing.
package driver

import (
	"context"
	"errors"
	"io"
	"time"
)

// Isolation says how far a sandbox's commands are kept from the host.
type Isolation int

// Isolation levels. The values are those of the contract's enum.
const (
	IsolationNone      Isolation = 1 // the service's own host and user
	IsolationContainer Isolation = 2 // a container on a shared kernel
	IsolationVM        Isolation = 3 // a machine of its own
	IsolationNamespace Isolation = 4 // Linux namespaces on the host's kernel (bubblewrap)
)

// Capabilities are what a driver's sandboxes really do. They must be honest
// both ways: drivertest checks every capability stated, and the service
// refuses requests that need one not stated.
type Capabilities struct {
	Isolation Isolation
	// LiveStreaming: output reaches the caller while the command runs.
	LiveStreaming bool
	// StreamsSeparated: stdout and stderr are kept apart.
	StreamsSeparated bool
	// Stdin: a command can be given stdin bytes.
	Stdin bool
	// Cancel: a running command can be stopped.
	Cancel bool
	// Commands: commands really run, as `bash -c` with the given working
	// directory, environment and stdin. False only for a driver whose
	// results are scripted (the fake); drivertest then skips what needs a
	// real command. It is not part of the RPC contract.
	Commands bool
	// Processes: sandboxes implement [ProcessStarter] (long-lived
	// processes with interactive stdin).
	Processes bool
	// Terminals: ProcessSpec.Terminal is honoured (a pty).
	Terminals bool
	// Pause: sandboxes implement [Pauser] (freeze and thaw every process).
	Pause bool
	// Limits says which of [Limits] this driver enforces. A spec asking for
	// one it does not enforce is refused, unless the spec says BestEffort.
	Limits LimitSupport
}

// LimitSupport names the limits a driver really enforces.
type LimitSupport struct {
	Memory      bool
	Processes   bool
	CPU         bool
	NetworkNone bool // commands can be cut off from every network
	Disk        bool // Limits.DiskBytes bounds the managed workspace and /tmp
}

// Network is a sandbox's network policy.
type Network int

// Network policies.
const (
	NetworkDefault Network = iota // the driver's default, stated in its docs
	NetworkNone                   // no network at all, loopback aside
	NetworkAllow                  // the host's networks
)

// Limits bound what a sandbox's commands may use. A zero field sets no limit.
// Drivers with a container per sandbox apply them to the whole sandbox;
// drivers that run commands on the host apply them to each command.
type Limits struct {
	MemoryBytes int64   // memory, swap included where the host accounts it
	Processes   int     // processes and threads alive at once
	CPU         float64 // CPU time, in cores (0.5 is half of one core)
	// DiskBytes bounds the managed workspace and /tmp, each: a write past
	// it fails with ENOSPC.
	DiskBytes int64
	Network   Network
	// BestEffort: a limit the driver cannot enforce is skipped instead of
	// refused.
	BestEffort bool
}

// LimitHit names the limit a command ran into.
type LimitHit int

// Limits a command can run into.
const (
	LimitNone LimitHit = iota
	LimitMemory
	LimitProcesses
	LimitDisk
)

// Driver makes sandboxes of one kind.
type Driver interface {
	// Name is the name clients use in a spec, such as "local".
	Name() string
	// Capabilities are those of every sandbox this driver makes.
	Capabilities() Capabilities
	// Available returns nil when a sandbox can be created now, else an
	// error naming what is missing.
	Available(ctx context.Context) error
	// Create makes a sandbox and returns it ready. A sandbox that fails to
	// start is cleaned up before the error is returned.
	Create(ctx context.Context, spec Spec) (Sandbox, error)
}

// Reopener is implemented by drivers whose sandboxes outlive the service (a
// container, a directory, a remote sandbox). After a restart the service
// calls Reopen with the spec (ID set) and the Info that Create's sandbox
// reported, both kept in its durable registry. A sandbox whose backing is
// gone is an error wrapping [ErrGone] that says what vanished; the service
// then lists the sandbox as FAILED with that reason.
type Reopener interface {
	Reopen(ctx context.Context, spec Spec, info Info) (Sandbox, error)
}

// Checker is implemented by sandboxes whose backing can vanish behind the
// service's back (a container removed, a plugin that exited). Check returns
// nil while the sandbox is usable, else an error wrapping [ErrGone] that
// says why. The service checks before it reports a sandbox READY and when a
// call fails.
type Checker interface {
	Check(ctx context.Context) error
}

// Spec is what a sandbox is created from.
type Spec struct {
	// ID is the service's id for the sandbox, for labelling the driver's
	// own resources (container labels, remote metadata).
	ID string
	// WorkingDirectory: for the local driver an existing host directory to
	// use (kept on delete); empty means a managed one (removed on delete).
	WorkingDirectory string
	// Env is given to every command, over the allowlisted environment.
	Env map[string]string
	// Labels are copied to the driver's own resources where it has any.
	Labels map[string]string
	// Options are driver-specific; an unknown key is [ErrInvalid].
	Options map[string]string
	// Limits bound the resources of the sandbox's commands.
	Limits Limits
}

// Info describes a sandbox.
type Info struct {
	Capabilities     Capabilities
	Platform         string // "linux", "darwin", "windows" or "unknown"
	OSVersion        string
	WorkingDirectory string // absolute, in the sandbox's view
	RootDirectory    string // absolute; every file operation stays inside
	ManagedWorkspace bool   // the workspace is removed on Delete
}

// Sandbox is one sandbox. Every method may be called concurrently.
type Sandbox interface {
	Info() Info
	// Delete stops every command and removes what the sandbox created. It
	// is idempotent.
	Delete(ctx context.Context) error

	Files
	Execer
	Searcher
}

// FileType is the kind of a filesystem entry.
type FileType int

// File types.
const (
	TypeFile FileType = iota + 1
	TypeDirectory
	TypeSymlink
	TypeOther
)

// FileInfo describes one filesystem entry.
type FileInfo struct {
	Path    string // as requested (Stat) or relative to the listed directory
	Type    FileType
	Size    int64
	Mode    uint32 // permission bits
	ModTime time.Time
}

// Files are the file operations, all confined to the root.
type Files interface {
	// Open opens a regular file for reading from offset, and returns its
	// size when opened. A directory is [ErrIsDirectory].
	Open(ctx context.Context, path string, offset int64) (io.ReadCloser, int64, error)
	// WriteFile creates or atomically replaces a file, creating missing
	// parents. An existing file keeps its permission bits.
	WriteFile(ctx context.Context, path string, data []byte) (created bool, err error)
	// Remove removes a file, a link (not its target) or a directory; a
	// non-empty directory needs recursive ([ErrNotEmpty] otherwise).
	Remove(ctx context.Context, path string, recursive bool) error
	// Stat follows links that stay inside the root. A missing path is an
	// error wrapping [ErrNotFound].
	Stat(ctx context.Context, path string) (FileInfo, error)
	// ListDir lists entries down to depth (>= 1), sorted by path, links
	// not followed.
	ListDir(ctx context.Context, path string, depth int) ([]FileInfo, error)
	// Rename moves a path, creating the destination's parents.
	Rename(ctx context.Context, from, to string) error
	// Mkdir creates a directory and its parents; an existing one is
	// created false.
	Mkdir(ctx context.Context, path string) (created bool, err error)
}

// Stream names an output stream.
type Stream int

// Output streams.
const (
	Stdout Stream = iota + 1
	Stderr
)

// ExecSpec is one command. The service has already applied defaults and
// limits: Timeout and RetainLimit are positive.
type ExecSpec struct {
	Command     string            // Bash source, run as `bash -c`
	Dir         string            // a path like any other; "" is the working directory
	Env         map[string]string // over the sandbox's env
	Stdin       []byte
	Timeout     time.Duration
	RetainLimit int // bytes retained per stream, head plus tail
	// Kill, when closed, asks for KILL at once, even while a graceful
	// stop is under way (TERM sent, StopGrace not yet over): the result
	// then says Killed. A nil channel is never closed.
	Kill <-chan struct{}
}

// Output receives a running command's output. Chunks are delivered one at a
// time, in the order they were read; a slow Chunk slows the command's
// output down (back-pressure) but never loses it.
type Output interface {
	// Started is called once the command runs, before any chunk.
	Started() error
	// Chunk is one piece of output; data is only valid during the call.
	Chunk(s Stream, data []byte) error
}

// Termination says how a command ended.
type Termination int

// Terminations.
const (
	TerminationUnknown Termination = iota
	Exited
	TimedOut
	Cancelled
	Killed
)

// CaptureStats accounts for one output stream; see [Capture].
type CaptureStats struct {
	Observed, Retained, Omitted, Head int64
}

// ExecResult is how a command ended.
type ExecResult struct {
	Termination      Termination
	ExitCode         *int   // nil when ended by a signal
	Signal           string // such as "SIGKILL"
	Duration         time.Duration
	Stdout, Stderr   []byte
	StdoutStats      CaptureStats
	StderrStats      CaptureStats
	StreamsSeparated bool
	// LimitHit names the limit that ended or hampered the command, such
	// as the memory limit that got it killed.
	LimitHit LimitHit
}

// Execer runs commands.
type Execer interface {
	// Exec runs spec to its end. A command that fails, times out or is
	// stopped is a result, not an error; errors are for commands that
	// could not start (a bad Dir, no bash).
	//
	// Stopping: when ctx is cancelled the command is stopped with TERM to
	// its process group, 2 s, then KILL, and the result says Cancelled;
	// when the cancel cause (context.Cause) is [ErrKill], KILL is sent at
	// once and the result says Killed. A closed spec.Kill escalates any
	// stop (or none yet) to KILL at once. No descendant survives the
	// command.
	Exec(ctx context.Context, spec ExecSpec, out Output) (ExecResult, error)
}

// StopGrace is how long a stopped command has between TERM and KILL.
const StopGrace = 2 * time.Second

// GrepOptions is a grep.
type GrepOptions struct {
	Pattern         string // validated by the caller with [ValidatePattern]
	Path            string // "" means "."
	GlobFilter      string // validated with [ValidateGlobFilter]
	CaseInsensitive bool
	MaxResults      int // > 0
	// Backend forces a back end; zero means the best one present.
	Backend GrepBackend
}

// GrepBackend names the program a grep ran with.
type GrepBackend int

// Grep back ends.
const (
	BackendAuto GrepBackend = iota
	BackendRipgrep
	BackendPOSIX
)

// GrepMatch is one matching line.
type GrepMatch struct {
	Path          string
	Line          int64
	Text          string
	TextTruncated bool
}

// GrepResult holds matches sorted by path, then line.
type GrepResult struct {
	Matches   []GrepMatch
	Truncated bool
	Backend   GrepBackend
}

// WalkedFile is one regular file found by Walk.
type WalkedFile struct {
	Path string
	Size int64
}

// Searcher searches files.
type Searcher interface {
	Grep(ctx context.Context, opts GrepOptions) (GrepResult, error)
	// Glob returns the files below dir whose relative path matches pattern
	// (validated with [ValidateGlob]), sorted. A missing dir gives none.
	Glob(ctx context.Context, pattern, dir string) ([]string, error)
	// Walk lists regular files below dir down to maxDepth (0: no limit),
	// skipping directories named in exclude, sorted. A missing dir gives
	// none.
	Walk(ctx context.Context, dir string, maxDepth int, exclude []string) ([]WalkedFile, error)
}

// Errors a driver wraps so the service can pick a status code. Wrap them
// with context: fmt.Errorf("%w: %s", driver.ErrNotFound, path).
var (
	ErrNotFound       = errors.New("no such file or directory")
	ErrPathEscapes    = errors.New("path escapes the sandbox root")
	ErrInvalid        = errors.New("invalid argument")
	ErrInvalidPattern = errors.New("invalid pattern")
	ErrIsDirectory    = errors.New("is a directory")
	ErrNotDirectory   = errors.New("not a directory")
	ErrNotEmpty       = errors.New("directory not empty")
	ErrExists         = errors.New("already exists as a non-directory")
	ErrNotUTF8        = errors.New("not valid UTF-8")
	ErrBashMissing    = errors.New("bash is missing")
	ErrUnsupported    = errors.New("capability unsupported")
	ErrUnavailable    = errors.New("driver unavailable")
	// ErrImageMissing: what the sandbox is made from (a container image)
	// is not where the driver looks, and it fetches nothing by itself.
	ErrImageMissing = errors.New("image missing")
	// ErrGone: the sandbox's backing (container, directory, remote
	// sandbox, plugin process) no longer exists or has failed.
	ErrGone = errors.New("sandbox is gone")
	// ErrLimitUnsupported: the spec asks for a limit the driver cannot
	// enforce, and did not allow best effort.
	ErrLimitUnsupported = errors.New("limit not enforced by this driver")
	// ErrKill is the cancel cause that asks Exec to KILL at once.
	ErrKill = errors.New("killed")
)
