package local

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/fabro-sh/fabro-go/sdk/sandbox/driver"
)

// A kill between an atomic write's create and its rename leaves the
// temporary file; the next Create on the workspace removes it, and only
// what belongs to a writer that is gone.
func TestCreateSweepsDeadWritersTemps(t *testing.T) {
	dead := exec.Command("true")
	if err := dead.Run(); err != nil {
		t.Fatal(err)
	}
	deadPID := strconv.Itoa(dead.Process.Pid) // reaped: no process has it (barring reuse)
	ws := t.TempDir()
	files := map[string]bool{ // name: kept by the sweep
		tempPrefix + deadPID + ".AAAAAAAA.BBBBBBBBBB-a.txt":                   false,
		"sub/deep/" + tempPrefix + deadPID + ".AAAAAAAA.CCCCCCCCCC-b.txt":     false,
		tempPrefix + strconv.Itoa(os.Getpid()) + ".OTHERINC.DDDDDDDDDD-c.txt": true, // a live pid: another writer
		tempName("d.txt"):       true, // this incarnation's own, in flight
		".a.txt.tmp-XXXXXXXXXX": true, // not ours
		tempPrefix + "garbage":  true,
		"a.txt":                 true,
	}
	for name := range files {
		p := filepath.Join(ws, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	sb, err := New(Config{}).Create(t.Context(), driver.Spec{WorkingDirectory: ws})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sb.Delete(t.Context()) })
	var want, got []string
	for name, kept := range files {
		if kept {
			want = append(want, name)
		}
		if _, err := os.Stat(filepath.Join(ws, name)); err == nil {
			got = append(got, name)
		}
	}
	slices.Sort(want)
	slices.Sort(got)
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("after Create, the workspace holds (-want +got):\n%s", d)
	}
	// A write leaves none of its own behind.
	if _, err := sb.WriteFile(t.Context(), "e.txt", []byte("e")); err != nil {
		t.Fatal(err)
	}
	left, _ := filepath.Glob(filepath.Join(ws, tempPrefix+incarnation+"*-e.txt"))
	if len(left) != 0 {
		t.Errorf("a write left %v", left)
	}
}
