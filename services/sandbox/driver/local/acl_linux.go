package local

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"

	"golang.org/x/sys/unix"
)

// POSIX ACLs as Linux stores them in the system.posix_acl_* extended
// attributes: a version, then (tag, perm, id) entries sorted by tag and id.
const (
	aclVersion  = 2
	aclUserObj  = 0x01
	aclUser     = 0x02
	aclGroupObj = 0x04
	aclGroup    = 0x08
	aclMask     = 0x10
	aclOther    = 0x20
	aclNoID     = 0xffffffff

	xattrAccess  = "system.posix_acl_access"
	xattrDefault = "system.posix_acl_default"
)

type aclEntry struct {
	tag, perm uint16
	id        uint32
}

// aclFromMode is the minimal ACL a mode stands for.
func aclFromMode(mode fs.FileMode) []aclEntry {
	return []aclEntry{
		{aclUserObj, uint16(mode>>6) & 7, aclNoID},
		{aclGroupObj, uint16(mode>>3) & 7, aclNoID},
		{aclOther, uint16(mode) & 7, aclNoID},
	}
}

func readACL(fd int, attr string) ([]aclEntry, error) {
	buf := make([]byte, 4+8*64)
	n, err := unix.Fgetxattr(fd, attr, buf)
	if err != nil {
		return nil, err
	}
	b := buf[:n]
	if len(b) < 4 || binary.LittleEndian.Uint32(b) != aclVersion || (len(b)-4)%8 != 0 {
		return nil, errors.New("unreadable ACL")
	}
	var out []aclEntry
	for b = b[4:]; len(b) > 0; b = b[8:] {
		out = append(out, aclEntry{binary.LittleEndian.Uint16(b), binary.LittleEndian.Uint16(b[2:]), binary.LittleEndian.Uint32(b[4:])})
	}
	return out, nil
}

// withEntry returns acl with the user or group id (tag aclUser or
// aclGroup) given at least perm, and the mask widened so that the grant
// takes effect.
func withEntry(acl []aclEntry, tag uint16, id uint32, perm uint16) []aclEntry {
	acl = slices.Clone(acl)
	found := false
	for i := range acl {
		if acl[i].tag == tag && acl[i].id == id {
			acl[i].perm |= perm
			found = true
		}
	}
	if !found {
		acl = append(acl, aclEntry{tag, perm, id})
	}
	var mask uint16
	hasMask := false
	for _, e := range acl {
		switch e.tag {
		case aclUser, aclGroupObj, aclGroup:
			mask |= e.perm
		case aclMask:
			hasMask = true
		}
	}
	for i := range acl {
		if acl[i].tag == aclMask {
			acl[i].perm |= mask
		}
	}
	if !hasMask {
		acl = append(acl, aclEntry{aclMask, mask, aclNoID})
	}
	slices.SortFunc(acl, func(a, b aclEntry) int {
		if a.tag != b.tag {
			return int(a.tag) - int(b.tag)
		}
		return int(int64(a.id) - int64(b.id))
	})
	return acl
}

func writeACL(fd int, attr string, acl []aclEntry) error {
	b := binary.LittleEndian.AppendUint32(nil, aclVersion)
	for _, e := range acl {
		b = binary.LittleEndian.AppendUint16(b, e.tag)
		b = binary.LittleEndian.AppendUint16(b, e.perm)
		b = binary.LittleEndian.AppendUint32(b, e.id)
	}
	return unix.Fsetxattr(fd, attr, b, 0)
}

// grantACL gives uid perm on f (a file or directory) on top of what its
// ACL or mode allows; on a directory with inherit, the default ACL gives
// the same to what is created in it. Working on a descriptor, never a
// path, means a link swapped in by a command cannot redirect the grant.
func grantACL(f *os.File, uid uint32, perm uint16, inherit bool) error {
	return grantEntry(f, aclUser, uid, perm, inherit)
}

// aclMu serialises the service's read-modify-write of ACLs, so that grants
// made at once on one directory (sandboxes created together) all stay.
var aclMu sync.Mutex

// grantEntry is grantACL for a user or a group (tag aclUser or aclGroup).
func grantEntry(f *os.File, tag uint16, uid uint32, perm uint16, inherit bool) error {
	aclMu.Lock()
	defer aclMu.Unlock()
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	if !fi.Mode().IsRegular() && !fi.IsDir() {
		return nil
	}
	fd := int(f.Fd())
	if !fi.IsDir() && fi.Mode()&0o100 != 0 {
		perm |= 1
	}
	acl, err := readACL(fd, xattrAccess)
	if err != nil {
		acl = aclFromMode(fi.Mode().Perm())
	}
	if err := writeACL(fd, xattrAccess, withEntry(acl, tag, uid, perm)); err != nil {
		return err
	}
	if !inherit || !fi.IsDir() {
		return nil
	}
	def, err := readACL(fd, xattrDefault)
	if err != nil {
		def = aclFromMode(fi.Mode().Perm() | 0o700)
	}
	return writeACL(fd, xattrDefault, withEntry(def, tag, uid, 7))
}

// openNoFollow opens rel inside root for its metadata: not through a link
// out of root, not a link itself, and never blocking on a FIFO.
func openNoFollow(root *os.Root, rel string) (*os.File, error) {
	return root.OpenFile(rel, os.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
}

// grantRel grants uid read and write (and search on directories) on rel
// inside root, inherited by what is created in a directory.
func grantRel(root *os.Root, rel string, uid uint32) error {
	f, err := openNoFollow(root, rel)
	if errors.Is(err, unix.ELOOP) {
		return nil // a link: its target is granted where it lies, if inside
	}
	if err != nil {
		return err
	}
	defer f.Close()
	perm := uint16(6)
	if fi, err := f.Stat(); err == nil && fi.IsDir() {
		perm = 7
	}
	return grantACL(f, uid, perm, true)
}

// grantTree lets uid read and write everything in root (the directory
// dir), now and what is created there later, and search every directory
// above dir that it could not.
func grantTree(root *os.Root, dir string, uid uint32) error {
	err := fs.WalkDir(root.FS(), ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.Type()&fs.ModeSymlink != 0 {
			return nil
		}
		return grantRel(root, p, uid)
	})
	if err != nil {
		return err
	}
	return grantSearch(filepath.Dir(dir), uid)
}

// grantSearch lets uid pass through dir and each directory above it whose
// mode does not already let everyone pass: search only, no listing. These
// directories lie above a workspace, out of its commands' hands.
func grantSearch(dir string, uid uint32) error { return grantSearchTo(dir, aclUser, uid) }

// grantSearchGroup is grantSearch for the members of group gid.
func grantSearchGroup(dir string, gid uint32) error { return grantSearchTo(dir, aclGroup, gid) }

func grantSearchTo(dir string, tag uint16, id uint32) error {
	dir = filepath.Clean(dir)
	if !filepath.IsAbs(dir) {
		return fmt.Errorf("grant search: %s is not absolute", dir)
	}
	// From the root down, each directory opened relative to the one above
	// and never through a link: a user owning one of them cannot swap a
	// link in to send the grant elsewhere. The path was resolved before,
	// so a link found now is such a swap, and an error.
	f, err := os.OpenFile("/", os.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	var parts []string
	if dir != "/" {
		parts = strings.Split(dir[1:], "/")
	}
	for i := 0; ; i++ {
		fi, err := f.Stat()
		if err == nil && fi.Mode().Perm()&0o001 == 0 {
			err = grantEntry(f, tag, id, 1, false)
		}
		if err != nil || i == len(parts) {
			f.Close()
			return err
		}
		fd, err := unix.Openat(int(f.Fd()), parts[i], unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		f.Close()
		if err != nil {
			return fmt.Errorf("grant search: open %s: %w", filepath.Join(append([]string{"/"}, parts[:i+1]...)...), err)
		}
		f = os.NewFile(uintptr(fd), parts[i])
	}
}
