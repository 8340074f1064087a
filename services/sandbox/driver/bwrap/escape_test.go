package bwrap_test

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fabro-sh/fabro-go/sdk/sandbox/driver"
	"github.com/fabro-sh/fabro-go/sdk/sandbox/drivertest"
	"github.com/fabro-sh/fabro-go/sdk/sandbox/plugin/plugintest"
	"github.com/fabro-sh/fabro-go/services/sandbox/internal/hostnet/hostnettest"
)

func run(t *testing.T, sb driver.Sandbox, command string) driver.ExecResult {
	t.Helper()
	res, err := sb.Exec(t.Context(), driver.ExecSpec{Command: command, Timeout: 20 * time.Second, RetainLimit: 1 << 16}, nil)
	if err != nil {
		t.Fatalf("Exec(%q): %v", command, err)
	}
	return res
}

func failed(res driver.ExecResult) bool { return res.ExitCode == nil || *res.ExitCode != 0 }

// TestEscapes tries, from inside a bwrap sandbox reached through the
// plugin, what a hostile command would; each attempt must fail. Each also
// checks the attempt would have worked without the sandbox's walls, so the
// test can fail.
func TestEscapes(t *testing.T) {
	d := plugintest.NewDriver(pluginBinary(t))(t)
	sb := drivertest.NewSandbox(t, d, driver.Spec{})
	secret := "s3cret-" + rand.Text()

	t.Run("the service's data directory", func(t *testing.T) {
		// A data directory outside /tmp, as the service's is.
		dataDir, err := os.MkdirTemp(mustWD(t), ".escape-data-")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.RemoveAll(dataDir) })
		f := filepath.Join(dataDir, "vault.key")
		if err := os.WriteFile(f, []byte(secret), 0o600); err != nil {
			t.Fatalf("the plant failed: %v", err)
		}
		if b, err := os.ReadFile(f); err != nil || string(b) != secret {
			t.Fatalf("the plant is not readable on the host: %v", err)
		}
		res := run(t, sb, "cat "+f+"; ls "+dataDir)
		if !failed(res) || strings.Contains(string(res.Stdout), secret) {
			t.Errorf("the data directory is readable: %q", res.Stdout)
		}
	})

	t.Run("the kernel's sysrq trigger and memory", func(t *testing.T) {
		// An unknown sysrq key does nothing but log, should the mask fail.
		for _, attack := range []string{"printf '?' > /proc/sysrq-trigger", "test $(head -c 16 /proc/kcore | wc -c) -gt 0"} {
			if res := run(t, sb, attack); !failed(res) {
				t.Errorf("%s succeeded inside bwrap", attack)
			}
		}
	})

	t.Run("another workspace", func(t *testing.T) {
		other := drivertest.NewSandbox(t, d, driver.Spec{})
		if _, err := other.WriteFile(t.Context(), "secret.txt", []byte(secret)); err != nil {
			t.Fatal(err)
		}
		p := other.Info().RootDirectory + "/secret.txt"
		if b, err := os.ReadFile(p); err != nil || string(b) != secret {
			t.Fatalf("the other workspace's file is not at %s on the host: %v", p, err)
		}
		res := run(t, sb, "cat "+p+"; ls "+other.Info().RootDirectory)
		if !failed(res) || strings.Contains(string(res.Stdout), secret) {
			t.Errorf("another workspace is readable: %q", res.Stdout)
		}
	})

	t.Run("the host's /root", func(t *testing.T) {
		f := "/root/.fabro-escape-test-" + rand.Text()
		if err := os.WriteFile(f, []byte(secret), 0o600); err != nil {
			t.Skipf("cannot plant a file in /root: %v", err)
		}
		t.Cleanup(func() { os.Remove(f) })
		res := run(t, sb, "cat "+f+"; ls -a /root")
		if !failed(res) || strings.Contains(string(res.Stdout), secret) || strings.Contains(string(res.Stdout), ".fabro-escape-test") {
			t.Errorf("/root is visible: %q", res.Stdout)
		}
	})

	t.Run("signalling a host process", func(t *testing.T) {
		host := exec.Command("sleep", "60")
		if err := host.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { host.Process.Kill(); host.Wait() })
		pid := host.Process.Pid
		res := run(t, sb, fmt.Sprintf("kill -9 %d; kill -9 -1; ls /proc/%d", pid, pid))
		if !failed(res) {
			t.Errorf("the host's pid %d is visible inside: %q", pid, res.Stdout)
		}
		// The kill(2) inside returned before the command did, so a
		// delivered SIGKILL would have made the process a zombie by now.
		stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil || syscall.Kill(pid, 0) != nil {
			t.Fatalf("the host process is gone: %v", err)
		}
		if f := strings.Fields(string(stat)); len(f) < 3 || f[2] == "Z" {
			t.Errorf("the host process was killed: %s", stat)
		}
	})

	t.Run("the host's loopback", func(t *testing.T) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		port := ln.Addr().(*net.TCPAddr).Port
		accepted := make(chan struct{}, 8)
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				c.Close()
				accepted <- struct{}{}
			}
		}()
		// The listener answers on the host: only the wall can stop a
		// command reaching it.
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		c.Close()
		<-accepted
		open := drivertest.NewSandbox(t, d, driver.Spec{Limits: driver.Limits{Network: driver.NetworkAllow}})
		for _, tt := range []struct {
			name string
			sb   driver.Sandbox
			addr string
		}{
			{"network none", sb, "127.0.0.1"},
			{"network allowed", open, "127.0.0.1"},
			// slirp4netns's address for the host, which reaches the host's
			// loopback unless --disable-host-loopback.
			{"network allowed, the gateway", open, "10.0.2.2"},
		} {
			connect := fmt.Sprintf("exec 3<>/dev/tcp/%s/%d && echo connected", tt.addr, port)
			if res := run(t, tt.sb, connect); !failed(res) || strings.Contains(string(res.Stdout), "connected") {
				t.Errorf("%s: a command reached %s:%d on the host: %q", tt.name, tt.addr, port, res.Stdout)
			}
		}
		select {
		case <-accepted:
			t.Error("the host's listener accepted a connection from a sandbox")
		default:
		}
		// Allowed is not none: the command has an interface and a route
		// out (10.0.2.2 is the gateway), which none has not.
		for _, tt := range []struct {
			sb    driver.Sandbox
			route bool
		}{{open, true}, {sb, false}} {
			res := run(t, tt.sb, "cat /proc/net/route")
			if got := strings.Contains(string(res.Stdout), "tap0\t00000000\t0202000A"); got != tt.route {
				t.Errorf("default route via 10.0.2.2 on tap0: %v, want %v: %q", got, tt.route, res.Stdout)
			}
		}
	})

	t.Run("the host's other addresses", func(t *testing.T) {
		// A service bound to every address (fabro serve -listen :PORT)
		// answers on the host's own addresses, which slirp4netns would
		// forward to like any other.
		open := drivertest.NewSandbox(t, d, driver.Spec{Limits: driver.Limits{Network: driver.NetworkAllow}})
		hostnettest.NoHostServices(t, func(cmd string) string { return string(run(t, open, cmd).Stdout) })
	})

	t.Run("the host's sysctls", func(t *testing.T) {
		// Writing back the current value: harmless even if the wall failed.
		res := run(t, sb, "v=$(cat /proc/sys/vm/swappiness) && echo $v > /proc/sys/vm/swappiness && echo wrote")
		if !failed(res) || strings.Contains(string(res.Stdout), "wrote") {
			t.Errorf("a sysctl is writable from the sandbox: %q", res.Stdout)
		}
	})

	t.Run("the filesystem outside the workspace is read-only", func(t *testing.T) {
		res := run(t, sb, "touch /usr/escape || touch /etc/escape")
		if !failed(res) {
			t.Error("a system directory is writable")
		}
		if _, err := os.Stat("/usr/escape"); err == nil {
			os.Remove("/usr/escape")
			t.Error("/usr/escape was created on the host")
		}
	})

	t.Run("limits not enforced are refused", func(t *testing.T) {
		caps := d.Capabilities().Limits
		for _, tt := range []struct {
			enforced bool
			limits   driver.Limits
		}{{caps.Memory, driver.Limits{MemoryBytes: 1 << 30}}, {caps.Processes, driver.Limits{Processes: 10}}, {caps.CPU, driver.Limits{CPU: 0.5}}} {
			if tt.enforced {
				continue
			}
			_, err := d.Create(t.Context(), driver.Spec{Limits: tt.limits})
			if !strings.Contains(fmt.Sprint(err), driver.ErrLimitUnsupported.Error()) {
				t.Errorf("Create(%+v) = %v; want ErrLimitUnsupported", tt.limits, err)
			}
			tt.limits.BestEffort = true
			sb, err := d.Create(t.Context(), driver.Spec{Limits: tt.limits})
			if err != nil {
				t.Errorf("Create(%+v, best effort) = %v", tt.limits, err)
				continue
			}
			sb.Delete(t.Context())
		}
	})
}

// TestLimits: the limits the plugin states it enforces are enforced, per
// command, and the result names the limit hit.
func TestLimits(t *testing.T) {
	d := plugintest.NewDriver(pluginBinary(t))(t)
	caps := d.Capabilities().Limits
	t.Logf("limits enforced on this host: %+v", caps)
	t.Run("memory", func(t *testing.T) {
		if !caps.Memory {
			t.Skip("the host gives no writable memory cgroup: the plugin states it does not enforce memory limits")
		}
		sb := drivertest.NewSandbox(t, d, driver.Spec{Limits: driver.Limits{MemoryBytes: 64 << 20}})
		// bash holds 200 MB in a variable: over the limit.
		res := run(t, sb, `x=$(head -c 200000000 /dev/zero | tr '\0' a); echo survived ${#x}`)
		if res.LimitHit != driver.LimitMemory || strings.Contains(string(res.Stdout), "survived") {
			t.Errorf("limit hit %d, stdout %q, signal %q; want the memory limit to kill it", res.LimitHit, res.Stdout, res.Signal)
		}
		if res := run(t, sb, "x=$(head -c 1000000 /dev/zero | tr '\\0' a); echo ${#x}"); res.LimitHit != driver.LimitNone || string(res.Stdout) != "1000000\n" {
			t.Errorf("a small command in the same sandbox: hit %d, %q %q", res.LimitHit, res.Stdout, res.Stderr)
		}
	})
	t.Run("disk", func(t *testing.T) {
		if !caps.Disk {
			t.Skip("the plugin cannot make disk images here (not root): it states it does not enforce disk limits")
		}
		sb := drivertest.DiskLimit(t, d, driver.Spec{Limits: driver.Limits{DiskBytes: 16 << 20}}, true)
		dir := sb.Info().RootDirectory
		// The image is mounted nosuid: a setuid plant in a workspace opened
		// up gives a host user nothing (as without a disk limit, where the
		// workspace is a nosuid bind mount: see TestNoRootOnTheHost).
		if res := run(t, sb, "cp /usr/bin/id ./suid && chmod 6755 ./suid && chmod 0755 . && stat -c %a suid"); failed(res) || string(res.Stdout) != "6755\n" {
			t.Fatalf("the plant failed: %q %q", res.Stdout, res.Stderr)
		}
		cmd := exec.Command(filepath.Join(dir, "suid"), "-u")
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534, Groups: []uint32{}}}
		if out, err := cmd.Output(); err != nil || strings.TrimSpace(string(out)) != "65534" {
			t.Errorf("nobody ran the planted setuid binary: euid %q, %v; want nobody's own 65534", out, err)
		}
		if err := sb.Delete(context.WithoutCancel(t.Context())); err != nil {
			t.Fatal(err)
		}
		if mi, _ := os.ReadFile("/proc/self/mountinfo"); strings.Contains(string(mi), " "+dir+" ") {
			t.Error("the workspace is still mounted after Delete")
		}
		if _, err := os.Stat(dir + ".disk.img"); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("the disk image is left after Delete: %v", err)
		}
	})
	t.Run("processes", func(t *testing.T) {
		if !caps.Processes {
			t.Skip("the host gives no writable pids cgroup: the plugin states it does not enforce process limits")
		}
		sb := drivertest.NewSandbox(t, d, driver.Spec{Limits: driver.Limits{Processes: 8}})
		res := run(t, sb, `seq 60 | xargs -P 60 -I{} sleep 0.2 2>/dev/null; echo started`)
		if res.LimitHit != driver.LimitProcesses {
			t.Errorf("limit hit %d (stdout %q); want the process limit", res.LimitHit, res.Stdout)
		}
		if res := run(t, sb, "for i in 1 2 3; do sleep 0.01 & done; wait; echo ok"); res.LimitHit != driver.LimitNone || string(res.Stdout) != "ok\n" {
			t.Errorf("three processes under a limit of 8: hit %d, %q %q", res.LimitHit, res.Stdout, res.Stderr)
		}
	})
	t.Run("cpu", func(t *testing.T) {
		if !caps.CPU {
			t.Skip("the host gives no writable cpu cgroup: the plugin states it does not enforce CPU limits")
		}
		sb := drivertest.NewSandbox(t, d, driver.Spec{Limits: driver.Limits{CPU: 0.1}})
		// A second of busy loop gets about a tenth of a second of CPU;
		// unlimited it would get nearly all of it.
		res := run(t, sb, `TIMEFORMAT=%U; { time timeout 1 bash -c 'while :; do :; done'; } 2>&1`)
		user, err := strconv.ParseFloat(strings.TrimSpace(string(res.Stdout)), 64)
		if err != nil || user > 0.5 {
			t.Errorf("a busy second used %q s of CPU under a limit of 0.1 core", res.Stdout)
		}
	})
}

func mustWD(t *testing.T) string {
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	return wd
}

// TestReopen: a bwrap workspace outlives its plugin process; a new plugin
// process re-adopts it from its spec and info (as the service does after
// a restart), and Delete then removes the managed workspace.
func TestReopen(t *testing.T) {
	ctx := t.Context()
	first := plugintest.NewDriver(pluginBinary(t))(t)
	sb, err := first.Create(ctx, driver.Spec{ID: "sbx-1"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sb.WriteFile(ctx, "kept.txt", []byte("still here")); err != nil {
		t.Fatal(err)
	}
	info := sb.Info()
	first.(interface{ Close() }).Close() // the plugin process goes, the workspace stays
	if err := sb.(driver.Checker).Check(ctx); !errors.Is(err, driver.ErrGone) {
		t.Errorf("Check after the plugin exited = %v; want ErrGone", err)
	}

	second := plugintest.NewDriver(pluginBinary(t))(t)
	re, err := second.(driver.Reopener).Reopen(ctx, driver.Spec{ID: "sbx-1"}, info)
	if err != nil {
		t.Fatal(err)
	}
	if re.Info() != info {
		t.Errorf("reopened info %+v; want %+v", re.Info(), info)
	}
	if res := run(t, re, "cat kept.txt"); string(res.Stdout) != "still here" {
		t.Errorf("the reopened sandbox reads %q", res.Stdout)
	}
	if err := re.(driver.Checker).Check(ctx); err != nil {
		t.Errorf("Check = %v", err)
	}
	if err := re.Delete(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(info.RootDirectory); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the managed workspace survived Delete: %v", err)
	}
	if _, err := second.(driver.Reopener).Reopen(ctx, driver.Spec{ID: "sbx-1"}, info); !errors.Is(err, driver.ErrGone) {
		t.Errorf("Reopen of a deleted workspace = %v; want ErrGone", err)
	}
}
