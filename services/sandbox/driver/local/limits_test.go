package local_test

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fabro-sh/fabro-go/sdk/sandbox/driver"
	"github.com/fabro-sh/fabro-go/sdk/sandbox/drivertest"
	"github.com/fabro-sh/fabro-go/services/sandbox/driver/local"
)

// needCgroups skips where the host gives the service no cgroups, as the
// driver's capabilities then say; our machines and CI have them.
func needCgroups(t testing.TB) *local.Driver {
	d := local.New(local.Config{WorkspaceRoot: t.TempDir()})
	if ok, why := d.CgroupStatus(); !ok {
		t.Skipf("the host gives no per-command cgroups: %s", why)
	}
	return d
}

func run(t *testing.T, sb driver.Sandbox, command string, timeout time.Duration) driver.ExecResult {
	t.Helper()
	res, err := sb.Exec(t.Context(), driver.ExecSpec{Command: command, Timeout: timeout, RetainLimit: 1 << 16}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

func TestLimitsStated(t *testing.T) {
	d := local.New(local.Config{WorkspaceRoot: t.TempDir()})
	caps := d.Capabilities().Limits
	if ok, why := d.CgroupStatus(); !ok {
		if caps != (driver.LimitSupport{Disk: caps.Disk}) {
			t.Errorf("no cgroups (%s), yet the capabilities state %+v", why, caps)
		}
	} else if !caps.Processes {
		t.Errorf("per-command cgroups, yet no process limit stated: %+v", caps)
	}
	if caps.NetworkNone {
		t.Error("the local driver cannot cut commands off the network, yet states it")
	}
	off := local.New(local.Config{WorkspaceRoot: t.TempDir(), NoCgroups: true})
	if got := off.Capabilities().Limits; got != (driver.LimitSupport{Disk: got.Disk}) {
		t.Errorf("NoCgroups states limits %+v", got)
	}
	for _, l := range []driver.Limits{{MemoryBytes: 1 << 30}, {Processes: 10}, {CPU: 1}, {Network: driver.NetworkNone}} {
		if _, err := off.Create(t.Context(), driver.Spec{Limits: l}); !errors.Is(err, driver.ErrLimitUnsupported) {
			t.Errorf("NoCgroups, limits %+v: %v; want ErrLimitUnsupported", l, err)
		}
		l.BestEffort = true
		sb, err := off.Create(t.Context(), driver.Spec{Limits: l})
		if err != nil {
			t.Errorf("NoCgroups, best-effort limits %+v: %v", l, err)
			continue
		}
		sb.Delete(t.Context())
	}
}

func TestMemoryLimit(t *testing.T) {
	d := needCgroups(t)
	sb := drivertest.NewSandbox(t, d, driver.Spec{Limits: driver.Limits{MemoryBytes: 64 << 20}})
	// tail keeps a line with no newline whole in memory: 512 MiB of it.
	res := run(t, sb, "head -c 512m /dev/zero | tail >/dev/null; echo after", 60*time.Second)
	if res.LimitHit != driver.LimitMemory {
		t.Errorf("LimitHit %v; want memory (stdout %q, stderr %q)", res.LimitHit, res.Stdout, res.Stderr)
	}
	// The sandbox (and the service) stay usable.
	if got := drivertest.Sh(t, sb, "echo ok"); got != "ok\n" {
		t.Errorf("after the OOM kill: %q", got)
	}
	if res := run(t, sb, "head -c 8m /dev/zero | tail -c 1 | wc -c", 30*time.Second); res.LimitHit != driver.LimitNone || string(res.Stdout) != "1\n" {
		t.Errorf("within the limit: hit %v, stdout %q", res.LimitHit, res.Stdout)
	}
}

func TestProcessLimit(t *testing.T) {
	d := needCgroups(t)
	const limit = 40
	sb := drivertest.NewSandbox(t, d, driver.Spec{Limits: driver.Limits{Processes: limit}})
	// A storm of 300 sleeps: forks past the limit fail (bash retries
	// them until the timeout).
	// sleep 30.0471: no other test's sleeps (packages run in parallel).
	res := run(t, sb, `for i in $(seq 300); do sleep 30.0471 & done; wait`, 3*time.Second)
	if res.LimitHit != driver.LimitProcesses {
		t.Errorf("LimitHit %v; want processes (%s)", res.LimitHit, res.Stderr)
	}
	// Nothing of the storm survives, and the sandbox is usable again.
	if got := drivertest.Sh(t, sb, `ps -eo args | grep -c '^sleep 30.0471$'; ps -eo pid,ppid,pgid,stat,args | grep '[s]leep 30.0471$'; for p in $(pgrep -f '^sleep 30.0471$'); do cat /proc/$p/cgroup | tr '\n' ' '; done`); !strings.HasPrefix(got, "0\n") {
		t.Errorf("%s sleeps of the storm survived", got)
	}
	if res := run(t, sb, "echo ok", 10*time.Second); res.LimitHit != driver.LimitNone || string(res.Stdout) != "ok\n" {
		t.Errorf("after the storm: hit %v, stdout %q", res.LimitHit, res.Stdout)
	}
}

func TestCPULimit(t *testing.T) {
	d := needCgroups(t)
	if !d.Capabilities().Limits.CPU {
		t.Skip("the host's cpu controller is not writable: no CPU limit stated")
	}
	sb := drivertest.NewSandbox(t, d, driver.Spec{Limits: driver.Limits{CPU: 0.1}})
	// Spin for a second of wall time, then read the throttling count of
	// the command's own cpu cgroup.
	res := run(t, sb, `end=$((SECONDS+2)); while [ $SECONDS -lt $end ]; do :; done
		cat "/sys/fs/cgroup/cpu$(grep -E '^[0-9]+:([^:]*,)?cpu(,[^:]*)?:' /proc/self/cgroup | cut -d: -f3)/cpu.stat"`, 30*time.Second)
	stats := map[string]int64{}
	for line := range strings.SplitSeq(string(res.Stdout), "\n") {
		if k, v, ok := strings.Cut(line, " "); ok {
			stats[k], _ = strconv.ParseInt(v, 10, 64)
		}
	}
	if stats["nr_throttled"] == 0 {
		t.Errorf("the spinner was never throttled: %q (stderr %q)", res.Stdout, res.Stderr)
	}
}

// The double-forked daemon that the sweep used to miss about once in three
// runs: with cgroups, and without (the sweep alone), it never survives.
func TestDoubleForkNeverSurvives(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  local.Config
	}{{"cgroups", local.Config{}}, {"no cgroups", local.Config{NoCgroups: true}}} {
		t.Run(tc.name, func(t *testing.T) {
			tc.cfg.WorkspaceRoot = t.TempDir()
			d := local.New(tc.cfg)
			if ok, why := d.CgroupStatus(); tc.name == "cgroups" && !ok {
				t.Skip(why)
			}
			sb := drivertest.NewSandbox(t, d, driver.Spec{})
			const rounds = 60
			var wg sync.WaitGroup
			var mu sync.Mutex
			var survived []string
			for i := range rounds {
				cmd := "(setsid sleep 300 </dev/null >/dev/null 2>&1 & echo $!)"
				if i%2 == 1 && tc.name == "cgroups" {
					// Only a cgroup catches a daemon that cleared its
					// environment and left the group before any snapshot.
					cmd = "(env -i setsid sleep 300 & echo $!)"
				}
				wg.Go(func() {
					res, err := sb.Exec(t.Context(), driver.ExecSpec{Command: cmd, Timeout: 30 * time.Second, RetainLimit: 1 << 10}, nil)
					if err != nil {
						t.Error(err)
						return
					}
					pid := strings.TrimSpace(string(res.Stdout))
					// Exec has returned: the daemon must be dead already
					// (a zombie at most, waiting to be reaped).
					b, err := os.ReadFile("/proc/" + pid + "/stat")
					if err == nil {
						if f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:])); len(f) > 0 && f[0] != "Z" {
							mu.Lock()
							survived = append(survived, fmt.Sprintf("%s (%s)", pid, cmd))
							mu.Unlock()
						}
					}
				})
				if i%4 == 3 {
					wg.Wait()
				}
			}
			wg.Wait()
			if len(survived) > 0 {
				t.Errorf("%d of %d daemons survived their command: %v", len(survived), rounds, survived)
			}
		})
	}
}

// BenchmarkExecTrue measures what a per-command cgroup costs an exec of
// `true`, against the same exec without one, in the same run.
func BenchmarkExecTrue(b *testing.B) {
	with := local.New(local.Config{WorkspaceRoot: b.TempDir()})
	if ok, why := with.CgroupStatus(); !ok {
		b.Skip(why)
	}
	without := local.New(local.Config{WorkspaceRoot: b.TempDir(), NoCgroups: true})
	limited := local.New(local.Config{WorkspaceRoot: b.TempDir()})
	create := func(d driver.Driver, spec driver.Spec) driver.Sandbox {
		sb, err := d.Create(b.Context(), spec)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { sb.Delete(b.Context()) })
		return sb
	}
	sbWith := create(with, driver.Spec{})
	sbWithout := create(without, driver.Spec{})
	sbLimited := create(limited, driver.Spec{Limits: driver.Limits{MemoryBytes: 1 << 30, Processes: 100, CPU: 1}})
	spec := driver.ExecSpec{Command: "true", Timeout: 10 * time.Second, RetainLimit: 1 << 10}
	var per [3]time.Duration
	b.ResetTimer()
	for range b.N {
		for i, sb := range []driver.Sandbox{sbWithout, sbWith, sbLimited} {
			start := time.Now()
			if _, err := sb.Exec(b.Context(), spec, nil); err != nil {
				b.Fatal(err)
			}
			per[i] += time.Since(start)
		}
	}
	b.ReportMetric(float64(per[0].Microseconds())/float64(b.N), "us/exec-no-cgroup")
	b.ReportMetric(float64(per[1].Microseconds())/float64(b.N), "us/exec-cgroup")
	b.ReportMetric(float64(per[2].Microseconds())/float64(b.N), "us/exec-cgroup-limits")
	b.ReportMetric(float64(per[1])/float64(per[0]), "cgroup/no-cgroup")
	b.ReportMetric(float64(per[2])/float64(per[0]), "limits/no-cgroup")
}
