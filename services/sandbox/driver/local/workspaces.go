package local

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/fabro-sh/fabro-go/services/sandbox/internal/diskimage"
)

// workspacePrefix starts the name of every managed workspace directory.
const workspacePrefix = "sandbox-"

// WorkspaceLock is a claim on a workspace root: while it is held, this
// process owns every managed workspace below it.
type WorkspaceLock struct{ f *os.File }

// Release gives the claim up.
func (l *WorkspaceLock) Release() error {
	if l == nil {
		return nil
	}
	return l.f.Close() // closing drops the flock
}

// ErrWorkspaceRootBusy is returned by ClaimWorkspaceRoot when another live
// process holds the root.
var ErrWorkspaceRootBusy = errors.New("another sandbox service holds the workspace root")

// ClaimWorkspaceRoot takes an exclusive lock on root (creating it) and then
// removes the managed workspaces a previous run left there: sandboxes live
// in memory only, so after a restart no sandbox refers to them. Only
// directories named like managed workspaces are removed. When another live
// process holds the lock nothing is removed and the error wraps
// [ErrWorkspaceRootBusy]. Errors removing single workspaces are joined in
// the error, with the lock still returned.
func ClaimWorkspaceRoot(root string) (*WorkspaceLock, []string, error) {
	if err := os.MkdirAll(root, 0o755); err != nil {
		return nil, nil, fmt.Errorf("create workspace root: %w", err)
	}
	f, err := os.OpenFile(filepath.Join(root, ".lock"), os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, nil, fmt.Errorf("open workspace lock: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, nil, fmt.Errorf("%w: %s", ErrWorkspaceRootBusy, root)
		}
		return nil, nil, fmt.Errorf("lock workspace root: %w", err)
	}
	lock := &WorkspaceLock{f: f}
	ents, err := os.ReadDir(root)
	if err != nil {
		return lock, nil, fmt.Errorf("read workspace root: %w", err)
	}
	var removed []string
	var errs []error
	for _, e := range ents {
		if !e.IsDir() || !strings.HasPrefix(e.Name(), workspacePrefix) {
			continue
		}
		p := filepath.Join(root, e.Name())
		if err := removeAll(p); err != nil {
			errs = append(errs, err)
			continue
		}
		removed = append(removed, p)
	}
	return lock, removed, errors.Join(errs...)
}

// removeAll removes dir and everything below it, making directories a
// command left read-only (a Go module cache, say) writable first when
// needed. Symbolic links are removed, never followed.
func removeAll(dir string) error {
	if err := diskimage.Detach(dir); err != nil {
		return err
	}
	if err := os.RemoveAll(dir); err == nil || !errors.Is(err, fs.ErrPermission) {
		return err
	}
	filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			if info, err := d.Info(); err == nil && info.Mode().Perm()&0o700 != 0o700 {
				os.Chmod(p, info.Mode().Perm()|0o700)
			}
		}
		return nil
	})
	return os.RemoveAll(dir)
}
