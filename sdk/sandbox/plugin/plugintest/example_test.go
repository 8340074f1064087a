package plugintest_test

import (
	"testing"

	"github.com/fabro-sh/fabro-go/sdk/sandbox/plugin/plugintest"
)

// A plugin's repository builds its binary and runs the contract suite
// through the host side, as fabro's sandbox service would drive it.
func ExampleRun() {
	testPlugin := func(t *testing.T) {
		bin := plugintest.Build(t, ".") // go build of the plugin's main package
		plugintest.Run(t, bin)
	}
	_ = testPlugin // func TestPlugin(t *testing.T) in the plugin's repository
}
