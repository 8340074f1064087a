package local

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/fabro-sh/fabro-go/sdk/sandbox/driver"
)

// resolve turns a client path into one relative to the root, lexically: an
// absolute path must lie under the root, a relative one is taken from the
// working directory (the root here). Symbolic links are then confined by
// os.Root on every operation.
func (s *sandbox) resolve(p string) (string, error) {
	if strings.ContainsRune(p, 0) {
		return "", fmt.Errorf("%w: path contains NUL", driver.ErrInvalid)
	}
	if p == "" {
		p = "."
	}
	rel := filepath.FromSlash(p)
	if filepath.IsAbs(rel) {
		r, err := filepath.Rel(s.dir, rel)
		if err != nil {
			return "", fmt.Errorf("%w: %s", driver.ErrPathEscapes, p)
		}
		rel = r
	}
	rel = filepath.Clean(rel)
	if rel != "." && !filepath.IsLocal(rel) {
		return "", fmt.Errorf("%w: %s", driver.ErrPathEscapes, p)
	}
	return rel, nil
}

// fsErr maps an os.Root error on path p to the driver's errors.
func fsErr(p string, err error) error {
	switch {
	case err == nil:
		return nil
	case isEscape(err):
		return fmt.Errorf("%w: %s", driver.ErrPathEscapes, p)
	case errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("%w: %s", driver.ErrNotFound, p)
	case errors.Is(err, syscall.ENOTDIR):
		return fmt.Errorf("%w: %s (or one of its parents)", driver.ErrNotDirectory, p)
	case errors.Is(err, syscall.EISDIR):
		return fmt.Errorf("%w: %s", driver.ErrIsDirectory, p)
	case errors.Is(err, syscall.ENOTEMPTY), errors.Is(err, syscall.EEXIST):
		return fmt.Errorf("%w: %s", driver.ErrNotEmpty, p)
	case errors.Is(err, syscall.ELOOP):
		return fmt.Errorf("%w: %s (too many symbolic links)", driver.ErrPathEscapes, p)
	case errors.Is(err, syscall.ENAMETOOLONG):
		return fmt.Errorf("%w: %.64s…: a name or the path is longer than the filesystem takes", driver.ErrInvalid, p)
	}
	return err
}

// isEscape reports os.Root's escape error, which is unexported: its text is
// stable, and it may sit inside nested PathErrors.
func isEscape(err error) bool {
	for ; err != nil; err = errors.Unwrap(err) {
		if err.Error() == "path escapes from parent" {
			return true
		}
	}
	return false
}

func fileType(m fs.FileMode) driver.FileType {
	switch {
	case m.IsRegular():
		return driver.TypeFile
	case m.IsDir():
		return driver.TypeDirectory
	case m&fs.ModeSymlink != 0:
		return driver.TypeSymlink
	}
	return driver.TypeOther
}

func toInfo(p string, fi fs.FileInfo) driver.FileInfo {
	size := fi.Size()
	if fi.IsDir() {
		size = 0
	}
	return driver.FileInfo{Path: p, Type: fileType(fi.Mode()), Size: size, Mode: uint32(fi.Mode().Perm()), ModTime: fi.ModTime()}
}

// Open implements driver.Files.
func (s *sandbox) Open(_ context.Context, p string, offset int64) (io.ReadCloser, int64, error) {
	rel, err := s.resolve(p)
	if err != nil {
		return nil, 0, err
	}
	// Non-blocking: a named pipe the command made would otherwise keep
	// this thread in open(2) until a writer came (it is refused below).
	f, err := s.root.OpenFile(rel, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, 0, fsErr(p, err)
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, 0, err
	}
	switch {
	case fi.IsDir():
		f.Close()
		return nil, 0, fmt.Errorf("%w: %s", driver.ErrIsDirectory, p)
	case !fi.Mode().IsRegular():
		// Devices and pipes could block or never end.
		f.Close()
		return nil, 0, fmt.Errorf("%w: %s is not a regular file", driver.ErrInvalid, p)
	}
	if offset > 0 {
		if _, err := f.Seek(offset, io.SeekStart); err != nil {
			f.Close()
			return nil, 0, err
		}
	}
	return f, fi.Size(), nil
}

// syncFile is (*os.File).Sync; tests replace it to see what is synced and
// when.
var syncFile = (*os.File).Sync

// WriteFile implements driver.Files: written aside in the same directory,
// synced, then renamed over, so readers never see a mix and a crash leaves
// the old content or the new, never an empty or partial file. The
// directory is synced after the rename so the rename itself is durable. A
// kill between the create and the rename leaves the temporary file, which
// the next Create on the workspace removes (sweepTemps).
func (s *sandbox) WriteFile(_ context.Context, p string, data []byte) (bool, error) {
	rel, err := s.resolve(p)
	if err != nil {
		return false, err
	}
	if rel == "." {
		return false, fmt.Errorf("%w: %s", driver.ErrIsDirectory, p)
	}
	mode, created := fs.FileMode(0o644), true
	switch fi, err := s.root.Stat(rel); {
	case err == nil && fi.IsDir():
		return false, fmt.Errorf("%w: %s", driver.ErrIsDirectory, p)
	case err == nil:
		mode, created = fi.Mode().Perm(), false
	case errors.Is(err, fs.ErrNotExist):
	default:
		return false, fsErr(p, err)
	}
	dir := filepath.Dir(rel)
	made := s.missingDirs(dir)
	if err := s.root.MkdirAll(dir, 0o755); err != nil {
		return false, fsErr(p, err)
	}
	tmp := filepath.Join(dir, tempName(filepath.Base(rel)))
	f, err := s.root.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
	if err != nil {
		return false, fsErr(p, err)
	}
	_, werr := f.Write(data)
	if werr == nil {
		werr = f.Chmod(mode) // the umask may have narrowed it
	}
	if werr == nil {
		werr = syncFile(f)
	}
	if cerr := f.Close(); werr == nil {
		werr = cerr
	}
	if werr == nil {
		werr = s.root.Rename(tmp, rel)
	}
	if werr != nil {
		s.root.Remove(tmp)
		return false, fsErr(p, werr)
	}
	if err := s.syncDir(dir); err != nil {
		return false, fmt.Errorf("sync the directory of %s: %w", p, err)
	}
	if err := s.adopt(append(made, rel)...); err != nil {
		return false, err
	}
	return created, nil
}

// syncDir makes a rename or creation in directory rel durable.
func (s *sandbox) syncDir(rel string) error {
	// A directory or nothing: the command may have swapped a named pipe
	// in since the rename.
	d, err := s.root.OpenFile(rel, os.O_RDONLY|syscall.O_NONBLOCK|syscall.O_DIRECTORY, 0)
	if err != nil {
		return err
	}
	err = syncFile(d)
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}

// Remove implements driver.Files.
func (s *sandbox) Remove(_ context.Context, p string, recursive bool) error {
	rel, err := s.resolve(p)
	if err != nil {
		return err
	}
	if rel == "." {
		return fmt.Errorf("%w: %s is the root itself", driver.ErrPathEscapes, p)
	}
	fi, err := s.root.Lstat(rel)
	if err != nil {
		return fsErr(p, err)
	}
	if fi.IsDir() && recursive {
		return fsErr(p, s.root.RemoveAll(rel))
	}
	return fsErr(p, s.root.Remove(rel))
}

// Stat implements driver.Files.
func (s *sandbox) Stat(_ context.Context, p string) (driver.FileInfo, error) {
	rel, err := s.resolve(p)
	if err != nil {
		return driver.FileInfo{}, err
	}
	fi, err := s.root.Stat(rel)
	if errors.Is(err, syscall.ENOTDIR) {
		err = fs.ErrNotExist // a/b where a is a file: b does not exist
	}
	if err != nil {
		return driver.FileInfo{}, fsErr(p, err)
	}
	return toInfo(p, fi), nil
}

// ListDir implements driver.Files.
func (s *sandbox) ListDir(ctx context.Context, p string, depth int) ([]driver.FileInfo, error) {
	rel, err := s.resolve(p)
	if err != nil {
		return nil, err
	}
	fi, err := s.root.Stat(rel)
	if err != nil {
		return nil, fsErr(p, err)
	}
	if !fi.IsDir() {
		return nil, fmt.Errorf("%w: %s", driver.ErrNotDirectory, p)
	}
	top := filepath.ToSlash(rel)
	var out []driver.FileInfo
	err = fs.WalkDir(s.root.FS(), top, func(name string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		if name == top {
			return nil
		}
		below := relBelow(top, name)
		info, err := d.Info()
		if err != nil {
			return nil // vanished while listing
		}
		out = append(out, toInfo(below, info))
		if d.IsDir() && strings.Count(below, "/")+1 >= depth {
			return fs.SkipDir
		}
		return nil
	})
	if err != nil {
		return nil, fsErr(p, err)
	}
	return out, nil
}

// relBelow returns name relative to top, both fs.FS paths.
func relBelow(top, name string) string {
	if top == "." {
		return name
	}
	return strings.TrimPrefix(name, top+"/")
}

// Rename implements driver.Files.
func (s *sandbox) Rename(_ context.Context, from, to string) error {
	rf, err := s.resolve(from)
	if err != nil {
		return err
	}
	rt, err := s.resolve(to)
	if err != nil {
		return err
	}
	if rf == "." || rt == "." {
		return fmt.Errorf("%w: cannot move the root", driver.ErrPathEscapes)
	}
	if _, err := s.root.Lstat(rf); err != nil {
		return fsErr(from, err)
	}
	if strings.HasPrefix(rt+string(filepath.Separator), rf+string(filepath.Separator)) && rt != rf {
		return fmt.Errorf("%w: cannot move %s into itself", driver.ErrNotEmpty, from)
	}
	if fi, err := s.root.Lstat(rt); err == nil && fi.IsDir() && rt != rf {
		return fmt.Errorf("%w: %s is an existing directory", driver.ErrIsDirectory, to)
	}
	if err := s.root.MkdirAll(filepath.Dir(rt), 0o755); err != nil {
		return fsErr(to, err)
	}
	return fsErr(to, s.root.Rename(rf, rt))
}

// Mkdir implements driver.Files.
func (s *sandbox) Mkdir(_ context.Context, p string) (bool, error) {
	rel, err := s.resolve(p)
	if err != nil {
		return false, err
	}
	fi, err := s.root.Stat(rel)
	switch {
	case err == nil && fi.IsDir():
		return false, nil
	case err == nil, errors.Is(err, syscall.ENOTDIR):
		return false, fmt.Errorf("%w: %s (or one of its parents)", driver.ErrExists, p)
	case !errors.Is(err, fs.ErrNotExist):
		return false, fsErr(p, err)
	}
	made := s.missingDirs(rel)
	if err := s.root.MkdirAll(rel, 0o755); err != nil {
		if errors.Is(err, syscall.ENOTDIR) || errors.Is(err, syscall.EEXIST) {
			return false, fmt.Errorf("%w: %s (or one of its parents)", driver.ErrExists, p)
		}
		return false, fsErr(p, err)
	}
	return true, s.adopt(made...)
}
