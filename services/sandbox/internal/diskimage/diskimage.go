// Package diskimage bounds a directory's disk space with a filesystem of
// its own: a sparse ext4 image file beside the directory, attached with a
// loop device and mounted on it nosuid,nodev. A write past the size fails
// with ENOSPC inside the directory and nowhere else; the host's free space
// shrinks by at most the size. It takes root (mount), mkfs.ext4 and
// mount(8) with loop support (util-linux).
package diskimage

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// MinBytes is the smallest size an image is made with: smaller ext4
// filesystems lose most of their space to metadata.
const MinBytes = 8 << 20

// Suffix ends the name of a directory's image file, which lies beside it.
const Suffix = ".disk.img"

// ImagePath is where dir's image is kept.
func ImagePath(dir string) string { return filepath.Clean(dir) + Suffix }

var (
	probeOnce sync.Once
	probeErr  error
	mkfs      string
	mountBin  string
)

// Supported returns nil when images can be made here, else why not.
func Supported() error {
	probeOnce.Do(func() {
		if os.Geteuid() != 0 {
			probeErr = errors.New("a disk limit needs the service to run as root (each workspace gets a loop-mounted filesystem of its own)")
			return
		}
		var err error
		if mkfs, err = lookPath("mkfs.ext4"); err != nil {
			probeErr = errors.New("a disk limit needs mkfs.ext4 (Debian's e2fsprogs package)")
			return
		}
		if mountBin, err = lookPath("mount"); err != nil {
			probeErr = errors.New("a disk limit needs mount(8) (util-linux)")
			return
		}
		if _, err := os.Stat("/dev/loop-control"); err != nil {
			probeErr = errors.New("a disk limit needs loop devices (/dev/loop-control is missing)")
		}
	})
	return probeErr
}

func lookPath(name string) (string, error) {
	for _, dir := range []string{"/usr/sbin", "/sbin", "/usr/bin", "/bin"} {
		p := filepath.Join(dir, name)
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", fmt.Errorf("%s not found", name)
}

// Attach gives the empty directory dir a new filesystem of size bytes
// whose root is root's, mode 0700 (the caller hands it to the sandbox's
// uid). Already mounted (a sandbox reopened after a restart) it is left as
// it is; an image left by an earlier run (after a reboot) is mounted again
// as it was.
func Attach(ctx context.Context, dir string, size int64) error {
	if err := Supported(); err != nil {
		return err
	}
	if Mounted(dir) {
		return nil
	}
	size = max(size, MinBytes)
	img := ImagePath(dir)
	fresh := false
	if _, err := os.Lstat(img); errors.Is(err, os.ErrNotExist) {
		if err := create(ctx, img, size); err != nil {
			os.Remove(img)
			return err
		}
		fresh = true
	}
	// Mounted through a descriptor of the file checked to be the
	// service's own image: never through a name a command could have
	// planted (a link to another sandbox's image, or to a block device).
	f, err := openImage(img)
	if err != nil {
		return err
	}
	defer f.Close()
	mount := exec.CommandContext(ctx, mountBin, "-t", "ext4", "-o", "loop,nosuid,nodev,noatime", "/proc/self/fd/3", dir)
	mount.ExtraFiles = []*os.File{f}
	out, err := mount.CombinedOutput()
	if err != nil {
		return fmt.Errorf("mount the disk image of %s: %v: %s", dir, err, bytes.TrimSpace(out))
	}
	if !fresh {
		return nil
	}
	// The command's own: the filesystem's root replaces the directory.
	os.Remove(filepath.Join(dir, "lost+found"))
	if err := os.Chmod(dir, 0o700); err != nil {
		Detach(dir)
		return err
	}
	return nil
}

// openImage opens img, not following a symbolic link, and checks that it
// is a regular file of root's alone with no other name (a hard link to
// another sandbox's image is refused).
func openImage(img string) (*os.File, error) {
	f, err := os.OpenFile(img, os.O_RDWR|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, fmt.Errorf("open the disk image %s: %w", img, err)
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok || !fi.Mode().IsRegular() || st.Uid != 0 || st.Nlink != 1 || fi.Mode().Perm()&0o077 != 0 {
		f.Close()
		return nil, fmt.Errorf("the disk image %s is not the service's own (a regular file of root's, mode 0600, one link): refusing to mount it", img)
	}
	return f, nil
}

func create(ctx context.Context, img string, size int64) error {
	f, err := os.OpenFile(img, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return fmt.Errorf("create disk image: %w", err)
	}
	err = f.Truncate(size) // sparse: the host pays only for what is written
	f.Close()
	if err != nil {
		return fmt.Errorf("size disk image: %w", err)
	}
	// No reserved blocks (the command is the only user) and lazy inode
	// tables, so that making one takes milliseconds.
	args := []string{"-q", "-F", "-m", "0", "-E", "lazy_itable_init=1,lazy_journal_init=1,root_owner=0:0", img}
	if out, err := exec.CommandContext(ctx, mkfs, args...).CombinedOutput(); err != nil {
		return fmt.Errorf("mkfs.ext4 the disk image: %v: %s", err, bytes.TrimSpace(out))
	}
	return nil
}

// Mounted says whether something is mounted on dir (a filesystem, or a
// bind mount of the same one, which st_dev cannot tell).
func Mounted(dir string) bool {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return false
	}
	dir = filepath.Clean(dir)
	for line := range strings.SplitSeq(string(b), "\n") {
		if f := strings.Fields(line); len(f) > 4 && unescape(f[4]) == dir {
			return true
		}
	}
	return false
}

// unescape undoes mountinfo's octal escapes (\040 for a space).
func unescape(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var out strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				out.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		out.WriteByte(s[i])
	}
	return out.String()
}

// Detach unmounts what is mounted on the managed directory dir (its
// image's filesystem; lazily if a process still holds
// it: a loop device then goes with its last user) and removes its image.
// Only a directory the caller made may be given: whatever is mounted
// there is unmounted.
func Detach(dir string) error {
	img := ImagePath(dir)
	var err error
	for i := 0; Mounted(dir); i++ {
		if err = syscall.Unmount(dir, 0); err == nil || !errors.Is(err, syscall.EBUSY) {
			break
		}
		if i == 5 {
			err = syscall.Unmount(dir, syscall.MNT_DETACH)
			break
		}
		time.Sleep(time.Duration(i+1) * 20 * time.Millisecond)
	}
	if err != nil && Mounted(dir) {
		return fmt.Errorf("unmount the disk image of %s: %w", dir, err)
	}
	if err := os.Remove(img); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("remove the disk image of %s: %w", dir, err)
	}
	return nil
}

// Nosuid makes the managed directory dir a mount of its own flagged
// nosuid,nodev (a bind mount onto itself), unless something is mounted
// there already (its image, or this mount made by an earlier run). A
// command that plants a setuid binary or a device node in its workspace
// then gains nothing on the host: no host user running the plant takes
// its owner's uid, whoever owns it (root, where commands run as root).
// Detach undoes it. It takes root; without it, it does nothing and says
// so.
func Nosuid(dir string) error {
	if os.Geteuid() != 0 {
		return errors.New("a nosuid mount needs root")
	}
	if Mounted(dir) {
		return nil
	}
	// Through a descriptor of the directory, opened without following a
	// link: never a name a command could have swapped for a link.
	fd, err := syscall.Open(dir, syscall.O_RDONLY|syscall.O_DIRECTORY|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("nosuid mount of %s: %w", dir, err)
	}
	defer syscall.Close(fd)
	self := "/proc/self/fd/" + strconv.Itoa(fd)
	if err := syscall.Mount(self, dir, "", syscall.MS_BIND, ""); err != nil {
		return fmt.Errorf("nosuid mount of %s: bind: %w", dir, err)
	}
	if err := syscall.Mount("", dir, "", syscall.MS_BIND|syscall.MS_REMOUNT|syscall.MS_NOSUID|syscall.MS_NODEV, ""); err != nil {
		syscall.Unmount(dir, syscall.MNT_DETACH)
		return fmt.Errorf("nosuid mount of %s: remount: %w", dir, err)
	}
	return nil
}

// Has says whether dir was given an image.
func Has(dir string) bool {
	_, err := os.Lstat(ImagePath(dir))
	return err == nil
}

// Full says whether dir's filesystem has (next to) no space left: what a
// command ran into when its writes failed ENOSPC. ext4 keeps some blocks
// back for its metadata, so "full" is less than 1 MiB or 1% free.
func Full(dir string) bool {
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return false
	}
	return st.Bavail*uint64(st.Bsize) < max(1<<20, st.Blocks*uint64(st.Bsize)/100)
}
