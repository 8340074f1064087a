package bwrap_test

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/fabro-sh/fabro-go/platform/testkit"
	"github.com/fabro-sh/fabro-go/sdk/sandbox/driver"
	"github.com/fabro-sh/fabro-go/sdk/sandbox/drivertest"
	"github.com/fabro-sh/fabro-go/sdk/sandbox/plugin"
	"github.com/fabro-sh/fabro-go/sdk/sandbox/plugin/plugintest"
	"github.com/fabro-sh/fabro-go/services/sandbox/driver/bwrap"
)

func requireRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("the plugin gives sandboxes their own uid only when it runs as root, as the service does")
	}
}

// TestNoRootOnTheHost: what a command creates is not root's on the host,
// and a setuid binary it plants grants nobody root.
func TestNoRootOnTheHost(t *testing.T) {
	requireRoot(t)
	d := plugintest.NewDriver(pluginBinary(t))(t)
	sb := drivertest.NewSandbox(t, d, driver.Spec{})
	ws := sb.Info().RootDirectory

	// The plant: a copy of id, setuid and setgid, in a workspace opened
	// up to everyone.
	res := run(t, sb, "cp /usr/bin/id ./suid && chmod 6755 ./suid && chmod 0755 . && id -u")
	if failed(res) {
		t.Fatalf("the plant failed: %q %q", res.Stdout, res.Stderr)
	}
	fi, err := os.Stat(filepath.Join(ws, "suid"))
	if err != nil {
		t.Fatalf("the plant is not on the host: %v", err)
	}
	if fi.Mode()&os.ModeSetuid == 0 {
		t.Fatalf("the plant has no setuid bit on the host (%v): the case proves nothing", fi.Mode())
	}
	st := fi.Sys().(*syscall.Stat_t)
	if st.Uid == 0 || st.Gid == 0 {
		t.Fatalf("the command's file is owned by %d:%d on the host; want neither root", st.Uid, st.Gid)
	}
	if inside := strings.TrimSpace(string(res.Stdout)); inside != fmt.Sprint(st.Uid) {
		t.Errorf("the command is uid %s inside, its files %d outside: want one uid", inside, st.Uid)
	}
	if st.Uid < bwrap.DefaultUIDBase || st.Uid >= bwrap.DefaultUIDBase+bwrap.DefaultUIDCount {
		t.Errorf("the sandbox's uid %d is outside the sandbox range", st.Uid)
	}

	// The workspace, without a disk image, is still a mount of its own
	// flagged nosuid on the host: the setuid bit grants nothing there.
	var sfs syscall.Statfs_t
	if err := syscall.Statfs(ws, &sfs); err != nil {
		t.Fatal(err)
	}
	if sfs.Flags&unix.ST_NOSUID == 0 || sfs.Flags&unix.ST_NODEV == 0 {
		t.Errorf("the workspace is not mounted nosuid,nodev on the host (statfs flags %#x)", sfs.Flags)
	}

	// Run by another host user, and by root: each keeps its own euid (the
	// plant's owner's is never taken).
	for _, tt := range []struct {
		name string
		cred *syscall.Credential
		euid string
	}{
		{"nobody", &syscall.Credential{Uid: 65534, Gid: 65534, Groups: []uint32{}}, "65534"},
		{"root", nil, "0"},
	} {
		cmd := exec.Command(filepath.Join(ws, "suid"), "-u")
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: tt.cred}
		out, err := cmd.Output()
		if err != nil {
			t.Logf("%s cannot run the plant: %v", tt.name, err)
			continue
		}
		if euid := strings.TrimSpace(string(out)); euid != tt.euid {
			t.Errorf("%s ran the planted setuid binary (owner %d) and got euid %s; want its own %s", tt.name, st.Uid, euid, tt.euid)
		}
	}

	// Files the service writes for the sandbox are the sandbox's, so its
	// commands may change them.
	if _, err := sb.WriteFile(t.Context(), "by-rpc/f.txt", []byte("x")); err != nil {
		t.Fatal(err)
	}
	if res := run(t, sb, "echo y >> by-rpc/f.txt && touch by-rpc/g && cat by-rpc/f.txt"); failed(res) || string(res.Stdout) != "xy\n" {
		t.Errorf("a command cannot change what WriteFile made: %q %q", res.Stdout, res.Stderr)
	}
	// And what the command keeps from itself, the service's file
	// operations cannot read either.
	if res := run(t, sb, "echo private > mine && chmod 000 mine"); failed(res) {
		t.Fatalf("%q", res.Stderr)
	}
	if rc, _, err := sb.Open(t.Context(), "mine", 0); err == nil {
		rc.Close()
		t.Error("Open read a file its sandbox made unreadable: it acted with more privilege than the command")
	}
}

// TestDescriptors: the command has stdin, stdout and stderr and nothing
// else, and cannot reach the init's control and status pipes.
func TestDescriptors(t *testing.T) {
	d := plugintest.NewDriver(pluginBinary(t))(t)
	sb := drivertest.NewSandbox(t, d, driver.Spec{})
	// The shell's own descriptors, as the kernel lists them, and what
	// writing to the init's status pipe does.
	res := run(t, sb, `ls /proc/$$/fd > /tmp/fds; echo $(cat /tmp/fds)
		{ echo 'exit 0' > /proc/1/fd/4; } 2>/dev/null && echo wrote-status
		{ echo 'exit 0' >&4; } 2>/dev/null && echo wrote-fd4
		ls /proc/1/fd >/dev/null 2>&1 && echo listed-init
		exit 7`)
	if res.ExitCode == nil || *res.ExitCode != 7 {
		t.Errorf("the result is not the command's own exit 7: %+v", res)
	}
	if got := string(res.Stdout); got != "0 1 2\n" {
		t.Errorf("the command's descriptors, and the init pipes it reached:\n%s (stderr %q); want 0 1 2 only", got, res.Stderr)
	}
}

// TestGrepRace: a command swapping a directory for a link to a root-only
// directory of the host while Grep runs never makes Grep read it.
func TestGrepRace(t *testing.T) {
	d := plugintest.NewDriver(pluginBinary(t))(t)
	sb := drivertest.NewSandbox(t, d, driver.Spec{})
	marker := "MARK" + rand.Text()
	secretDir, err := os.MkdirTemp(mustWD(t), ".grep-secret-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(secretDir) })
	if err := os.WriteFile(filepath.Join(secretDir, "admin.token"), []byte(marker+" outside\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(secretDir, "admin.token")); err != nil || !strings.Contains(string(b), marker) {
		t.Fatalf("the plant failed: %v", err)
	}
	if res := run(t, sb, "command -v python3"); failed(res) {
		t.Fatal("no python3 in the sandbox for the swapper (make deps installs it)")
	}
	const dirs = 16
	for i := range dirs {
		if _, err := sb.WriteFile(t.Context(), fmt.Sprintf("d%d/inside.txt", i), []byte(marker+" inside\n")); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithCancel(t.Context())
	swapped := make(chan struct{})
	go func() {
		defer close(swapped)
		// Each directory in turn becomes a link to the secret and back,
		// by rename: a search that checked it was a directory and then
		// opens it by name follows the link.
		sb.Exec(ctx, driver.ExecSpec{Timeout: time.Minute, RetainLimit: 1 << 10, Command: fmt.Sprintf(`python3 -c '
import os
n, secret = %d, %q
for i in range(n):
    os.symlink(secret, "l%%d" %% i)
while True:
    for i in range(n):
        os.rename("d%%d" %% i, "r%%d" %% i); os.rename("l%%d" %% i, "d%%d" %% i)
    for i in range(n):
        os.rename("d%%d" %% i, "l%%d" %% i); os.rename("r%%d" %% i, "d%%d" %% i)
'`, dirs, secretDir)}, nil)
	}()
	defer func() { cancel(); <-swapped }()
	var inside, outside int
	for range 200 {
		res, err := sb.Grep(t.Context(), driver.GrepOptions{Pattern: marker, MaxResults: 10})
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range res.Matches {
			if strings.Contains(m.Text, "outside") {
				outside++
			} else {
				inside++
			}
		}
	}
	if ents, err := sb.ListDir(t.Context(), ".", 1); err != nil || !slices.ContainsFunc(ents, func(fi driver.FileInfo) bool {
		return strings.HasPrefix(fi.Path, "l") || strings.HasPrefix(fi.Path, "r")
	}) {
		t.Fatalf("the swapper is not running (%v): the race proved nothing", err)
	}
	if outside > 0 {
		t.Errorf("Grep read %d lines outside the sandbox in 200 calls", outside)
	}
	if inside == 0 {
		t.Error("Grep never found the line inside: the race proved nothing")
	}
}

// TestTmpBounded: /tmp is a tmpfs of the configured size, not half the
// host's memory.
func TestTmpBounded(t *testing.T) {
	d := plugintest.NewDriver(pluginBinary(t))(t)
	sb := drivertest.NewSandbox(t, d, driver.Spec{})
	res := run(t, sb, fmt.Sprintf("head -c %d /dev/zero > /tmp/small && echo small-ok; head -c %d /dev/zero > /tmp/big || echo big-refused",
		1<<20, bwrap.DefaultTmpBytes+(1<<20)))
	if got := string(res.Stdout); got != "small-ok\nbig-refused\n" {
		t.Errorf("writes to /tmp: %q %q; want the small one to pass and the one past %d bytes refused", got, res.Stderr, bwrap.DefaultTmpBytes)
	}
}

// TestConcurrentExecs: 100 Execs at once on one plugin are each served or
// refused up front with RESOURCE_EXHAUSTED; the plugin keeps passing its
// health check (a sandbox made before still works) and serves again.
func TestConcurrentExecs(t *testing.T) {
	bin := pluginBinary(t)
	sum, err := plugin.FileSHA256(bin)
	if err != nil {
		t.Fatal(err)
	}
	pd := plugin.New(plugin.Config{Name: "bwrap", Path: bin, SHA256: sum, Logger: slog.New(slog.DiscardHandler),
		HealthInterval: 100 * time.Millisecond, HealthTimeout: time.Second})
	t.Cleanup(pd.Close)
	sb := drivertest.NewSandbox(t, pd, driver.Spec{})
	var (
		wg                  sync.WaitGroup
		mu                  sync.Mutex
		ok, refused, others int
		firstOther          error
	)
	for range 100 {
		wg.Go(func() {
			res, err := sb.Exec(t.Context(), driver.ExecSpec{Command: "sleep 0.3; echo ok", Timeout: time.Minute, RetainLimit: 1 << 10}, nil)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil && string(res.Stdout) == "ok\n":
				ok++
			case status.Code(err) == codes.ResourceExhausted:
				refused++
			default:
				others++
				if firstOther == nil {
					firstOther = fmt.Errorf("%v %+v", err, res)
				}
			}
		})
	}
	wg.Wait()
	t.Logf("100 concurrent Execs: %d served, %d refused up front", ok, refused)
	if others > 0 {
		t.Errorf("%d Execs neither served nor refused up front; first: %v", others, firstOther)
	}
	if ok < bwrap.DefaultMaxExecs/2 {
		t.Errorf("only %d served", ok)
	}
	if res := run(t, sb, "echo still"); string(res.Stdout) != "still\n" {
		t.Errorf("after the storm: %q", res.Stdout)
	}
	if err := sb.(driver.Checker).Check(t.Context()); errors.Is(err, driver.ErrGone) {
		t.Errorf("the plugin was restarted during the storm: %v", err)
	}
}

// TestPluginKilled: a plugin killed with SIGKILL mid-command takes every
// process it started with it, and leaves no zombie under the service
// (this test process, a child subreaper as the service is).
func TestPluginKilled(t *testing.T) {
	bin := pluginBinary(t)
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		t.Fatal(err)
	}
	sum, err := plugin.FileSHA256(bin)
	if err != nil {
		t.Fatal(err)
	}
	pd := plugin.New(plugin.Config{Name: "bwrap", Path: bin, SHA256: sum, Logger: slog.New(slog.DiscardHandler), HealthInterval: -1})
	t.Cleanup(pd.Close)
	sb := drivertest.NewSandbox(t, pd, driver.Spec{Limits: driver.Limits{Network: driver.NetworkAllow}})
	pid := pluginPID(t, bin)
	for range 3 {
		go sb.Exec(t.Context(), driver.ExecSpec{Command: "sleep 60", Timeout: time.Minute, RetainLimit: 1 << 10}, nil)
	}
	// The plant: the plugin's bwraps (and slirp4netns) are running.
	testkit.Eventually(t, 20*time.Second, func() error {
		if s := session(pid); len(s) < 6 {
			return fmt.Errorf("3 bwraps and their slirp4netns do not run in the plugin's session: %q", s)
		}
		return nil
	})
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 20*time.Second, func() error {
		if s := session(pid); len(s) > 0 {
			return fmt.Errorf("the killed plugin left survivors or zombies (pid state): %q", s)
		}
		return nil
	})
}

// pluginPID is the pid of this process's child running bin.
func pluginPID(t *testing.T, bin string) int {
	t.Helper()
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid)); err == nil && exe == bin && ppid(pid) == os.Getpid() {
			return pid
		}
	}
	t.Fatal("the plugin process is not a child of the test")
	return 0
}

func ppid(pid int) int {
	f := statFields(pid)
	if len(f) < 2 {
		return 0
	}
	n, _ := strconv.Atoi(f[1])
	return n
}

// statFields are /proc/pid/stat's fields after the command name.
func statFields(pid int) []string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return nil
	}
	return strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
}

// session lists the processes, zombies included, of session sid but its
// leader, as "pid state command".
func session(sid int) []string {
	var out []string
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == sid {
			continue
		}
		if f := statFields(pid); len(f) > 3 && f[3] == strconv.Itoa(sid) {
			out = append(out, fmt.Sprint(pid, " ", f[0]))
		}
	}
	return out
}

// TestWorkspacesNotInASharedDirectory: managed workspaces (and their disk
// images, and the init's copy) are made in a directory no other user can
// create names in: in the shared /tmp a local sandbox's command planted
// <workspace>.disk.img between the mkdir and the mount.
func TestWorkspacesNotInASharedDirectory(t *testing.T) {
	requireRoot(t)
	d := plugintest.NewDriver(pluginBinary(t))(t)
	sb := drivertest.NewSandbox(t, d, driver.Spec{})
	parent := filepath.Dir(sb.Info().RootDirectory)
	fi, err := os.Stat(parent)
	if err != nil {
		t.Fatal(err)
	}
	if st := fi.Sys().(*syscall.Stat_t); st.Uid != 0 || fi.Mode().Perm()&0o022 != 0 {
		t.Errorf("the workspaces' directory %s is %v, uid %d: others can create names in it", parent, fi.Mode(), st.Uid)
	}
}
