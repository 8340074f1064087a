package checkpoint

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// shell runs scripts with sh in a directory, as a local sandbox does.
type shell struct{ dir string }

func (s shell) Run(ctx context.Context, script string) ([]byte, []byte, int, error) {
	cmd := exec.CommandContext(ctx, "sh", "-c", script)
	cmd.Dir = s.dir
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	if ee, ok := errors.AsType[*exec.ExitError](err); ok {
		return out.Bytes(), errOut.Bytes(), ee.ExitCode(), nil
	}
	return out.Bytes(), errOut.Bytes(), 0, err
}

// tree is every file under dir but .git, with its content.
func tree(t *testing.T, dir string) map[string]string {
	t.Helper()
	files := map[string]string{}
	filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			t.Fatal(err)
		}
		if d.IsDir() && d.Name() == ".git" {
			return filepath.SkipDir
		}
		if !d.IsDir() {
			b, _ := os.ReadFile(p)
			rel, _ := filepath.Rel(dir, p)
			files[filepath.ToSlash(rel)] = string(b)
		}
		return nil
	})
	return files
}

func write(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for name, content := range files {
		p := filepath.Join(dir, name)
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func newStore(t *testing.T) (*Store, string) {
	ws := t.TempDir()
	return New(shell{ws}, filepath.Join(t.TempDir(), "checkpoints.git")), ws
}

// TestRewind: the changes of turns that edit a file, write a new one,
// remove one with the shell and apply a patch (several files at once) are
// each checkpointed, diffed and restored, to any turn and back.
func TestRewind(t *testing.T) {
	ctx := t.Context()
	st, ws := newStore(t)
	write(t, ws, map[string]string{"a.txt": "one\n", "b.txt": "bee\n", "dir/c.txt": "sea\n", ".gitignore": "node_modules/\n", "node_modules/dep.js": "big\n"})
	// The workspace is a repository of its own: that one is not touched.
	if out, err := exec.Command("git", "-C", ws, "init", "-q").CombinedOutput(); err != nil {
		t.Fatalf("git init: %v %s", err, out)
	}
	states := []map[string]string{}
	record := func(turn int, wantOK bool) {
		t.Helper()
		_, ok, err := st.Record(ctx, turn)
		if err != nil || ok != wantOK {
			t.Fatalf("Record(%d) = %v, %v; want ok %v", turn, ok, err, wantOK)
		}
		if ok {
			states = append(states, tree(t, ws))
		}
	}
	record(0, true)
	record(1, false) // a turn that only read files
	// edit_file
	write(t, ws, map[string]string{"a.txt": "one, edited\n"})
	record(2, true)
	// write_file
	write(t, ws, map[string]string{"new.txt": "brand new\n"})
	record(3, true)
	// shell rm
	os.Remove(filepath.Join(ws, "b.txt"))
	record(4, true)
	// apply_patch: an update, an add and a delete in one turn
	write(t, ws, map[string]string{"dir/c.txt": "sea, patched\n", "dir/d.txt": "added\n"})
	os.Remove(filepath.Join(ws, "new.txt"))
	record(5, true)

	cps, err := st.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var turns []int
	for _, c := range cps {
		turns = append(turns, c.Turn)
	}
	if diff := cmp.Diff([]int{0, 2, 3, 4, 5}, turns); diff != "" {
		t.Errorf("checkpointed turns (-want +got):\n%s", diff)
	}
	d, err := st.Diff(ctx, 2)
	if err != nil || !strings.Contains(d, "-one\n+one, edited\n") || strings.Contains(d, "new.txt") {
		t.Errorf("Diff(2) = %v\n%s", err, d)
	}
	if d, _ := st.Diff(ctx, 5); !strings.Contains(d, "dir/d.txt") || !strings.Contains(d, "deleted file mode") {
		t.Errorf("Diff(5) lacks the patch's files:\n%s", d)
	}
	if d, _ := st.Diff(ctx, -1); strings.Contains(d, "node_modules") {
		t.Errorf("an ignored directory was checkpointed:\n%s", d)
	}
	for i, turn := range []int{3, 0, 4, 2, 5} {
		idx := slices.Index(turns, turn)
		if _, err := st.Restore(ctx, turn, false); err != nil {
			t.Fatalf("step %d: Restore(%d): %v", i, turn, err)
		}
		if diff := cmp.Diff(states[idx], tree(t, ws)); diff != "" {
			t.Errorf("after Restore(%d) (-want +got):\n%s", turn, diff)
		}
	}
	if _, err := st.Restore(ctx, 9, false); !errors.Is(err, ErrNotFound) {
		t.Errorf("Restore(9) = %v, want ErrNotFound", err)
	}
	if _, err := st.Diff(ctx, 1); !errors.Is(err, ErrNotFound) {
		t.Errorf("Diff(1) (no checkpoint) = %v, want ErrNotFound", err)
	}
	if out, _ := exec.Command("git", "-C", ws, "for-each-ref").CombinedOutput(); len(out) != 0 {
		t.Errorf("the workspace's own repository got refs:\n%s", out)
	}
}

// TestRestoreRefusesUserChanges: a file someone changed after the agent's
// last turn is not overwritten without force, and the refusal names it;
// a change the restore does not touch survives even a forced restore.
func TestRestoreRefusesUserChanges(t *testing.T) {
	ctx := t.Context()
	st, ws := newStore(t)
	write(t, ws, map[string]string{"a.txt": "one\n", "u.txt": "user's\n"})
	st.Record(ctx, 0)
	write(t, ws, map[string]string{"a.txt": "agent\n", "gone.txt": "agent made it\n"})
	st.Record(ctx, 1)
	// The user edits a file the agent changed, adds one where the agent
	// made one, and edits one the agent never touched.
	write(t, ws, map[string]string{"a.txt": "the user's fix\n", "u.txt": "user's, edited\n"})
	os.WriteFile(filepath.Join(ws, "gone.txt"), []byte("the user's now\n"), 0o644)
	_, err := st.Restore(ctx, 0, false)
	var uc *UserChangesError
	if !errors.As(err, &uc) {
		t.Fatalf("Restore over user changes = %v, want a UserChangesError", err)
	}
	sort.Strings(uc.Files)
	if diff := cmp.Diff([]string{"a.txt", "gone.txt"}, uc.Files); diff != "" {
		t.Errorf("refused files (-want +got):\n%s", diff)
	}
	want := map[string]string{"a.txt": "the user's fix\n", "gone.txt": "the user's now\n", "u.txt": "user's, edited\n"}
	if diff := cmp.Diff(want, tree(t, ws)); diff != "" {
		t.Errorf("a refused restore changed files (-want +got):\n%s", diff)
	}
	if _, err := st.Restore(ctx, 0, true); err != nil {
		t.Fatal(err)
	}
	want = map[string]string{"a.txt": "one\n", "u.txt": "user's, edited\n"}
	if diff := cmp.Diff(want, tree(t, ws)); diff != "" {
		t.Errorf("after the forced restore (-want +got):\n%s", diff)
	}
}

// BenchmarkRecord is a checkpoint's cost per turn on a 10,000-file
// workspace: unchanged (a turn that only read), one file edited, and the
// baseline, a turn's one sandbox command without a checkpoint (sh -c
// true), side by side.
func BenchmarkRecord(b *testing.B) {
	ws := b.TempDir()
	for i := range 10000 {
		p := filepath.Join(ws, "pkg"+string(rune('a'+i%20)), "sub"+string(rune('a'+i/20%25)), "f"+itoa(i)+".go")
		os.MkdirAll(filepath.Dir(p), 0o755)
		os.WriteFile(p, bytes.Repeat([]byte("package x // line\n"), 20), 0o644)
	}
	st := New(shell{ws}, filepath.Join(b.TempDir(), "cp.git"))
	ctx := context.Background()
	start := time.Now()
	if _, _, err := st.Record(ctx, 0); err != nil {
		b.Fatal(err)
	}
	b.Logf("first checkpoint of 10,000 files: %s", time.Since(start).Round(time.Millisecond))
	p50 := func(b *testing.B, f func(i int)) {
		// Wall time on a shared machine is mostly waiting for a core: the
		// CPU time of the git processes is reported beside it.
		var ds, cpu []time.Duration
		for i := 0; b.Loop(); i++ {
			c0 := childCPU()
			t0 := time.Now()
			f(i)
			ds = append(ds, time.Since(t0))
			cpu = append(cpu, childCPU()-c0)
		}
		slices.Sort(ds)
		slices.Sort(cpu)
		b.ReportMetric(float64(ds[len(ds)/2].Microseconds())/1000, "p50-ms")
		b.ReportMetric(float64(cpu[len(cpu)/2].Microseconds())/1000, "p50-cpu-ms")
	}
	b.Run("baseline-no-checkpoint", func(b *testing.B) {
		p50(b, func(int) { shell{ws}.Run(ctx, "true") })
	})
	b.Run("unchanged", func(b *testing.B) {
		p50(b, func(i int) { st.Record(ctx, 1) })
	})
	b.Run("one-file-edited", func(b *testing.B) {
		turn := 2
		p50(b, func(i int) {
			b.StopTimer()
			os.WriteFile(filepath.Join(ws, "pkga", "suba", "f0.go"), []byte("package x // "+itoa(i)+"\n"), 0o644)
			b.StartTimer()
			turn++
			if _, ok, err := st.Record(ctx, turn); err != nil || !ok {
				b.Fatal(ok, err)
			}
		})
	})
}

func itoa(i int) string { return strconv.Itoa(i) }

// TestRecordFiles: a checkpoint names the files its turn changed.
func TestRecordFiles(t *testing.T) {
	ctx := t.Context()
	st, ws := newStore(t)
	write(t, ws, map[string]string{"a.txt": "1", "b.txt": "2"})
	st.Record(ctx, 0)
	write(t, ws, map[string]string{"a.txt": "changed", "c d.txt": "new, with a space"})
	os.Remove(filepath.Join(ws, "b.txt"))
	cp, ok, err := st.Record(ctx, 1)
	if err != nil || !ok {
		t.Fatal(ok, err)
	}
	sort.Strings(cp.Files)
	if diff := cmp.Diff([]string{"a.txt", "b.txt", "c d.txt"}, cp.Files); diff != "" {
		t.Errorf("files (-want +got):\n%s", diff)
	}
}

// childCPU is the user and system time of the finished child processes.
func childCPU() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_CHILDREN, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
