package bwrap_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/fabro-sh/fabro-go/sdk/sandbox/plugin/plugintest"
	"github.com/fabro-sh/fabro-go/services/sandbox/driver/bwrap"
)

// binary is the plugin, built once for every test; "" when bwrap is not
// installed.
var binary string

func TestMain(m *testing.M) {
	os.Exit(func() int {
		if _, err := exec.LookPath("bwrap"); err == nil {
			dir, err := os.MkdirTemp("", "bwrap-plugin-")
			if err != nil {
				fmt.Fprintln(os.Stderr, err)
				return 1
			}
			defer os.RemoveAll(dir)
			binary = filepath.Join(dir, "fabro-sandbox-bwrap")
			if err := plugintest.BuildTo(context.Background(), "../../cmd/fabro-sandbox-bwrap", binary); err != nil {
				fmt.Fprintln(os.Stderr, err)
				return 1
			}
			// The small init beside it, as make plugins installs it.
			if err := plugintest.BuildTo(context.Background(), "../../cmd/fabro-bwrap-init", filepath.Join(dir, bwrap.InitName)); err != nil {
				fmt.Fprintln(os.Stderr, err)
				return 1
			}
		}
		return m.Run()
	}())
}

// pluginBinary is the plugin's path; the test skips, saying why, when
// bwrap is not installed.
func pluginBinary(t *testing.T) string {
	t.Helper()
	if binary == "" {
		t.Skip("bwrap is not installed: `make deps` installs Debian's bubblewrap")
	}
	return binary
}
