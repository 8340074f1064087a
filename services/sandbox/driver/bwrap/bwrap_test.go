package bwrap_test

import (
	"errors"
	"os/exec"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fabro-sh/fabro-go/sdk/sandbox/driver"
	"github.com/fabro-sh/fabro-go/sdk/sandbox/drivertest"
	"github.com/fabro-sh/fabro-go/sdk/sandbox/plugin/plugintest"
)

// TestConformance runs the whole contract suite against the plugin binary,
// through the host code the service uses.
func TestConformance(t *testing.T) {
	plugintest.Run(t, pluginBinary(t))
}

// TestConformanceUnderLoad runs the suite's Exec part (where its timing
// lies) again with every CPU kept busy by a spinning process: it judges
// the plugin, not the machine's speed.
func TestConformanceUnderLoad(t *testing.T) {
	bin := pluginBinary(t)
	if testing.Short() {
		t.Skip("the suite under load takes a while")
	}
	for range runtime.NumCPU() {
		spin := exec.Command("sh", "-c", "while :; do :; done")
		spin.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		if err := spin.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { spin.Process.Kill(); spin.Wait() })
	}
	drivertest.RunExec(t, plugintest.NewDriver(bin))
}

// TestTooLong: a command longer than exec takes, and a name longer than
// the filesystem takes, are the caller's error, not the plugin's.
func TestTooLong(t *testing.T) {
	d := plugintest.NewDriver(pluginBinary(t))(t)
	sb := drivertest.NewSandbox(t, d, driver.Spec{})
	if _, err := sb.Exec(t.Context(), driver.ExecSpec{Command: "true " + strings.Repeat("x", 256<<10), Timeout: time.Minute}, nil); !errors.Is(err, driver.ErrInvalid) {
		t.Errorf("Exec of a 256 KiB command: %v; want ErrInvalid", err)
	}
	if _, err := sb.WriteFile(t.Context(), strings.Repeat("x", 300), []byte("x")); !errors.Is(err, driver.ErrInvalid) {
		t.Errorf("WriteFile of a 300-byte name: %v; want ErrInvalid", err)
	}
	if _, _, err := sb.Open(t.Context(), strings.Repeat("x", 300), 0); !errors.Is(err, driver.ErrInvalid) {
		t.Errorf("Open of a 300-byte name: %v; want ErrInvalid", err)
	}
}
