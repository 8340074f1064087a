package local

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/fabro-sh/fabro-go/sdk/sandbox/driver"
)

// The cgroup v2 path, on the unified hierarchy where the host mounts one
// beside v1 (ours has no controllers in it, so no limits, but commands are
// cloned into their cgroup and killed with cgroup.kill).
func TestCgroupV2(t *testing.T) {
	const unified = "/sys/fs/cgroup/unified"
	own := ownCgroups()[""]
	if _, err := os.Stat(unified + "/cgroup.procs"); err != nil || own == "" {
		t.Skip("no cgroup v2 hierarchy mounted at " + unified)
	}
	h := &cgroupHost{}
	inst, _ := instanceName(os.Getpid())
	if err := h.discoverV2(unified+own, inst); err != nil {
		t.Skipf("cgroup v2 is not writable here: %v", err)
	}
	d := New(Config{WorkspaceRoot: t.TempDir(), NoCgroups: true})
	d.cg = h
	sb, err := d.Create(t.Context(), driver.Spec{})
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Delete(t.Context())
	run := func(cmd string) string {
		res, err := sb.Exec(t.Context(), driver.ExecSpec{Command: cmd, Timeout: 30 * time.Second, RetainLimit: 1 << 12}, nil)
		if err != nil {
			t.Fatal(err)
		}
		return string(res.Stdout)
	}
	if got := run("cat /proc/self/cgroup"); !strings.Contains(got, "0::"+strings.TrimSuffix(own, "/")+"/"+cgroupBase+"/"+inst+"/") {
		t.Errorf("the command ran in %q; want its own cgroup below %s", got, cgroupBase)
	}
	for range 20 {
		pid := strings.TrimSpace(run("(env -i setsid sleep 300 </dev/null >/dev/null 2>&1 & echo $!)"))
		if b, err := os.ReadFile("/proc/" + pid + "/stat"); err == nil {
			if f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:])); len(f) > 0 && f[0] != "Z" {
				t.Fatalf("the daemon %s survived its command", pid)
			}
		}
	}
}
