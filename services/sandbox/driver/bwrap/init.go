package bwrap

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"

	"github.com/fabro-sh/fabro-go/sdk/sandbox/plugin"
	"github.com/fabro-sh/fabro-go/services/sandbox/driver/bwrap/sandboxinit"
)

// InitArg, as the first argument, makes the plugin binary the init of a
// sandbox's pid namespace: see [sandboxinit.Run].
const InitArg = sandboxinit.Arg

// InitName is the small init binary (cmd/fabro-bwrap-init) the plugin
// looks for beside its own executable: started for every command, it
// costs a few milliseconds where the 20 MB plugin re-run as the init costs
// twenty. Without it the plugin runs itself with [InitArg].
const InitName = "fabro-bwrap-init"

// Init is the sandbox's init: see [sandboxinit.Run].
func Init() { sandboxinit.Run() }

// defaultInit is the small init beside the executable, when it is there
// and writable by its owner alone (the executable's owner), else the
// executable itself.
func defaultInit() string {
	exe, err := os.Executable()
	if err != nil {
		return ""
	}
	small := filepath.Join(filepath.Dir(exe), InitName)
	efi, err1 := os.Stat(exe)
	sfi, err2 := os.Lstat(small)
	if err1 != nil || err2 != nil || !sfi.Mode().IsRegular() || sfi.Mode().Perm()&0o022 != 0 || sfi.Mode().Perm()&0o111 == 0 {
		return exe
	}
	est, ok1 := efi.Sys().(*syscall.Stat_t)
	sst, ok2 := sfi.Sys().(*syscall.Stat_t)
	if !ok1 || !ok2 || est.Uid != sst.Uid {
		return exe
	}
	return small
}

// reachableInit is the init binary as sandboxes can reach it: bwrap binds
// it as the sandbox's uid, which may be unable to reach the plugin's own
// path (a 0700 directory). Then a copy is kept, root's and read-only, in a
// directory of the workspace root named for its content, so restarts reuse
// it and a copy another user planted is never taken.
func (d *Driver) reachableInit(probe ident) (string, error) {
	if probe.as(func() error {
		f, err := os.Open(d.cfg.Init)
		if err == nil {
			f.Close()
		}
		return err
	}) == nil {
		return d.cfg.Init, nil
	}
	sum, err := plugin.FileSHA256(d.cfg.Init)
	if err != nil {
		return "", err
	}
	dir := filepath.Join(d.workspaceRoot(), ".fabro-bwrap-init-"+sum[:24])
	dst := filepath.Join(dir, "init")
	if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
		return "", err
	}
	if err := ownedByRoot(dir, true); err != nil {
		return "", err
	}
	if err := ownedByRoot(dst, false); err == nil {
		if got, err := plugin.FileSHA256(dst); err == nil && got == sum {
			return dst, nil
		}
	}
	src, err := os.Open(d.cfg.Init)
	if err != nil {
		return "", err
	}
	defer src.Close()
	tmp, err := os.CreateTemp(dir, ".init-")
	if err != nil {
		return "", err
	}
	defer os.Remove(tmp.Name())
	_, err = io.Copy(tmp, src)
	if err == nil {
		err = tmp.Chmod(0o555)
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), dst)
	}
	return dst, err
}

// ownedByRoot checks that p is root's, writable by nobody else, and a
// directory or a regular file as asked.
func ownedByRoot(p string, dir bool) error {
	fi, err := os.Lstat(p)
	if err != nil {
		return err
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok || st.Uid != 0 || fi.Mode().Perm()&0o022 != 0 || fi.IsDir() != dir || (!dir && !fi.Mode().IsRegular()) {
		return fmt.Errorf("%s is not root's alone (%v, uid %d): refusing it as the sandbox init", p, fi.Mode(), st.Uid)
	}
	return nil
}
