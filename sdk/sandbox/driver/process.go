package driver

import (
	"context"
	"io"
	"syscall"
)

// ProcessSpec is a long-lived process (the processes facet): it runs until
// it ends, is signalled, or its sandbox is deleted. Its stdin stays open.
type ProcessSpec struct {
	Command string            // Bash source, run as `bash -c`
	Dir     string            // a path like any other; "" is the working directory
	Env     map[string]string // over the sandbox's env
	// Terminal, when set, runs the process on a pty of this size
	// (Capabilities.Terminals): its stdin, stdout and stderr are the
	// terminal, all output arrives as Stdout, closing Stdin sends the
	// end-of-file character, and the Process is a [Resizer].
	Terminal *TerminalSize
}

// TerminalSize is a terminal's size in character cells.
type TerminalSize struct{ Rows, Cols int }

// Resizer is a Process on a terminal.
type Resizer interface {
	Resize(size TerminalSize) error
}

// Process is one started process. Every method may be called concurrently.
type Process interface {
	// Stdin is the process's stdin; closing it gives the process end of
	// file. Writes fail once the process has ended.
	Stdin() io.WriteCloser
	// Signal sends sig to the process's whole tree (its group, and for
	// SIGKILL every process it started, as Exec's stop does). It reports
	// false when the process has already ended.
	Signal(sig syscall.Signal) (bool, error)
	// Wait blocks until the process and all it started are gone and its
	// output has reached the Output, and says how it ended (Stdout and
	// Stderr empty: the output went to the Output). A process killed by
	// Signal(SIGKILL) ends Killed.
	Wait() ExecResult
}

// ProcessStarter is a sandbox with the processes facet (Capabilities.Processes).
type ProcessStarter interface {
	// StartProcess starts spec and returns once it runs. out.Started is
	// called before it returns; out.Chunk must not block for long (the
	// service appends to a bounded log), since it holds the process's
	// output back. ctx bounds the start only, not the process. Errors are
	// those of Exec for a process that could not start.
	StartProcess(ctx context.Context, spec ProcessSpec, out Output) (Process, error)
}
