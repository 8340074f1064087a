package bwrap_test

import (
	"os/exec"
	"runtime"
	"syscall"
	"testing"

	"github.com/fabro-sh/fabro-go/sdk/sandbox/plugin/plugintest"
)

// TestConformance runs the whole contract suite against the plugin binary,
// through the host code the service uses.
func TestConformance(t *testing.T) {
	plugintest.Run(t, pluginBinary(t))
}

// TestConformanceUnderLoad runs the suite again with every CPU kept busy
// by twice as many spinning processes: it judges the plugin, not the
// machine's speed.
func TestConformanceUnderLoad(t *testing.T) {
	bin := pluginBinary(t)
	if testing.Short() {
		t.Skip("the suite under load takes a while")
	}
	for range 2 * runtime.NumCPU() {
		spin := exec.Command("sh", "-c", "while :; do :; done")
		spin.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		if err := spin.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { spin.Process.Kill(); spin.Wait() })
	}
	plugintest.Run(t, bin)
}
