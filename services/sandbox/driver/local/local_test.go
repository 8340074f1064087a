package local_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fabro-sh/fabro-go/sdk/sandbox/driver"
	"github.com/fabro-sh/fabro-go/sdk/sandbox/drivertest"
	"github.com/fabro-sh/fabro-go/services/sandbox/driver/local"
)

func newDriver(t *testing.T) driver.Driver {
	return local.New(local.Config{WorkspaceRoot: t.TempDir()})
}

func TestContract(t *testing.T) { drivertest.Run(t, newDriver) }

func TestEnvironmentIsAllowlisted(t *testing.T) {
	// As root, commands would get the sandbox user's HOME: keep the service's user here.
	d := local.New(local.Config{WorkspaceRoot: t.TempDir(), User: "root", Environ: []string{
		"PATH=" + os.Getenv("PATH"), "HOME=/home/someone", "OPENAI_API_KEY=sk-secret", "FABRO_VAULT_KEK=kek", "BASH_ENV=/tmp/evil",
	}})
	sb := drivertest.NewSandbox(t, d, driver.Spec{})
	got := drivertest.Sh(t, sb, "env")
	for _, bad := range []string{"sk-secret", "FABRO_VAULT_KEK", "BASH_ENV"} {
		if strings.Contains(got, bad) {
			t.Errorf("a command saw %s:\n%s", bad, got)
		}
	}
	if !strings.Contains(got, "HOME=/home/someone\n") {
		t.Errorf("HOME did not pass the allowlist:\n%s", got)
	}
}

func TestWorkspaces(t *testing.T) {
	base := t.TempDir()
	d := local.New(local.Config{WorkspaceRoot: base})
	ctx := t.Context()

	managed, err := d.Create(ctx, driver.Spec{})
	if err != nil {
		t.Fatal(err)
	}
	dir := managed.Info().WorkingDirectory
	if !managed.Info().ManagedWorkspace || !strings.HasPrefix(dir, base) && !strings.HasPrefix(dir, mustEval(t, base)) {
		t.Fatalf("managed workspace %q not under %q", dir, base)
	}
	for range 2 { // idempotent
		if err := managed.Delete(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("managed workspace left behind: %v", err)
	}

	designated := t.TempDir()
	os.WriteFile(filepath.Join(designated, "keep"), []byte("x"), 0o644)
	sb, err := d.Create(ctx, driver.Spec{WorkingDirectory: designated})
	if err != nil {
		t.Fatal(err)
	}
	if sb.Info().ManagedWorkspace {
		t.Error("a designated workspace reported as managed")
	}
	sb.Delete(ctx)
	if _, err := os.Stat(filepath.Join(designated, "keep")); err != nil {
		t.Errorf("designated workspace was removed: %v", err)
	}

	tests := []struct {
		name string
		d    driver.Driver
		spec driver.Spec
		want error
	}{
		{"missing designated dir", d, driver.Spec{WorkingDirectory: filepath.Join(base, "nope")}, driver.ErrNotFound},
		{"relative dir", d, driver.Spec{WorkingDirectory: "rel"}, driver.ErrInvalid},
		{"unknown option", d, driver.Spec{Options: map[string]string{"image": "x"}}, driver.ErrInvalid},
		{"no bash", local.New(local.Config{WorkspaceRoot: base, Environ: []string{"PATH=" + t.TempDir()}}), driver.Spec{}, driver.ErrBashMissing},
	}
	for _, tt := range tests {
		if _, err := tt.d.Create(ctx, tt.spec); !errors.Is(err, tt.want) {
			t.Errorf("%s: Create = %v; want %v", tt.name, err, tt.want)
		}
	}
}

func mustEval(t *testing.T, p string) string {
	r, err := filepath.EvalSymlinks(p)
	if err != nil {
		t.Fatal(err)
	}
	return r
}
