package sandbox_test

import (
	"testing"

	"github.com/fabro-sh/fabro-go/sdk/sandbox/drivertest"
	"github.com/fabro-sh/fabro-go/sdk/sandbox/plugin/plugintest"
)

// TestPluginProcesses runs the processes case group through the plugin
// protocol (the Process stream) on the test plugin, which states the facet.
func TestPluginProcesses(t *testing.T) {
	drivertest.RunProcesses(t, plugintest.NewDriver(testPlugin(t)))
}
