package docker

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"strings"
	"sync"
	"syscall"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"

	"github.com/fabro-sh/fabro-go/sdk/sandbox/driver"

	"github.com/fabro-sh/fabro-go/services/sandbox/internal/hostnet"
)

// sandbox is one container. Paths are in the container's view; the
// workspace's are turned into paths relative to it and handed to files, the
// local driver's sandbox on the host side of the bind mount.
type sandbox struct {
	d     *Driver
	p     plan
	files driver.Sandbox
	root  *os.Root // the host workspace, for giving new entries to the container user
	info  driver.Info
	arch  string // uname -m, for the wrapper's syscall numbers

	mu      sync.Mutex
	deleted bool
	hostKey string // the host's addresses when blockHost last ran (hostnet.Key)
}

// reblock routes the host's addresses away again when the host has
// gained one since they were last routed away (or since a reopen, whose
// restarted container has a new namespace), before a command runs.
func (s *sandbox) reblock(ctx context.Context) error {
	if !s.p.netAllow || s.d.canBlock() != nil {
		return nil
	}
	key := hostnet.Key()
	s.mu.Lock()
	same := key == s.hostKey
	s.mu.Unlock()
	if same {
		return nil
	}
	if err := s.d.blockHost(ctx, s.p.name); err != nil {
		return err
	}
	s.mu.Lock()
	s.hostKey = key
	s.mu.Unlock()
	return nil
}

var _ driver.Checker = (*sandbox)(nil)

// Info implements driver.Sandbox.
func (s *sandbox) Info() driver.Info { return s.info }

// Check implements driver.Checker.
func (s *sandbox) Check(ctx context.Context) error { return s.d.check(ctx, s.p, false) }

// Delete implements driver.Sandbox: the container goes with every process
// in it, then a managed workspace.
func (s *sandbox) Delete(ctx context.Context) error {
	s.mu.Lock()
	if s.deleted {
		s.mu.Unlock()
		return nil
	}
	s.deleted = true
	s.mu.Unlock()
	err := s.d.cli.ContainerRemove(ctx, s.p.name, container.RemoveOptions{Force: true, RemoveVolumes: true})
	if err != nil && !cerrdefs.IsNotFound(err) {
		return fmt.Errorf("remove container %s: %w", s.p.name, err)
	}
	s.closeFiles(ctx)
	if s.p.managed {
		if err := removeAll(s.p.hostDir); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("remove workspace: %w", err)
		}
	}
	s.d.cfg.UIDs.Release(uint32(s.p.uid))
	return nil
}

// closeFiles releases the host-side handles; the local sandbox was given
// the workspace as a designated directory, so it removes nothing.
func (s *sandbox) closeFiles(ctx context.Context) {
	s.files.Delete(ctx)
	s.root.Close()
}

// rel turns a client path into one relative to the workspace. Absolute
// paths must lie in it, lexically; relative ones are the local driver's to
// confine.
func (s *sandbox) rel(p string) (string, error) {
	if strings.ContainsRune(p, 0) {
		return "", fmt.Errorf("%w: path contains NUL", driver.ErrInvalid)
	}
	if !strings.HasPrefix(p, "/") {
		if p == "" {
			return ".", nil
		}
		return p, nil
	}
	c := path.Clean(p)
	if c == s.p.workdir {
		return ".", nil
	}
	if r, ok := strings.CutPrefix(c, s.p.workdir+"/"); ok {
		return r, nil
	}
	return "", fmt.Errorf("%w: %s", driver.ErrPathEscapes, p)
}

// own gives rel and its parents inside the workspace to the container's
// user, when the service (root) made them: commands must be able to change
// what the file operations wrote.
func (s *sandbox) own(rel string) {
	if os.Geteuid() != 0 || s.p.uid == 0 {
		return
	}
	parts := strings.Split(path.Clean(rel), "/")
	for i := range parts {
		p := strings.Join(parts[:i+1], "/")
		fi, err := s.root.Lstat(p)
		if err != nil {
			return
		}
		if st, ok := fi.Sys().(*syscall.Stat_t); ok && int(st.Uid) == os.Geteuid() && int(st.Uid) != s.p.uid {
			s.root.Lchown(p, s.p.uid, s.p.gid)
		}
	}
}

// Open implements driver.Files.
func (s *sandbox) Open(ctx context.Context, p string, offset int64) (io.ReadCloser, int64, error) {
	r, err := s.rel(p)
	if err != nil {
		return nil, 0, err
	}
	return s.files.Open(ctx, r, offset)
}

// WriteFile implements driver.Files.
func (s *sandbox) WriteFile(ctx context.Context, p string, data []byte) (bool, error) {
	r, err := s.rel(p)
	if err != nil {
		return false, err
	}
	created, err := s.files.WriteFile(ctx, r, data)
	if err == nil {
		s.own(r)
	}
	return created, err
}

// Remove implements driver.Files.
func (s *sandbox) Remove(ctx context.Context, p string, recursive bool) error {
	r, err := s.rel(p)
	if err != nil {
		return err
	}
	return s.files.Remove(ctx, r, recursive)
}

// Stat implements driver.Files.
func (s *sandbox) Stat(ctx context.Context, p string) (driver.FileInfo, error) {
	r, err := s.rel(p)
	if err != nil {
		return driver.FileInfo{}, err
	}
	fi, err := s.files.Stat(ctx, r)
	fi.Path = p
	return fi, err
}

// ListDir implements driver.Files.
func (s *sandbox) ListDir(ctx context.Context, p string, depth int) ([]driver.FileInfo, error) {
	r, err := s.rel(p)
	if err != nil {
		return nil, err
	}
	return s.files.ListDir(ctx, r, depth)
}

// Rename implements driver.Files.
func (s *sandbox) Rename(ctx context.Context, from, to string) error {
	rf, err := s.rel(from)
	if err != nil {
		return err
	}
	rt, err := s.rel(to)
	if err != nil {
		return err
	}
	if err := s.files.Rename(ctx, rf, rt); err != nil {
		return err
	}
	s.own(path.Dir(rt))
	return nil
}

// Mkdir implements driver.Files.
func (s *sandbox) Mkdir(ctx context.Context, p string) (bool, error) {
	r, err := s.rel(p)
	if err != nil {
		return false, err
	}
	created, err := s.files.Mkdir(ctx, r)
	if err == nil {
		s.own(r)
	}
	return created, err
}

// Grep implements driver.Searcher, on the host side: the same ripgrep or
// POSIX grep, without an exec round trip. Matches are named as the request
// named its path.
func (s *sandbox) Grep(ctx context.Context, o driver.GrepOptions) (driver.GrepResult, error) {
	r, err := s.rel(o.Path)
	if err != nil {
		return driver.GrepResult{}, err
	}
	abs := strings.HasPrefix(o.Path, "/")
	o.Path = r
	res, err := s.files.Grep(ctx, o)
	if abs {
		for i := range res.Matches {
			res.Matches[i].Path = path.Join(s.p.workdir, res.Matches[i].Path)
		}
	}
	return res, err
}

// Glob implements driver.Searcher.
func (s *sandbox) Glob(ctx context.Context, pattern, dir string) ([]string, error) {
	r, err := s.rel(dir)
	if err != nil {
		return nil, err
	}
	return s.files.Glob(ctx, pattern, r)
}

// Walk implements driver.Searcher.
func (s *sandbox) Walk(ctx context.Context, dir string, maxDepth int, exclude []string) ([]driver.WalkedFile, error) {
	r, err := s.rel(dir)
	if err != nil {
		return nil, err
	}
	return s.files.Walk(ctx, r, maxDepth, exclude)
}
