package bwrap

import (
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"os/user"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/fabro-sh/fabro-go/sdk/sandbox/driver"
)

// Who a sandbox's commands are on the host. bwrap runs them in a user
// namespace of their own, mapped to one unprivileged host uid: a plugin
// running as root gives each sandbox its own uid from a range no account
// uses, and owns nothing of the workspace itself, so nothing a command
// creates belongs to root (a setuid bit it sets grants at most its own
// uid), and the workspace, 0700 and the sandbox uid's, is closed to every
// other host user but root. A plugin that is not root runs commands as
// itself, in the same kind of namespace.

const (
	// DefaultUIDBase and DefaultUIDCount are the host uids given to
	// sandboxes: far above any account's (useradd stops at 60000,
	// systemd's dynamic users at 65519 and its container range at
	// 1878982656).
	DefaultUIDBase  = 1 << 30
	DefaultUIDCount = 1 << 24
)

// ident is the host uid and gid of a sandbox's commands; nil cred: the
// plugin's own (a plugin that is not root).
type ident struct {
	cred *syscall.Credential
}

// allocUID picks an unused uid of the range for a new sandbox: one no live
// sandbox of this plugin holds, no account has and owns no entry of the
// workspace root (a sandbox of another plugin process, or of an earlier
// run). The caller releases it with releaseUID.
func (d *Driver) allocUID() (uint32, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	taken := map[uint32]bool{}
	roots := []string{d.workspaceRoot()}
	if filepath.Dir(roots[0]) == sharedRoot {
		// The other instances' workspaces too: a uid is one sandbox's
		// on the whole host.
		if ents, err := os.ReadDir(sharedRoot); err == nil {
			for _, e := range ents {
				if e.IsDir() && strings.HasPrefix(e.Name(), "i-") {
					roots = append(roots, filepath.Join(sharedRoot, e.Name()))
				}
			}
		}
	}
	for _, r := range roots {
		ents, err := os.ReadDir(r)
		if err != nil {
			continue
		}
		for _, e := range ents {
			if fi, err := e.Info(); err == nil {
				if st, ok := fi.Sys().(*syscall.Stat_t); ok {
					taken[st.Uid] = true
				}
			}
		}
	}
	for range 64 {
		uid := d.cfg.UIDBase + rand.Uint32N(d.cfg.UIDCount)
		if d.uids[uid] || taken[uid] {
			continue
		}
		if _, err := user.LookupId(strconv.FormatUint(uint64(uid), 10)); err == nil {
			continue
		}
		d.uids[uid] = true
		return uid, nil
	}
	return 0, fmt.Errorf("%w: no free sandbox uid in [%d, %d)", driver.ErrUnavailable, d.cfg.UIDBase, uint64(d.cfg.UIDBase)+uint64(d.cfg.UIDCount))
}

func (d *Driver) releaseUID(uid uint32) {
	d.mu.Lock()
	delete(d.uids, uid)
	d.mu.Unlock()
}

func (d *Driver) inRange(uid uint32) bool {
	return uid >= d.cfg.UIDBase && uint64(uid) < uint64(d.cfg.UIDBase)+uint64(d.cfg.UIDCount)
}

// privateRoot is the default workspace root of a root plugin: in the
// shared temporary directory, which the local driver's commands write
// too, a command could plant names beside a workspace (its disk image)
// between its mkdir and its mount, or the init's copy before it is made.
// fabro-bwrap, root's and writable by no one else, is shared by the
// plugins of every service (names in it are random); one a user planted
// is passed over for a fresh directory.
//
// Given the service's instance ([InstanceEnv]), the plugin keeps its
// workspaces in a directory of that instance's below it
// ([InstanceRoot]), so that the service can remove at start those of
// its dead sandboxes (no record names them) without touching another
// service's.
func privateRoot(instance string) (string, error) {
	p := filepath.Join(os.TempDir(), "fabro-bwrap")
	if instance != "" {
		if !validInstance(instance) {
			return "", fmt.Errorf("%s %q: want 1 to 64 letters, digits, '-' or '_'", InstanceEnv, instance)
		}
		p = sharedRoot
	}
	if err := os.Mkdir(p, 0o711); err == nil || errors.Is(err, fs.ErrExist) {
		if ownedByRoot(p, true) == nil {
			if instance == "" {
				return p, nil
			}
			sub := InstanceRoot(instance)
			if err := os.Mkdir(sub, 0o711); err != nil && !errors.Is(err, fs.ErrExist) {
				return "", err
			}
			return sub, ownedByRoot(sub, true)
		}
	}
	p, err := os.MkdirTemp("", "fabro-bwrap-")
	if err != nil {
		return "", err
	}
	// Traversable by the sandboxes' uids, listed by no one.
	return p, os.Chmod(p, 0o711)
}

// InstanceEnv, in the plugin's environment, names the service instance it
// serves (the service sets it); see [InstanceRoot].
const InstanceEnv = "FABRO_SANDBOX_INSTANCE"

// sharedRoot is the root plugins' directory; a plugin's environment has
// no TMPDIR, so it is in /tmp.
const sharedRoot = "/tmp/fabro-bwrap"

// InstanceRoot is where a root plugin serving the service instance keeps
// its workspaces: a directory of root's, 0711, in sharedRoot.
func InstanceRoot(instance string) string { return filepath.Join(sharedRoot, "i-"+instance) }

func validInstance(s string) bool {
	if len(s) == 0 || len(s) > 64 {
		return false
	}
	for _, c := range s {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}

func (d *Driver) workspaceRoot() string {
	if d.cfg.WorkspaceRoot != "" {
		return d.cfg.WorkspaceRoot
	}
	return os.TempDir()
}

// identity decides who runs the commands of a sandbox on dir and prepares
// dir for them. A managed workspace (new or reopened) is given to a
// sandbox uid; a designated directory runs as its owner, and one owned by
// root is refused: its commands would have to be root to write it.
// claimed says whether a uid was taken from the range (to release).
func (d *Driver) identity(dir string, managed, reopen bool) (id ident, claimed bool, err error) {
	if os.Geteuid() != 0 {
		return ident{}, false, nil
	}
	fi, err := os.Lstat(dir)
	if err != nil {
		return ident{}, false, err
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return ident{}, false, fmt.Errorf("%w: stat %s", driver.ErrUnavailable, dir)
	}
	var uid, gid uint32
	switch {
	case managed && reopen && d.inRange(st.Uid):
		// Still the uid it was given: held again by this process.
		d.mu.Lock()
		d.uids[st.Uid] = true
		d.mu.Unlock()
		uid, gid, claimed = st.Uid, st.Uid, true
	case managed:
		if uid, err = d.allocUID(); err != nil {
			return ident{}, false, err
		}
		gid, claimed = uid, true
	case st.Uid == 0:
		return ident{}, false, fmt.Errorf("%w: working_directory %s belongs to root: bwrap never runs commands as root; give the directory to a user or let the driver make the workspace",
			driver.ErrInvalid, dir)
	default:
		// A user's own directory: its commands are that user, never with
		// root's group.
		uid, gid = st.Uid, st.Gid
		if gid == 0 {
			gid = uid
		}
	}
	if managed {
		if err = os.Lchown(dir, int(uid), int(gid)); err == nil {
			err = os.Chmod(dir, 0o700)
		}
		if err != nil {
			if claimed {
				d.releaseUID(uid)
			}
			return ident{}, false, fmt.Errorf("give the workspace to uid %d: %w", uid, err)
		}
	}
	return ident{cred: &syscall.Credential{Uid: uid, Gid: gid, Groups: []uint32{}}}, claimed, nil
}

// hostGroups are the plugin's supplementary groups, restored on a thread
// after it acted as a sandbox's uid.
var hostGroups = func() []uint32 {
	gs, _ := syscall.Getgroups()
	out := make([]uint32, len(gs))
	for i, g := range gs {
		out[i] = uint32(g)
	}
	return out
}()

// as runs fn with this thread's filesystem identity the sandbox's: its
// uid and gid and no supplementary group. Every file operation fn makes
// is checked, and every file it creates owned, as if a command had made
// it; root's capabilities over files are dropped meanwhile (the kernel
// clears them when the fsuid leaves 0). The thread is locked for fn and
// only returned to the scheduler once it is root again; should that
// fail, the thread ends with the goroutine.
func (i ident) as(fn func() error) error {
	if i.cred == nil {
		return fn()
	}
	runtime.LockOSThread()
	defer func() {
		setfs(unix.SYS_SETFSUID, 0)
		setfs(unix.SYS_SETFSGID, 0)
		if fsIDs() == [2]int{} && setThreadGroups(hostGroups) == nil {
			runtime.UnlockOSThread()
		}
	}()
	if err := setThreadGroups(nil); err != nil {
		return fmt.Errorf("drop groups: %w", err)
	}
	setfs(unix.SYS_SETFSGID, int(i.cred.Gid))
	setfs(unix.SYS_SETFSUID, int(i.cred.Uid))
	if fsIDs() != [2]int{int(i.cred.Uid), int(i.cred.Gid)} {
		return fmt.Errorf("%w: could not take the sandbox's uid %d for a file operation", driver.ErrUnavailable, i.cred.Uid)
	}
	return fn()
}

// setThreadGroups sets this thread's supplementary groups only: the raw
// system call, not syscall.Setgroups, which sets every thread's.
func setThreadGroups(gs []uint32) error {
	var e syscall.Errno
	if len(gs) == 0 {
		_, _, e = unix.RawSyscall(unix.SYS_SETGROUPS, 0, 0, 0)
	} else {
		_, _, e = unix.RawSyscall(unix.SYS_SETGROUPS, uintptr(len(gs)), uintptr(unsafe.Pointer(&gs[0])), 0)
	}
	if e != 0 {
		return e
	}
	return nil
}

// setfs calls setfsuid(2) or setfsgid(2) on this thread and returns the
// previous value: the calls report no failure.
func setfs(call uintptr, id int) int {
	r, _, _ := unix.RawSyscall(call, uintptr(id), 0, 0)
	return int(r)
}

// fsIDs are this thread's fsuid and fsgid (-1 changes nothing).
func fsIDs() [2]int {
	return [2]int{setfs(unix.SYS_SETFSUID, -1) & 0xffffffff, setfs(unix.SYS_SETFSGID, -1) & 0xffffffff}
}
