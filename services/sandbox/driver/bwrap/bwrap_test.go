package bwrap_test

import (
	"os/exec"
	"runtime"
	"syscall"
	"testing"

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
