package local

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
)

// Services sharing a cgroup each keep to their own instance directory: the
// start of one kills and removes what a dead instance left, and leaves a
// live instance's commands, and directories it did not make, alone.
func TestDeadInstancesOnlyAreSwept(t *testing.T) {
	h := hostCgroups()
	if !h.enabled() || h.v2 != "" {
		t.Skipf("no cgroup v1 here: %s", h.reason)
	}
	// A process started for the test, in a new cgroup under parent/dir
	// of both the freezer and pids hierarchies.
	startIn := func(dir string) *exec.Cmd {
		t.Helper()
		cmd := exec.Command("sleep", "300")
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
		for ctrl, base := range h.v1 {
			if ctrl != "freezer" && ctrl != "pids" {
				continue
			}
			d := filepath.Join(filepath.Dir(base), dir, "cmd")
			if err := os.MkdirAll(d, 0o755); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { os.Remove(d); os.Remove(filepath.Dir(d)) })
			if err := writeFile(filepath.Join(d, "cgroup.procs"), strconv.Itoa(cmd.Process.Pid)); err != nil {
				t.Fatal(err)
			}
		}
		return cmd
	}
	// A dead instance: named for a process that has ended.
	ended := exec.Command("true")
	if err := ended.Start(); err != nil {
		t.Fatal(err)
	}
	deadName, ok := instanceName(ended.Process.Pid)
	if !ok {
		t.Fatal("no stat for the ended process")
	}
	ended.Wait()
	liveHolder := startIn("not-an-instance")
	liveName, _ := instanceName(liveHolder.Process.Pid)
	orphan, live := startIn(deadName), startIn(liveName)

	if n := h.sweepDead(); n != 1 {
		t.Errorf("sweepDead killed %d processes; want 1 (the dead instance's)", n)
	}
	if err := orphan.Wait(); err == nil {
		t.Error("the dead instance's command was not killed")
	}
	for _, ctrl := range []string{"freezer", "pids"} {
		if _, err := os.Stat(filepath.Join(filepath.Dir(h.v1[ctrl]), deadName)); !os.IsNotExist(err) {
			t.Errorf("%s: the dead instance's directory is left: %v", ctrl, err)
		}
		for _, keep := range []string{liveName, "not-an-instance"} {
			if _, err := os.Stat(filepath.Join(filepath.Dir(h.v1[ctrl]), keep, "cmd")); err != nil {
				t.Errorf("%s: %s was removed: %v", ctrl, keep, err)
			}
		}
	}
	for _, c := range []*exec.Cmd{live, liveHolder} {
		if st, ok := readStat(c.Process.Pid); !ok || st.state == 'Z' {
			t.Errorf("process %d of a live instance or another program was killed", c.Process.Pid)
		}
	}
}
