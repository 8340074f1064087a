package local

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"syscall"

	"github.com/fabro-sh/fabro-go/sdk/sandbox/driver"
)

// Commands must not reach the service's secrets: its environment (the
// service is made non-dumpable, so /proc/<pid>/environ is closed to every
// process without CAP_SYS_PTRACE) and its data directory (0700). A service
// running as root therefore never runs a command as root:
//
//   - in a managed workspace, commands run as the sandbox user, who owns
//     the workspace;
//   - in a designated directory owned by someone other than root, they run
//     as that owner: the person whose project it is;
//   - in a designated directory owned by root, they run as the sandbox
//     user, whom the service grants read and write on the tree with POSIX
//     ACLs (inherited by what is created later) and search, not listing,
//     on the directories above it. The files stay root's.
//
// A service that is not root runs commands as itself; only its
// non-dumpability then separates them from its secrets.

// DefaultUser is the sandbox user when it exists on the host; otherwise
// commands run as "nobody".
const DefaultUser = "fabro-sandbox"

// runAs is who a sandbox's commands run as; the zero value is the
// service's own user.
type runAs struct {
	cred       *syscall.Credential
	name, home string
	// acl: files the service creates are granted to cred's user by ACL;
	// otherwise they are given to it (chown).
	acl bool
	// pooled: cred's uid is held from Config.UIDs, released on delete.
	pooled bool
}

// release gives a pooled uid back to the range.
func (r runAs) release(u *UIDs) {
	if r.pooled {
		u.Release(r.cred.Uid)
	}
}

// rangeUser is the identity of a sandbox with a uid of the range: uid and
// primary group its own, the range's group beside them, which lets it
// through the directories above the workspace. ok is false when dir gets
// no uid of the range (a designated directory of someone else).
func (d *Driver) rangeUser(dir string, managed bool, owner uint32) (r runAs, ok bool, err error) {
	u := d.cfg.UIDs
	uid := owner
	switch {
	case managed:
		if uid, err = u.Take(); err != nil {
			return runAs{}, true, fmt.Errorf("%w: %v", driver.ErrUnavailable, err)
		}
	case u.Contains(owner):
		u.Hold(owner)
	default:
		return runAs{}, false, nil
	}
	r = runAs{cred: &syscall.Credential{Uid: uid, Gid: uid, Groups: []uint32{u.Group()}}, name: strconv.FormatUint(uint64(uid), 10), home: dir, pooled: true}
	fail := func(err error) (runAs, bool, error) {
		r.release(u)
		return runAs{}, true, fmt.Errorf("%w: %v", driver.ErrUnavailable, err)
	}
	if managed {
		// The configured root (never the system's temporary directory)
		// is passed through, not listed: sandboxes do not learn each
		// other's names.
		if root := d.cfg.WorkspaceRoot; root != "" && filepath.Dir(dir) == filepath.Clean(root) {
			if err := os.Chmod(root, 0o711); err != nil {
				return fail(err)
			}
		}
		if err := os.Chown(dir, int(uid), int(uid)); err != nil {
			return fail(fmt.Errorf("give the workspace to uid %d: %w", uid, err))
		}
		if err := os.Chmod(dir, 0o700); err != nil {
			return fail(err)
		}
	}
	if err := grantSearchGroup(filepath.Dir(dir), u.Group()); err != nil {
		return fail(fmt.Errorf("let the sandboxes' group %d reach the workspace (POSIX ACLs): %w", u.Group(), err))
	}
	return r, true, nil
}

func lookupUser(name string) (*user.User, error) {
	if name != "" {
		return user.Lookup(name)
	}
	if u, err := user.Lookup(DefaultUser); err == nil {
		return u, nil
	}
	return user.Lookup("nobody")
}

func credentialOf(u *user.User) (*syscall.Credential, error) {
	uid, err := strconv.ParseUint(u.Uid, 10, 32)
	if err != nil {
		return nil, err
	}
	gid, err := strconv.ParseUint(u.Gid, 10, 32)
	if err != nil {
		return nil, err
	}
	c := &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), Groups: []uint32{}}
	if gids, err := u.GroupIds(); err == nil {
		for _, g := range gids {
			if n, err := strconv.ParseUint(g, 10, 32); err == nil && uint32(n) != c.Gid {
				c.Groups = append(c.Groups, uint32(n))
			}
		}
	}
	return c, nil
}

// commandUser decides who runs the commands of a sandbox on dir (opened as
// root), and prepares dir for them.
func (d *Driver) commandUser(root *os.Root, dir string, managed bool) (runAs, error) {
	if os.Geteuid() != 0 || d.cfg.User == "root" {
		return runAs{}, nil
	}
	sandboxUser, err := lookupUser(d.cfg.User)
	if err != nil {
		return runAs{}, fmt.Errorf("%w: the sandbox user %q: %v", driver.ErrUnavailable, d.cfg.User, err)
	}
	fi, err := os.Stat(dir)
	if err != nil {
		return runAs{}, err
	}
	st, _ := fi.Sys().(*syscall.Stat_t)
	if d.cfg.UIDs != nil && st != nil {
		if r, ok, err := d.rangeUser(dir, managed, st.Uid); ok {
			return r, err
		}
	}
	u := sandboxUser
	if !managed && st != nil && st.Uid != 0 {
		if owner, err := user.LookupId(strconv.FormatUint(uint64(st.Uid), 10)); err == nil {
			u = owner
		} else {
			// An owner without a passwd entry: its uid and the directory's group.
			u = &user.User{Uid: strconv.FormatUint(uint64(st.Uid), 10), Gid: strconv.FormatUint(uint64(st.Gid), 10), Username: strconv.FormatUint(uint64(st.Uid), 10)}
		}
	}
	cred, err := credentialOf(u)
	if err != nil {
		return runAs{}, fmt.Errorf("%w: the command user %s: %v", driver.ErrUnavailable, u.Username, err)
	}
	// A directory's owner can come with root's group (a uid without a
	// passwd entry takes the directory's group, often 0): commands never
	// run with gid 0, which opens root's group-readable files.
	if cred.Gid == 0 {
		sc, err := credentialOf(sandboxUser)
		if err != nil || sc.Gid == 0 {
			return runAs{}, fmt.Errorf("%w: the command user %s would run with gid 0", driver.ErrUnavailable, u.Username)
		}
		cred.Gid = sc.Gid
	}
	cred.Groups = slices.DeleteFunc(cred.Groups, func(g uint32) bool { return g == 0 })
	r := runAs{cred: cred, name: u.Username, home: u.HomeDir}
	if h, err := os.Stat(r.home); err != nil || !h.IsDir() {
		r.home = dir
	}
	switch {
	case managed:
		if err := os.Chown(dir, int(cred.Uid), int(cred.Gid)); err != nil {
			return runAs{}, fmt.Errorf("%w: give the workspace to %s: %v", driver.ErrUnavailable, u.Username, err)
		}
		if err := os.Chmod(dir, 0o700); err != nil {
			return runAs{}, fmt.Errorf("%w: %v", driver.ErrUnavailable, err)
		}
		if err := grantSearch(filepath.Dir(dir), cred.Uid); err != nil {
			return runAs{}, fmt.Errorf("%w: let %s reach the workspace (POSIX ACLs): %v", driver.ErrUnavailable, u.Username, err)
		}
	case st != nil && st.Uid == 0:
		r.acl = true
		if err := grantTree(root, dir, cred.Uid); err != nil {
			return runAs{}, fmt.Errorf("%w: grant %s access to %s (POSIX ACLs; or pass -sandbox-user): %v", driver.ErrUnavailable, u.Username, dir, err)
		}
	default:
		// The owner's own directory, which it may still be unable to
		// reach through root's directories above it (a managed workspace
		// of an earlier run, reopened after a restart).
		if err := grantSearch(filepath.Dir(dir), cred.Uid); err != nil {
			return runAs{}, fmt.Errorf("%w: let %s reach %s (POSIX ACLs): %v", driver.ErrUnavailable, u.Username, dir, err)
		}
	}
	return r, nil
}

// env is what the command's environment says about its user.
func (r runAs) env() []string {
	if r.cred == nil {
		return nil
	}
	return []string{"HOME=" + r.home, "USER=" + r.name, "LOGNAME=" + r.name}
}

// other reports whether commands run as another user than the service's.
func (r runAs) other() bool { return r.cred != nil }

// apply makes cmd run as r.
func (r runAs) apply(cmd *exec.Cmd) {
	if r.cred != nil {
		cmd.SysProcAttr.Credential = r.cred
	}
}

// adopt makes rel, which the service just created inside root, usable by
// r's user, as if its commands had made it. It works through root, so a
// link a command swapped in cannot send it outside the workspace.
func (r runAs) adopt(root *os.Root, rel string) error {
	if r.cred == nil {
		return nil
	}
	if r.acl {
		return grantRel(root, rel, r.cred.Uid)
	}
	err := root.Lchown(rel, int(r.cred.Uid), int(r.cred.Gid))
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	return err
}
