package local_test

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/fabro-sh/fabro-go/sdk/sandbox/driver"
	"github.com/fabro-sh/fabro-go/sdk/sandbox/drivertest"
	"github.com/fabro-sh/fabro-go/services/sandbox/driver/local"
)

// TestClaimWorkspaceRoot checks the start-up sweep: workspaces a previous
// run left are removed (read-only directories inside included), anything
// else in the root is kept, and a root held by a live process is left
// alone.
func TestClaimWorkspaceRoot(t *testing.T) {
	root := filepath.Join(t.TempDir(), "workspaces")
	// A previous run: two managed workspaces, one with a read-only
	// directory in it, as `go mod download` leaves.
	prev := local.New(local.Config{WorkspaceRoot: root})
	var orphans []string
	for range 2 {
		sb, err := prev.Create(t.Context(), driver.Spec{})
		if err != nil {
			t.Fatal(err)
		}
		orphans = append(orphans, sb.Info().RootDirectory)
		drivertest.Sh(t, sb, "mkdir -p mod/cache && echo x > mod/cache/f && chmod -R a-w mod")
		// Not deleted: the process "crashed".
	}
	os.WriteFile(filepath.Join(root, "notes.txt"), []byte("keep"), 0o644)
	os.Mkdir(filepath.Join(root, "other"), 0o755)

	lock, removed, err := local.ClaimWorkspaceRoot(root)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Release()
	slices.Sort(removed)
	want := slices.Clone(orphans)
	for i := range want {
		want[i] = filepath.Join(root, filepath.Base(want[i]))
	}
	slices.Sort(want)
	if !slices.Equal(removed, want) {
		t.Errorf("removed %q; want %q", removed, want)
	}
	for _, o := range orphans {
		if _, err := os.Stat(o); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("orphan %s left: %v", o, err)
		}
	}
	for _, keep := range []string{"notes.txt", "other"} {
		if _, err := os.Stat(filepath.Join(root, keep)); err != nil {
			t.Errorf("%s was removed: %v", keep, err)
		}
	}

	// A live workspace of the lock holder survives a second claimant.
	live, err := local.New(local.Config{WorkspaceRoot: root}).Create(t.Context(), driver.Spec{})
	if err != nil {
		t.Fatal(err)
	}
	defer live.Delete(t.Context())
	if l2, removed, err := local.ClaimWorkspaceRoot(root); !errors.Is(err, local.ErrWorkspaceRootBusy) || l2 != nil || len(removed) > 0 {
		t.Errorf("second claim = %v, %v, %v; want ErrWorkspaceRootBusy and nothing removed", l2, removed, err)
	}
	if _, err := os.Stat(live.Info().RootDirectory); err != nil {
		t.Errorf("a live workspace was removed: %v", err)
	}
	// Once released, the root can be claimed again.
	lock.Release()
	l3, _, err := local.ClaimWorkspaceRoot(root)
	if err != nil {
		t.Fatalf("claim after release: %v", err)
	}
	l3.Release()
}

// TestDeleteReadOnlyWorkspace checks that Delete removes a managed
// workspace even when a command left read-only directories in it.
func TestDeleteReadOnlyWorkspace(t *testing.T) {
	d := local.New(local.Config{WorkspaceRoot: t.TempDir()})
	sb, err := d.Create(t.Context(), driver.Spec{})
	if err != nil {
		t.Fatal(err)
	}
	drivertest.Sh(t, sb, "mkdir -p a/b && echo x > a/b/f && chmod 500 a/b && chmod 000 a")
	if err := sb.Delete(t.Context()); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(sb.Info().RootDirectory); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("workspace left: %v", err)
	}
}
