package diskimage

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

func TestAttachBoundsWritesAndDetachRemoves(t *testing.T) {
	if err := Supported(); err != nil {
		t.Skipf("no disk images here: %v", err)
	}
	dir := filepath.Join(t.TempDir(), "ws")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := Attach(context.Background(), dir, 16<<20); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { Detach(dir) })
	if !Mounted(dir) {
		t.Fatal("not mounted")
	}
	var st syscall.Stat_t
	if err := syscall.Stat(dir, &st); err != nil || st.Uid != 0 || st.Mode&0o777 != 0o700 {
		t.Fatalf("root of the image: uid %d mode %o, %v", st.Uid, st.Mode&0o777, err)
	}
	if err := os.Chown(dir, 12345, 12345); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "lost+found")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("lost+found left: %v", err)
	}
	// Attaching again (a reopen) keeps what is there.
	if err := os.WriteFile(filepath.Join(dir, "keep"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := Attach(context.Background(), dir, 16<<20); err != nil {
		t.Fatal(err)
	}
	f, err := os.Create(filepath.Join(dir, "fill"))
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 1<<20)
	var werr error
	written := 0
	for range 64 {
		var n int
		n, werr = f.Write(buf)
		written += n
		if werr != nil {
			break
		}
	}
	f.Close()
	if !errors.Is(werr, syscall.ENOSPC) || written > 16<<20 {
		t.Fatalf("wrote %d bytes into a 16 MiB image, last error %v; want ENOSPC before 16 MiB", written, werr)
	}
	var sf syscall.Statfs_t
	syscall.Statfs(dir, &sf)
	t.Logf("after fill: bavail %d bfree %d bsize %d written %d", sf.Bavail, sf.Bfree, sf.Bsize, written)
	if err := syscall.Stat(dir, &st); err != nil || st.Uid != 12345 {
		t.Fatalf("a second Attach changed the owner: uid %d, %v", st.Uid, err)
	}
	if !Full(dir) {
		t.Fatal("Full says no after ENOSPC")
	}
	if _, err := os.ReadFile(filepath.Join(dir, "keep")); err != nil {
		t.Fatalf("the second Attach lost the file: %v", err)
	}
	if err := Detach(dir); err != nil {
		t.Fatal(err)
	}
	if Mounted(dir) {
		t.Fatal("still mounted")
	}
	if _, err := os.Stat(ImagePath(dir)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("image left: %v", err)
	}
}

// TestAttachRefusesAPlantedImage: an image path that a command planted
// (a symbolic link to another sandbox's image, or a file of its own) is
// never mounted: in a shared directory such as /tmp a command can create
// <dir>.disk.img between the workspace's mkdir and Attach.
func TestAttachRefusesAPlantedImage(t *testing.T) {
	if err := Supported(); err != nil {
		t.Skipf("no disk images here: %v", err)
	}
	base := t.TempDir()
	victim := filepath.Join(base, "victim")
	if err := os.Mkdir(victim, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := Attach(context.Background(), victim, 16<<20); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { Detach(victim) })
	if err := os.WriteFile(filepath.Join(victim, "secret"), []byte("victim"), 0o600); err != nil {
		t.Fatal(err)
	}
	own := filepath.Join(base, "own.img")
	if raw, err := os.ReadFile(ImagePath(victim)); err != nil || os.WriteFile(own, raw, 0o600) != nil || os.Chown(own, 65534, 65534) != nil {
		t.Fatalf("the plant: %v", err)
	}
	for name, plant := range map[string]func(img string) error{
		"symlink to another image":   func(img string) error { return os.Symlink(ImagePath(victim), img) },
		"hard link to another image": func(img string) error { return os.Link(ImagePath(victim), img) },
		"image of another user":      func(img string) error { return os.Rename(own, img) },
	} {
		t.Run(name, func(t *testing.T) {
			dir := filepath.Join(base, "ws-"+strings.ReplaceAll(name, " ", "-"))
			if err := os.Mkdir(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			if err := plant(ImagePath(dir)); err != nil {
				t.Fatalf("the plant: %v", err)
			}
			err := Attach(context.Background(), dir, 16<<20)
			if err == nil {
				defer syscall.Unmount(dir, syscall.MNT_DETACH)
			}
			if _, serr := os.Stat(filepath.Join(dir, "secret")); serr == nil || err == nil {
				t.Errorf("Attach over a planted image: %v; the victim's file visible: %v", err, serr == nil)
			}
		})
	}
}
