package bwrap

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/fabro-sh/fabro-go/sdk/sandbox/driver"
	"github.com/fabro-sh/fabro-go/services/sandbox/internal/grepout"
)

// The file and search operations never act with more privilege than the
// sandbox's commands. Files, Glob and Walk are the local driver's (confined
// by os.Root, which resolves every path one component at a time below the
// workspace, so a link swapped in mid-walk cannot lead out), run with the
// thread's filesystem identity the sandbox's (ident.as): what a command
// cannot read they cannot read, and what they create is the sandbox's.
// Grep runs the search program inside a bwrap sandbox of its own, as the
// sandbox's uid, where nothing but the workspace and the system's
// read-only directories exists to be reached.

// Open implements driver.Files.
func (s *sandbox) Open(ctx context.Context, p string, offset int64) (rc io.ReadCloser, size int64, err error) {
	err = s.id.as(func() error { rc, size, err = s.Sandbox.Open(ctx, p, offset); return err })
	return rc, size, err
}

// WriteFile implements driver.Files.
func (s *sandbox) WriteFile(ctx context.Context, p string, data []byte) (created bool, err error) {
	err = s.id.as(func() error { created, err = s.Sandbox.WriteFile(ctx, p, data); return err })
	return created, err
}

// Remove implements driver.Files.
func (s *sandbox) Remove(ctx context.Context, p string, recursive bool) error {
	return s.id.as(func() error { return s.Sandbox.Remove(ctx, p, recursive) })
}

// Stat implements driver.Files.
func (s *sandbox) Stat(ctx context.Context, p string) (fi driver.FileInfo, err error) {
	err = s.id.as(func() error { fi, err = s.Sandbox.Stat(ctx, p); return err })
	return fi, err
}

// ListDir implements driver.Files.
func (s *sandbox) ListDir(ctx context.Context, p string, depth int) (out []driver.FileInfo, err error) {
	err = s.id.as(func() error { out, err = s.Sandbox.ListDir(ctx, p, depth); return err })
	return out, err
}

// Rename implements driver.Files.
func (s *sandbox) Rename(ctx context.Context, from, to string) error {
	return s.id.as(func() error { return s.Sandbox.Rename(ctx, from, to) })
}

// Mkdir implements driver.Files.
func (s *sandbox) Mkdir(ctx context.Context, p string) (created bool, err error) {
	err = s.id.as(func() error { created, err = s.Sandbox.Mkdir(ctx, p); return err })
	return created, err
}

// Glob implements driver.Searcher.
func (s *sandbox) Glob(ctx context.Context, pattern, dir string) (out []string, err error) {
	err = s.id.as(func() error { out, err = s.Sandbox.Glob(ctx, pattern, dir); return err })
	return out, err
}

// Walk implements driver.Searcher.
func (s *sandbox) Walk(ctx context.Context, dir string, maxDepth int, exclude []string) (out []driver.WalkedFile, err error) {
	err = s.id.as(func() error { out, err = s.Sandbox.Walk(ctx, dir, maxDepth, exclude); return err })
	return out, err
}

const (
	searchTimeout = 30 * time.Second
	// grepTarget is what the search program is told to search: the file
	// or directory Grep opened (as the sandbox's uid, through the root),
	// passed through bwrap as fd 3.
	grepTarget = "/proc/self/fd/3"
)

// rel turns a client path into one relative to the workspace, lexically,
// as the local driver does (links are then confined by the root).
func (s *sandbox) rel(p string) (string, error) {
	if strings.ContainsRune(p, 0) {
		return "", fmt.Errorf("%w: path contains NUL", driver.ErrInvalid)
	}
	r := filepath.FromSlash(cmp.Or(p, "."))
	if filepath.IsAbs(r) {
		var err error
		if r, err = filepath.Rel(s.info.RootDirectory, r); err != nil {
			return "", fmt.Errorf("%w: %s", driver.ErrPathEscapes, p)
		}
	}
	if r = filepath.Clean(r); r != "." && !filepath.IsLocal(r) {
		return "", fmt.Errorf("%w: %s", driver.ErrPathEscapes, p)
	}
	return r, nil
}

// Grep implements driver.Searcher: ripgrep when the host has it, else
// POSIX grep, run in a sandbox of their own on the file or directory
// opened inside the workspace.
func (s *sandbox) Grep(ctx context.Context, o driver.GrepOptions) (driver.GrepResult, error) {
	reqPath := cmp.Or(o.Path, ".")
	rel, err := s.rel(reqPath)
	if err != nil {
		return driver.GrepResult{}, err
	}
	var f *os.File
	err = s.id.as(func() error {
		// The local sandbox's Stat maps errors (escapes, not found) the
		// way every file operation does.
		if _, err := s.Sandbox.Stat(ctx, reqPath); err != nil {
			return err
		}
		f, err = s.root.OpenFile(rel, os.O_RDONLY|syscall.O_NONBLOCK, 0)
		if err != nil {
			return fmt.Errorf("open %s: %w", reqPath, err)
		}
		return nil
	})
	if err != nil {
		return driver.GrepResult{}, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return driver.GrepResult{}, err
	}
	if !fi.IsDir() && !fi.Mode().IsRegular() {
		return driver.GrepResult{}, fmt.Errorf("%w: %s is neither a regular file nor a directory", driver.ErrInvalid, reqPath)
	}
	backend := o.Backend
	if backend == driver.BackendAuto {
		backend = driver.BackendPOSIX
		if s.d.rg != "" {
			backend = driver.BackendRipgrep
		}
	}
	glob := o.GlobFilter
	if !fi.IsDir() && glob != "" {
		// The tools disagree on filters for a file named outright.
		if !driver.MatchName(glob, path.Base(filepath.ToSlash(rel))) {
			return driver.GrepResult{Backend: backend}, nil
		}
		glob = ""
	}
	prog, args, err := s.d.searchArgs(backend, o, glob)
	if err != nil {
		return driver.GrepResult{}, err
	}
	ctx, cancel := context.WithTimeout(ctx, searchTimeout)
	defer cancel()
	// A search is a bwrap too: at most searchSlots run at once, the
	// others wait (a search is short) rather than being refused.
	select {
	case s.d.searchSlots <- struct{}{}:
		defer func() { <-s.d.searchSlots }()
	case <-ctx.Done():
		return driver.GrepResult{}, fmt.Errorf("grep waited for a free slot: %w", ctx.Err())
	}
	ws := s.info.RootDirectory
	bargs := append(envArgs([]string{"LC_ALL=C", "PATH=" + commandPath}, nil), s.d.Args(ws, ws, false, prog)...)
	cmd := exec.CommandContext(ctx, s.d.cfg.Bwrap, append(bargs, append(args, "--", grepTarget)...)...)
	cmd.Env = hostEnv
	cmd.ExtraFiles = []*os.File{f}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL, Credential: s.id.cred}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	pipe, err := cmd.StdoutPipe()
	if err != nil {
		return driver.GrepResult{}, err
	}
	if err := cmd.Start(); err != nil {
		return driver.GrepResult{}, fmt.Errorf("start bwrap for %s: %w", prog, err)
	}
	res := driver.GrepResult{Backend: backend}
	name := func(printed []byte) string {
		if !fi.IsDir() {
			return reqPath
		}
		return path.Join(reqPath, strings.TrimPrefix(path.Clean(string(printed)), grepTarget+"/"))
	}
	br := bufio.NewReaderSize(pipe, 64<<10)
	var parseErr error
	if backend == driver.BackendRipgrep {
		res.Truncated, parseErr = grepout.ParseRipgrepJSON(br, name, o.MaxResults, &res.Matches)
	} else {
		res.Truncated, parseErr = grepout.ParseNull(br, name, o.MaxResults, &res.Matches)
	}
	if res.Truncated || parseErr != nil {
		cancel()
	}
	io.Copy(io.Discard, pipe)
	werr := cmd.Wait()
	switch {
	case ctx.Err() != nil && !res.Truncated && parseErr == nil:
		if context.Cause(ctx) == context.DeadlineExceeded {
			return driver.GrepResult{}, fmt.Errorf("grep ran past %s: %w", searchTimeout, context.DeadlineExceeded)
		}
		return driver.GrepResult{}, ctx.Err()
	case parseErr != nil:
		return driver.GrepResult{}, fmt.Errorf("%s: %w", path.Base(prog), parseErr)
	}
	var ee *exec.ExitError
	if werr != nil && !res.Truncated && errors.As(werr, &ee) && ee.ExitCode() != 1 && len(res.Matches) == 0 && stderr.Len() > 0 {
		if ee.ExitCode() == 2 && !bytes.HasPrefix(stderr.Bytes(), []byte("bwrap:")) {
			// File errors are silenced, so what is left is the tool
			// refusing the pattern or the filter.
			return driver.GrepResult{}, fmt.Errorf("%w: %s refused it: %s", driver.ErrInvalidPattern, path.Base(prog), grepout.Truncate(stderr.Bytes(), 500))
		}
		return driver.GrepResult{}, fmt.Errorf("grep in bwrap: %v: %s", werr, grepout.Truncate(stderr.Bytes(), 500))
	}
	slices.SortFunc(res.Matches, func(a, b driver.GrepMatch) int {
		if c := strings.Compare(a.Path, b.Path); c != 0 {
			return c
		}
		return int(a.Line - b.Line)
	})
	return res, nil
}

// searchArgs are the search program and its options, the target aside:
// hidden and ignored files searched, links below the target never
// followed, bytes matched as bytes (see driver.ValidatePattern).
func (d *Driver) searchArgs(backend driver.GrepBackend, o driver.GrepOptions, glob string) (string, []string, error) {
	var args []string
	switch backend {
	case driver.BackendRipgrep:
		if d.rg == "" {
			return "", nil, fmt.Errorf("%w: ripgrep is not installed", driver.ErrUnsupported)
		}
		args = []string{"--no-config", "--hidden", "--no-ignore", "--no-messages", "--json", "--no-unicode"}
		if o.CaseInsensitive {
			args = append(args, "-i")
		}
		if glob != "" {
			args = append(args, "--glob", glob)
		}
		return d.rg, append(args, "-e", grepout.RipgrepPattern(o.Pattern)), nil
	case driver.BackendPOSIX:
		if d.grep == "" {
			return "", nil, fmt.Errorf("%w: neither ripgrep nor grep is installed", driver.ErrUnsupported)
		}
		args = []string{"-r", "-n", "-H", "-I", "-s", "--null", "-E"}
		if o.CaseInsensitive {
			args = append(args, "-i")
		}
		if glob != "" {
			args = append(args, "--include="+glob)
		}
		return d.grep, append(args, "-e", grepout.POSIXPattern(o.Pattern)), nil
	}
	return "", nil, fmt.Errorf("%w: unknown grep backend %d", driver.ErrInvalid, backend)
}
