package checkpoint

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// noGitShell runs scripts where no git is on the PATH, as in a sandbox
// image without it.
type noGitShell struct{ dir string }

func (s noGitShell) Run(ctx context.Context, script string) ([]byte, []byte, int, error) {
	cmd := exec.CommandContext(ctx, "/bin/sh", "-c", script)
	cmd.Dir, cmd.Env = s.dir, []string{"PATH=" + s.dir}
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	if ee, ok := errors.AsType[*exec.ExitError](err); ok {
		return out.Bytes(), errOut.Bytes(), ee.ExitCode(), nil
	}
	return out.Bytes(), errOut.Bytes(), 0, err
}

// TestNoGit: a sandbox without git is ErrNoGit, which the agent reports
// once as checkpoints being unavailable.
func TestNoGit(t *testing.T) {
	s := New(noGitShell{t.TempDir()}, filepath.Join(t.TempDir(), "shadow"))
	if _, _, err := s.Record(t.Context(), 0); !errors.Is(err, ErrNoGit) {
		t.Fatalf("Record without git: %v, want ErrNoGit", err)
	}
}

// TestNoteRoundTrip: the note RecordNote keeps comes back from List.
func TestNoteRoundTrip(t *testing.T) {
	dir := t.TempDir()
	s := New(shell{dir}, filepath.Join(t.TempDir(), "shadow"))
	if _, _, err := s.RecordNote(t.Context(), 0, "history 0"); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "a.txt"), []byte("a\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, ok, err := s.RecordNote(t.Context(), 1, "history 4"); err != nil || !ok {
		t.Fatalf("RecordNote: %v %v", ok, err)
	}
	cps, err := s.List(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if len(cps) != 2 || cps[0].Note != "history 0" || cps[1].Note != "history 4" {
		t.Errorf("List = %+v", cps)
	}
}
