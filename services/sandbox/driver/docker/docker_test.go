package docker_test

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fabro-sh/fabro-go/sdk/sandbox/driver"
	"github.com/fabro-sh/fabro-go/sdk/sandbox/drivertest"
	"github.com/fabro-sh/fabro-go/services/sandbox/driver/docker"
	"github.com/fabro-sh/fabro-go/services/sandbox/internal/hostnet/hostnettest"
)

// newDriver returns a driver on the engine of this machine, whose
// containers carry an owner of the test's own.
func newDriver(t *testing.T) *docker.Driver {
	t.Helper()
	return newDriverAt(t, t.TempDir(), "fabro-test-"+t.Name())
}

func newDriverAt(t *testing.T, root, owner string) *docker.Driver {
	t.Helper()
	d := docker.New(docker.Config{WorkspaceRoot: root, Owner: owner})
	t.Cleanup(func() { d.Close() })
	if err := d.Available(t.Context()); err != nil {
		t.Fatalf("the Docker engine is needed (make test builds its image): %v", err)
	}
	return d
}

func TestContract(t *testing.T) {
	drivertest.Run(t, func(t *testing.T) driver.Driver { return newDriver(t) })
}

func sh(t *testing.T, sb driver.Sandbox, command string) driver.ExecResult {
	t.Helper()
	res, err := sb.Exec(t.Context(), driver.ExecSpec{Command: command, Timeout: 30 * time.Second, RetainLimit: 1 << 16}, nil)
	if err != nil {
		t.Fatalf("Exec(%q): %v", command, err)
	}
	return res
}

func inspect(t *testing.T, name, format string) string {
	t.Helper()
	out, err := exec.Command("docker", "inspect", "-f", format, name).CombinedOutput()
	if err != nil {
		t.Fatalf("docker inspect %s: %v: %s", name, err, out)
	}
	return strings.TrimSpace(string(out))
}

// TestHardened checks the container's safe defaults, as the engine reports
// them and as a command inside sees them.
func TestHardened(t *testing.T) {
	d := newDriver(t)
	sb := drivertest.NewSandbox(t, d, driver.Spec{ID: "hard-" + suffix(), Labels: map[string]string{"run": "r1"}})
	c := containerOf(t, sb)
	checks := map[string]string{
		"{{.Config.User}}":                               "1000:1000",
		"{{.HostConfig.Privileged}}":                     "false",
		"{{.HostConfig.ReadonlyRootfs}}":                 "true",
		"{{.HostConfig.NetworkMode}}":                    "none",
		"{{json .HostConfig.CapDrop}}":                   `["ALL"]`,
		"{{json .HostConfig.CapAdd}}":                    "null",
		"{{json .HostConfig.SecurityOpt}}":               `["no-new-privileges"]`,
		`{{index .Config.Labels "dev.fabro.label.run"}}`: "r1",
	}
	for f, want := range checks {
		if got := inspect(t, c, f); got != want {
			t.Errorf("%s = %s; want %s", f, got, want)
		}
	}
	if mounts := inspect(t, c, "{{json .Mounts}}"); strings.Contains(mounts, "docker.sock") || strings.Count(mounts, `"Source"`) != 1 {
		t.Errorf("mounts %s; want the workspace alone", mounts)
	}
	res := sh(t, sb, `id -u; grep -E '^(CapEff|NoNewPrivs)' /proc/self/status | tr -s '\t ' ' '; touch /etc/x 2>/dev/null && echo rootfs-writable; touch /tmp/x && echo tmp-ok; ls /sys/class/net`)
	want := "1000\nCapEff: 0000000000000000\nNoNewPrivs: 1\ntmp-ok\nlo\n"
	if string(res.Stdout) != want {
		t.Errorf("inside the container:\n%s\nwant:\n%s", res.Stdout, want)
	}
	// Files the service writes belong to the container's user.
	if _, err := sb.WriteFile(t.Context(), "dir/f.txt", []byte("x")); err != nil {
		t.Fatal(err)
	}
	if res := sh(t, sb, "echo more >> dir/f.txt && touch dir/g && stat -c %u dir dir/f.txt"); string(res.Stdout) != "1000\n1000\n" {
		t.Errorf("the container user cannot change what WriteFile made: %q %q", res.Stdout, res.Stderr)
	}
}

// containerOf finds the container of sb by the driver's labels.
func containerOf(t *testing.T, sb driver.Sandbox) string {
	t.Helper()
	out, err := exec.Command("docker", "ps", "-aq", "--filter", "label="+docker.LabelOwner+"=fabro-test-"+t.Name()).Output()
	if err != nil || len(strings.Fields(string(out))) != 1 {
		t.Fatalf("containers of the test: %q, %v; want one", out, err)
	}
	return strings.TrimSpace(string(out))
}

var seq int

func suffix() string {
	seq++
	return strings.ReplaceAll(time.Now().Format("150405.000000"), ".", "") + string(rune('a'+seq%26))
}

func TestLimits(t *testing.T) {
	d := newDriver(t)
	ctx := t.Context()
	t.Run("memory", func(t *testing.T) {
		sb := drivertest.NewSandbox(t, d, driver.Spec{ID: "mem-" + suffix(), Limits: driver.Limits{MemoryBytes: 64 << 20}})
		res := sh(t, sb, `perl -e '$x = "a" x (400 * 1024 * 1024); print "survived\n"'`)
		if res.LimitHit != driver.LimitMemory || strings.Contains(string(res.Stdout), "survived") {
			t.Errorf("a 400 MiB hog under 64 MiB: limit %v, exit %v signal %q stdout %q; want the memory limit hit", res.LimitHit, res.ExitCode, res.Signal, res.Stdout)
		}
		if res := sh(t, sb, "echo still here"); string(res.Stdout) != "still here\n" || res.LimitHit != driver.LimitNone {
			t.Errorf("after the hog: %q, limit %v", res.Stdout, res.LimitHit)
		}
	})
	t.Run("disk", func(t *testing.T) {
		root := t.TempDir()
		d := newDriverAt(t, root, "fabro-test-"+t.Name())
		if !d.Capabilities().Limits.Disk {
			t.Skip("the driver states no disk limit here (not root, or the engine is not on this host)")
		}
		sb := drivertest.DiskLimit(t, d, driver.Spec{ID: "disk-" + suffix(), Limits: driver.Limits{DiskBytes: 16 << 20}}, true)
		// Nothing else in the container is writable: the rootfs is
		// read-only.
		if res := sh(t, sb, "echo x > /usr/x; echo x > /var/x; echo x > /x; echo done"); string(res.Stdout) != "done\n" || strings.Count(string(res.Stderr), "Read-only file system") != 3 {
			t.Errorf("writes outside the workspace and /tmp: %q %q; want each refused read-only", res.Stdout, res.Stderr)
		}
		if err := sb.Delete(context.WithoutCancel(ctx)); err != nil {
			t.Fatal(err)
		}
		left, _ := os.ReadDir(root)
		if mi, _ := os.ReadFile("/proc/self/mountinfo"); len(left) != 0 || strings.Contains(string(mi), root+"/") {
			t.Errorf("Delete left %v or a mount under %s", left, root)
		}
	})
	t.Run("processes", func(t *testing.T) {
		sb := drivertest.NewSandbox(t, d, driver.Spec{ID: "pids-" + suffix(), Limits: driver.Limits{Processes: 40}})
		// A bounded storm: 200 sleepers at most, against a limit of 40.
		res, err := sb.Exec(ctx, driver.ExecSpec{Command: `for i in $(seq 200); do sleep 30 2>/dev/null & done 2>/dev/null; echo spawned`, Timeout: 5 * time.Second, RetainLimit: 1 << 12}, nil)
		if err != nil {
			t.Fatal(err)
		}
		if res.LimitHit != driver.LimitProcesses {
			t.Errorf("200 processes under a limit of 40: limit %v, %s exit %v", res.LimitHit, res.Stdout, res.ExitCode)
		}
		// Left: the container's init, and the wrapper, bash, ls and grep of this.
		if res := sh(t, sb, "ls /proc | grep -c '^[0-9]'"); strings.TrimSpace(string(res.Stdout)) != "5" {
			t.Errorf("%s processes after the storm; want 5", res.Stdout)
		}
		if res := sh(t, sb, "echo fine"); string(res.Stdout) != "fine\n" {
			t.Errorf("after the storm: %q %q", res.Stdout, res.Stderr)
		}
	})
	t.Run("cpu", func(t *testing.T) {
		sb := drivertest.NewSandbox(t, d, driver.Spec{ID: "cpu-" + suffix(), Limits: driver.Limits{CPU: 0.5}})
		// Half a core is the kernel's CFS quota on the container; a
		// spinner runs under it and ends by its timeout. (Whether it was
		// throttled depends on the machine's load, so it is not asserted.)
		res := sh(t, sb, `cat /sys/fs/cgroup/cpu/cpu.cfs_quota_us /sys/fs/cgroup/cpu/cpu.cfs_period_us; timeout 1 bash -c 'while :; do :; done'; echo $?`)
		if got := strings.Fields(string(res.Stdout)); !slices.Equal(got, []string{"50000", "100000", "124"}) {
			t.Errorf("quota, period, spinner's end: %q; want 50000 100000 124", res.Stdout)
		}
	})
	t.Run("network", func(t *testing.T) {
		none := drivertest.NewSandbox(t, d, driver.Spec{ID: "netn-" + suffix(), Limits: driver.Limits{Network: driver.NetworkNone}})
		if res := sh(t, none, `ls /sys/class/net; (exec 3<>/dev/tcp/1.1.1.1/53) 2>&1 | grep -q unreachable && echo unreachable`); string(res.Stdout) != "lo\nunreachable\n" {
			t.Errorf("network none: %q", res.Stdout)
		}
		allow := drivertest.NewSandbox(t, d, driver.Spec{ID: "neta-" + suffix(), Limits: driver.Limits{Network: driver.NetworkAllow}})
		if res := sh(t, allow, `ls /sys/class/net | grep -c eth`); string(res.Stdout) != "1\n" {
			t.Errorf("network allowed: %q; want an eth interface", res.Stdout)
		}
		if os.Geteuid() == 0 { // blocked only by a root service
			hostnettest.NoHostServices(t, func(cmd string) string { return string(sh(t, allow, cmd).Stdout) })
			noNeighbour(t, allow, drivertest.NewSandbox(t, d, driver.Spec{ID: "netb-" + suffix(), Limits: driver.Limits{Network: driver.NetworkAllow}}))
			// An address the host gains after the sandbox started is
			// routed away before the next command (TEST-NET-2, on lo).
			const gained = "198.51.100.19/32"
			if out, err := exec.Command("ip", "addr", "add", gained, "dev", "lo").CombinedOutput(); err != nil {
				t.Fatalf("the plant: ip addr add %s: %v %s", gained, err, out)
			}
			defer exec.Command("ip", "addr", "del", gained, "dev", "lo").Run()
			hostnettest.NoHostServices(t, func(cmd string) string { return string(sh(t, allow, cmd).Stdout) })
		}
	})
}

// noNeighbour: a sandbox on the same bridge does not reach another's
// listening port, which that one reaches on its own address (the plant).
func noNeighbour(t *testing.T, from, to driver.Sandbox) {
	t.Helper()
	ip := strings.TrimSpace(string(sh(t, to, "hostname -i").Stdout))
	listener := make(chan string, 1)
	go func() {
		res, err := to.Exec(t.Context(), driver.ExecSpec{Timeout: time.Minute, RetainLimit: 1 << 16, Command: `perl -MIO::Socket::INET -e '
			$s = IO::Socket::INET->new(LocalAddr => "0.0.0.0", LocalPort => 3000, Listen => 5, ReuseAddr => 1) or die "listen: $!";
			$| = 1; $SIG{ALRM} = sub { exit 0 }; alarm 8;
			while ($c = $s->accept) { print "ACCEPT-FROM ", $c->peerhost, "\n"; close $c }' &
			for i in $(seq 50); do (exec 3<>/dev/tcp/` + ip + `/3000) 2>/dev/null && break; sleep 0.1; done; wait`}, nil)
		if err != nil {
			listener <- err.Error()
			return
		}
		listener <- string(res.Stdout) + string(res.Stderr)
	}()
	res := sh(t, from, "for i in $(seq 50); do (exec 3<>/dev/tcp/"+ip+"/3000) 2>/dev/null && echo connected && break; sleep 0.1; done")
	out := <-listener
	if !strings.Contains(out, "ACCEPT-FROM "+ip) {
		t.Fatalf("the plant: the listener did not accept its own sandbox's connection: %q", out)
	}
	if strings.Contains(string(res.Stdout), "connected") || strings.Count(out, "ACCEPT-FROM") > 1 {
		t.Errorf("a sandbox reached another's port on the bridge: %q; the listener: %q", res.Stdout, out)
	}
}

func TestBadInput(t *testing.T) {
	d := newDriver(t)
	ctx := t.Context()
	tests := []struct {
		name string
		spec driver.Spec
		want error
	}{
		{"missing image", driver.Spec{Options: map[string]string{"image": "fabro/no-such-image:never"}}, driver.ErrImageMissing},
		{"unknown option", driver.Spec{Options: map[string]string{"privileged": "true"}}, driver.ErrInvalid},
		{"relative host_dir", driver.Spec{Options: map[string]string{"host_dir": "rel"}}, driver.ErrInvalid},
		{"missing host_dir", driver.Spec{Options: map[string]string{"host_dir": "/no/such/dir"}}, driver.ErrNotFound},
		{"working directory /", driver.Spec{WorkingDirectory: "/"}, driver.ErrInvalid},
		{"working directory /proc", driver.Spec{WorkingDirectory: "/proc/x"}, driver.ErrInvalid},
		{"bad id", driver.Spec{ID: "../x"}, driver.ErrInvalid},
	}
	for _, tt := range tests {
		sb, err := d.Create(ctx, tt.spec)
		if !errors.Is(err, tt.want) {
			t.Errorf("%s: %v; want %v", tt.name, err, tt.want)
		}
		if sb != nil {
			sb.Delete(ctx)
		}
	}
	if _, err := d.Create(ctx, driver.Spec{Options: map[string]string{"image": "fabro/no-such-image:never"}}); err == nil || !strings.Contains(err.Error(), "fabro/no-such-image:never") || !strings.Contains(err.Error(), "make sandbox-base") {
		t.Errorf("missing image: %v; want the image named and how to build one", err)
	}

	t.Setenv("DOCKER_HOST", "unix:///nonexistent/docker.sock")
	down := docker.New(docker.Config{WorkspaceRoot: t.TempDir()})
	defer down.Close()
	if err := down.Available(ctx); !errors.Is(err, driver.ErrUnavailable) || !strings.Contains(err.Error(), "/nonexistent/docker.sock") {
		t.Errorf("Available with no engine = %v; want ErrUnavailable naming the engine", err)
	}
	if _, err := down.Create(ctx, driver.Spec{}); !errors.Is(err, driver.ErrUnavailable) {
		t.Errorf("Create with no engine = %v; want ErrUnavailable", err)
	}
}

// TestReopenAndSweep plays a restart: a new driver with the same owner
// re-adopts a container by its labels and finds its files; one removed
// behind its back is gone; Sweep removes what no registry names.
func TestReopenAndSweep(t *testing.T) {
	root, owner := t.TempDir(), "fabro-test-"+t.Name()
	first := newDriverAt(t, root, owner)
	ctx := t.Context()
	keep := driver.Spec{ID: "keep-" + suffix()}
	kept, err := first.Create(ctx, keep)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { kept.Delete(context.WithoutCancel(ctx)) })
	if _, err := kept.WriteFile(ctx, "state.txt", []byte("before")); err != nil {
		t.Fatal(err)
	}
	orphan, err := first.Create(ctx, driver.Spec{ID: "orphan-" + suffix()})
	if err != nil {
		t.Fatal(err)
	}
	_ = orphan
	vanish := driver.Spec{ID: "vanish-" + suffix()}
	vanished, err := first.Create(ctx, vanish)
	if err != nil {
		t.Fatal(err)
	}

	second := newDriverAt(t, root, owner)
	re, err := second.Reopen(ctx, keep, kept.Info())
	if err != nil {
		t.Fatalf("Reopen: %v", err)
	}
	if res := sh(t, re, "cat state.txt"); string(res.Stdout) != "before" {
		t.Errorf("after reopening: %q", res.Stdout)
	}
	if out, err := exec.Command("docker", "rm", "-f", "fabro-"+vanish.ID).CombinedOutput(); err != nil {
		t.Fatalf("docker rm: %v %s", err, out)
	}
	if err := vanished.(driver.Checker).Check(ctx); !errors.Is(err, driver.ErrGone) || !strings.Contains(err.Error(), "removed") {
		t.Errorf("Check after docker rm = %v; want ErrGone saying it was removed", err)
	}
	if _, err := second.Reopen(ctx, vanish, vanished.Info()); !errors.Is(err, driver.ErrGone) {
		t.Errorf("Reopen of a removed container = %v; want ErrGone", err)
	}
	removed, err := second.Sweep(ctx, func(id string) bool { return id == keep.ID })
	if err != nil {
		t.Fatal(err)
	}
	if len(removed) != 1 || !strings.HasPrefix(removed[0], "orphan-") {
		t.Errorf("Sweep removed %v; want the orphan alone", removed)
	}
	if ents, _ := os.ReadDir(root); len(ents) != 1 {
		t.Errorf("workspaces left after the sweep: %v; want the kept one", ents)
	}
	if res := sh(t, re, "echo alive"); string(res.Stdout) != "alive\n" {
		t.Errorf("the kept sandbox after the sweep: %q", res.Stdout)
	}
}

// TestHelperOrphan is not a test: run by TestSweepDead as a child process,
// it makes a sandbox and exits without deleting it, as a crashed service.
func TestHelperOrphan(t *testing.T) {
	owner := os.Getenv("FABRO_DOCKER_ORPHAN_OWNER")
	if owner == "" {
		t.Skip("a helper of TestSweepDead")
	}
	d := docker.New(docker.Config{WorkspaceRoot: os.Getenv("FABRO_DOCKER_ORPHAN_ROOT"), Owner: owner})
	sb, err := d.Create(t.Context(), driver.Spec{ID: "orphan-" + suffix()})
	if err != nil {
		t.Fatal(err)
	}
	os.Stdout.WriteString("orphan-at " + sb.Info().WorkingDirectory + "\n")
	os.Exit(0)
}

// TestSweepDead checks that containers whose making process died are
// removed by a service without a registry, and a live one's are not.
func TestSweepDead(t *testing.T) {
	root, owner := t.TempDir(), "fabro-test-"+t.Name()
	d := newDriverAt(t, root, owner)
	live := drivertest.NewSandbox(t, d, driver.Spec{ID: "live-" + suffix()})
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperOrphan$")
	cmd.Env = append(os.Environ(), "FABRO_DOCKER_ORPHAN_OWNER="+owner, "FABRO_DOCKER_ORPHAN_ROOT="+root)
	if out, err := cmd.CombinedOutput(); err != nil || !strings.Contains(string(out), "orphan-at") {
		t.Fatalf("helper: %v\n%s", err, out)
	}
	removed, err := d.SweepDead(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if len(removed) != 1 || !strings.HasPrefix(removed[0], "orphan-") {
		t.Errorf("SweepDead removed %v; want the dead process's orphan alone", removed)
	}
	if res := sh(t, live, "echo alive"); string(res.Stdout) != "alive\n" {
		t.Errorf("the live sandbox after the sweep: %q", res.Stdout)
	}
	if ents, _ := os.ReadDir(root); len(ents) != 1 {
		t.Errorf("workspaces after the sweep: %v; want the live one alone", ents)
	}
}
