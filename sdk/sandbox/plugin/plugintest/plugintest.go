// Package plugintest is the conformance kit for sandbox driver plugins: it
// runs the drivertest contract suite against a plugin binary, through the
// same host code the sandbox service uses. A plugin's own test is:
//
//	func TestConformance(t *testing.T) {
//		plugintest.Run(t, plugintest.Build(t, "."))
//	}
//
// Parts the plugin's stated capabilities rule out are skipped, and say so
// in the verbose test output (go test -v); the fabro CLI's
// `fabro sandbox conformance ./my-plugin` runs the same suite and prints a
// summary.
package plugintest

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/fabro-sh/fabro-go/sdk/sandbox/driver"
	"github.com/fabro-sh/fabro-go/sdk/sandbox/drivertest"
	"github.com/fabro-sh/fabro-go/sdk/sandbox/plugin"
)

// Run runs the contract suite against the plugin binary at path. Each part
// of the suite gets a plugin process of its own.
func Run(t *testing.T, path string, env ...string) {
	t.Helper()
	drivertest.Run(t, NewDriver(path, env...))
}

// NewDriver returns the drivertest factory for the plugin binary at path:
// a host-side plugin driver, closed when the test ends, whose plugin gets
// env as its environment.
func NewDriver(path string, env ...string) func(t *testing.T) driver.Driver {
	return func(t *testing.T) driver.Driver {
		t.Helper()
		sum, err := plugin.FileSHA256(path)
		if err != nil {
			t.Fatalf("plugin binary: %v", err)
		}
		d := plugin.New(plugin.Config{
			Name: filepath.Base(path), Path: path, SHA256: sum, Env: env,
			// Warnings and errors only: the plugin's lines may come after
			// the test ends, so they go to stderr rather than t.Log.
			Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
		})
		t.Cleanup(d.Close)
		if err := d.Available(t.Context()); err != nil {
			t.Fatalf("the plugin is not available: %v", err)
		}
		return d
	}
}

// Build builds the Go main package in dir, as its own module (GOWORK=off,
// as a third party builds it), into the test's temporary directory, and
// returns the binary's path.
func Build(t *testing.T, dir string) string {
	t.Helper()
	abs, err := filepath.Abs(dir)
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), filepath.Base(abs))
	if err := BuildTo(t.Context(), dir, out); err != nil {
		t.Fatal(err)
	}
	return out
}

// BuildTo builds the Go main package in dir into out, GOWORK=off; for a
// TestMain that builds a plugin once for many tests.
func BuildTo(ctx context.Context, dir, out string) error {
	cmd := exec.CommandContext(ctx, "go", "build", "-o", out, ".")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOWORK=off")
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build in %s: %v\n%s", dir, err, b)
	}
	return nil
}
