package local

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
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

// searchTimeout bounds every search, as the agent tools expect.
const searchTimeout = 30 * time.Second

// grepTarget is how the search programs name what Grep opened: the open
// file or directory itself, passed as fd 3, so a link swapped after the
// check cannot send them elsewhere (they follow links named on their
// command line).
const grepTarget = "/proc/self/fd/3"

// Grep implements driver.Searcher with ripgrep when the host has it, else
// POSIX grep, run directly (no shell) on the file or directory opened
// inside the root.
func (s *sandbox) Grep(ctx context.Context, o driver.GrepOptions) (driver.GrepResult, error) {
	reqPath := o.Path
	if reqPath == "" {
		reqPath = "."
	}
	rel, err := s.resolve(reqPath)
	if err != nil {
		return driver.GrepResult{}, err
	}
	// Opened once, through the root: what was checked is what is
	// searched. O_NONBLOCK: a FIFO must not hang the open.
	f, err := s.root.OpenFile(rel, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return driver.GrepResult{}, fsErr(reqPath, err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return driver.GrepResult{}, fsErr(reqPath, err)
	}
	if !fi.IsDir() && !fi.Mode().IsRegular() {
		return driver.GrepResult{}, fmt.Errorf("%w: %s is neither a regular file nor a directory", driver.ErrInvalid, reqPath)
	}
	backend := o.Backend
	if backend == driver.BackendAuto {
		backend = driver.BackendPOSIX
		if s.rg != "" {
			backend = driver.BackendRipgrep
		}
	}
	glob := o.GlobFilter
	if !fi.IsDir() && glob != "" {
		// The tools disagree on filters for a file named outright, so
		// apply it here.
		if !driver.MatchName(glob, path.Base(filepath.ToSlash(rel))) {
			return driver.GrepResult{Backend: backend}, nil
		}
		glob = ""
	}
	var prog string
	var args []string
	env := []string{"LC_ALL=C", "PATH=" + s.d.path}
	switch backend {
	case driver.BackendRipgrep:
		if s.rg == "" {
			return driver.GrepResult{}, fmt.Errorf("%w: ripgrep is not installed", driver.ErrUnsupported)
		}
		// Hidden and ignored files too, as grep -r searches them; no
		// symlink following (no -L). --no-unicode matches by bytes, as
		// grep does with LC_ALL=C (see driver.ValidatePattern). JSON:
		// any file name (a newline in it) and binary files are told
		// apart reliably.
		prog, args = s.rg, []string{"--no-config", "--hidden", "--no-ignore", "--no-messages", "--json", "--no-unicode"}
		if o.CaseInsensitive {
			args = append(args, "-i")
		}
		if glob != "" {
			args = append(args, "--glob", glob)
		}
		args = append(args, "-e", grepout.RipgrepPattern(o.Pattern))
	case driver.BackendPOSIX:
		if s.grep == "" {
			return driver.GrepResult{}, fmt.Errorf("%w: neither ripgrep nor grep is installed", driver.ErrUnsupported)
		}
		// -r, not -R: symlinks below the path are not followed. -I skips
		// binary files as ripgrep does; -s hides unreadable files.
		prog, args = s.grep, []string{"-r", "-n", "-H", "-I", "-s", "--null", "-E"}
		if o.CaseInsensitive {
			args = append(args, "-i")
		}
		if glob != "" {
			args = append(args, "--include="+glob)
		}
		args = append(args, "-e", grepout.POSIXPattern(o.Pattern))
	default:
		return driver.GrepResult{}, fmt.Errorf("%w: unknown grep backend %d", driver.ErrInvalid, backend)
	}
	args = append(args, "--", grepTarget)

	ctx, cancel := context.WithTimeout(ctx, searchTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, prog, args...)
	cmd.Dir, cmd.Env = s.dir, env
	cmd.ExtraFiles = []*os.File{f}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	// The search walks below the opened directory by name while the
	// sandbox's commands run: it runs as their user, so a link they swap in
	// leads it nowhere they could not read themselves.
	s.user.apply(cmd)
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	pipe, err := cmd.StdoutPipe()
	if err != nil {
		return driver.GrepResult{}, err
	}
	noStrayDescriptors()
	if err := cmd.Start(); err != nil {
		return driver.GrepResult{}, fmt.Errorf("start %s: %w", prog, err)
	}
	res := driver.GrepResult{Backend: backend}
	name := func(printed []byte) string {
		if !fi.IsDir() {
			return reqPath
		}
		return path.Join(reqPath, relBelow(grepTarget, path.Clean(string(printed))))
	}
	br := bufio.NewReaderSize(pipe, 64<<10)
	var parseErr error
	if backend == driver.BackendRipgrep {
		res.Truncated, parseErr = grepout.ParseRipgrepJSON(br, name, o.MaxResults, &res.Matches)
	} else {
		res.Truncated, parseErr = grepout.ParseNull(br, name, o.MaxResults, &res.Matches)
	}
	if parseErr != nil {
		parseErr = fmt.Errorf("%s: %w", filepath.Base(prog), parseErr)
	}
	if res.Truncated || parseErr != nil {
		cancel() // enough: stop the search
	}
	io.Copy(io.Discard, pipe)
	werr := cmd.Wait()
	if ctx.Err() != nil && !res.Truncated && parseErr == nil {
		if errors.Is(ctx.Err(), context.DeadlineExceeded) && context.Cause(ctx) == context.DeadlineExceeded {
			return driver.GrepResult{}, fmt.Errorf("grep ran past %s: %w", searchTimeout, context.DeadlineExceeded)
		}
		return driver.GrepResult{}, ctx.Err()
	}
	if parseErr != nil {
		return driver.GrepResult{}, parseErr
	}
	var ee *exec.ExitError
	if werr != nil && !res.Truncated && errors.As(werr, &ee) && ee.ExitCode() == 2 && len(res.Matches) == 0 && stderr.Len() > 0 {
		// File errors are silenced (-s, --no-messages), so what is left
		// is the tool refusing the pattern or the filter.
		return driver.GrepResult{}, fmt.Errorf("%w: %s refused it: %s", driver.ErrInvalidPattern, filepath.Base(prog), grepout.Truncate(stderr.Bytes(), 500))
	}
	slices.SortFunc(res.Matches, func(a, b driver.GrepMatch) int {
		if c := strings.Compare(a.Path, b.Path); c != 0 {
			return c
		}
		return int(a.Line - b.Line)
	})
	return res, nil
}

// Glob implements driver.Searcher by walking the root.
func (s *sandbox) Glob(ctx context.Context, pattern, dir string) ([]string, error) {
	rel, err := s.resolve(dir)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, searchTimeout)
	defer cancel()
	// Without "**" no match lies deeper than the pattern's segments.
	maxDepth := 0
	if !slices.Contains(strings.Split(pattern, "/"), "**") {
		maxDepth = strings.Count(pattern, "/") + 1
	}
	var out []string
	err = s.walk(ctx, rel, maxDepth, nil, func(name string, _ fs.DirEntry) {
		if driver.MatchGlob(pattern, name) {
			out = append(out, name)
		}
	})
	if err != nil {
		return nil, err
	}
	slices.Sort(out)
	return out, nil
}

// Walk implements driver.Searcher.
func (s *sandbox) Walk(ctx context.Context, dir string, maxDepth int, exclude []string) ([]driver.WalkedFile, error) {
	rel, err := s.resolve(dir)
	if err != nil {
		return nil, err
	}
	fi, err := s.root.Lstat(rel)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil, nil
	case err != nil:
		return nil, fsErr(dir, err)
	case !fi.IsDir():
		return nil, fmt.Errorf("%w: %s (a symbolic link is not walked)", driver.ErrNotDirectory, dir)
	}
	ctx, cancel := context.WithTimeout(ctx, searchTimeout)
	defer cancel()
	var out []driver.WalkedFile
	err = s.walk(ctx, rel, maxDepth, exclude, func(name string, d fs.DirEntry) {
		if info, err := d.Info(); err == nil {
			out = append(out, driver.WalkedFile{Path: name, Size: info.Size()})
		}
	})
	if err != nil {
		return nil, err
	}
	slices.SortFunc(out, func(a, b driver.WalkedFile) int { return strings.Compare(a.Path, b.Path) })
	return out, nil
}

// walk calls fn for every regular file below rel with its path relative to
// rel, down to maxDepth (0: no limit), pruning directories named in exclude.
// A missing rel gives nothing.
func (s *sandbox) walk(ctx context.Context, rel string, maxDepth int, exclude []string, fn func(string, fs.DirEntry)) error {
	top := filepath.ToSlash(rel)
	err := fs.WalkDir(s.root.FS(), top, func(name string, d fs.DirEntry, err error) error {
		if err != nil {
			if name == top && errors.Is(err, fs.ErrNotExist) {
				return fs.SkipAll
			}
			if name == top {
				return err
			}
			return nil // unreadable below the top: skip it
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		if name == top {
			return nil
		}
		below := relBelow(top, name)
		depth := strings.Count(below, "/") + 1
		if d.IsDir() {
			if slices.Contains(exclude, d.Name()) || (maxDepth > 0 && depth >= maxDepth) {
				return fs.SkipDir
			}
			return nil
		}
		if d.Type().IsRegular() {
			fn(below, d)
		}
		return nil
	})
	if errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("search ran past %s: %w", searchTimeout, err)
	}
	if err != nil {
		return fsErr(top, err)
	}
	return nil
}
