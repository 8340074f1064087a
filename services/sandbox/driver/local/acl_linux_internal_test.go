package local

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// TestGrantSearchNeverFollowsALink: the directories above a workspace are
// opened from the root down without following links, so a link swapped in
// for one of them (by a user owning its parent) fails the grant instead of
// granting search on the link's target.
func TestGrantSearchNeverFollowsALink(t *testing.T) {
	base := t.TempDir()
	real := filepath.Join(base, "real", "inner")
	target := filepath.Join(base, "target", "inner")
	for _, d := range []string{real, target} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(filepath.Join(base, "target"), filepath.Join(base, "swapped")); err != nil {
		t.Fatal(err)
	}
	const uid = 4242
	if err := grantSearch(real, uid); err != nil {
		if errors.Is(err, unix.ENOTSUP) || errors.Is(err, unix.EOPNOTSUPP) {
			t.Skip("no POSIX ACLs on this file system")
		}
		t.Fatalf("a path without links: %v", err)
	}
	if !hasUser(t, real, uid) {
		t.Fatal("the real directory was not granted")
	}
	err := grantSearch(filepath.Join(base, "swapped", "inner"), uid)
	if !errors.Is(err, unix.ELOOP) && !errors.Is(err, unix.ENOTDIR) {
		t.Fatalf("through a link: %v, want ELOOP or ENOTDIR", err)
	}
	if hasUser(t, target, uid) {
		t.Fatal("the link's target was granted")
	}
}

func hasUser(t *testing.T, dir string, uid uint32) bool {
	t.Helper()
	f, err := os.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	acl, err := readACL(int(f.Fd()), xattrAccess)
	if err != nil {
		return false
	}
	for _, e := range acl {
		if e.tag == aclUser && e.id == uid {
			return true
		}
	}
	return false
}
