package local_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/fabro-sh/fabro-go/sdk/sandbox/driver"
	"github.com/fabro-sh/fabro-go/sdk/sandbox/drivertest"
	"github.com/fabro-sh/fabro-go/services/sandbox/driver/local"
)

// TestPlantedSetuidRootGivesNothing: a root service whose commands run as
// root (User "root") lets a command plant a root-owned setuid binary in
// its workspace, which has no disk image. The workspace is a nosuid mount
// on the host, so another host user running the plant stays itself.
func TestPlantedSetuidRootGivesNothing(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("the nosuid mount is a root service's: commands of a service that is not root plant only its own uid")
	}
	root := t.TempDir()
	// nobody reaches the plant, as on a host.
	os.Chmod(filepath.Dir(root), 0o755)
	os.Chmod(root, 0o755)
	d := local.New(local.Config{WorkspaceRoot: root, User: "root", Nosuid: true})
	sb := drivertest.NewSandbox(t, d, driver.Spec{})
	ws := sb.Info().RootDirectory
	if got := drivertest.Sh(t, sb, "cp /usr/bin/id ./suid && chmod 6755 ./suid && chmod 0755 . && id -u"); got != "0\n" {
		t.Fatalf("the plant: the command is uid %q, want root", got)
	}
	fi, err := os.Stat(filepath.Join(ws, "suid"))
	if err != nil {
		t.Fatal(err)
	}
	// The plant is what the attacker wanted: root's, setuid.
	if st := fi.Sys().(*syscall.Stat_t); st.Uid != 0 || fi.Mode()&os.ModeSetuid == 0 {
		t.Fatalf("the plant is uid %d, mode %v: not a setuid root binary, the case proves nothing", st.Uid, fi.Mode())
	}
	var sfs syscall.Statfs_t
	if err := syscall.Statfs(ws, &sfs); err != nil {
		t.Fatal(err)
	}
	if sfs.Flags&unix.ST_NOSUID == 0 || sfs.Flags&unix.ST_NODEV == 0 {
		t.Errorf("the workspace is not mounted nosuid,nodev (statfs flags %#x)", sfs.Flags)
	}
	cmd := exec.Command(filepath.Join(ws, "suid"), "-u")
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534, Groups: []uint32{}}}
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("nobody cannot run the plant (the case proves nothing): %v", err)
	}
	if euid := strings.TrimSpace(string(out)); euid != "65534" {
		t.Errorf("nobody ran the planted setuid root binary and got euid %s", euid)
	}
	if err := sb.Delete(context.WithoutCancel(t.Context())); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(mountsNow(), " "+ws+" ") {
		t.Error("the workspace is still mounted after Delete")
	}
	if _, err := os.Stat(ws); !os.IsNotExist(err) {
		t.Errorf("the workspace is left after Delete: %v", err)
	}
}
