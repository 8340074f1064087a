// Command sandbox-plugin is a minimal sandbox driver plugin, built as a
// third party would build one: its own module, importing only the SDK and
// the driver it serves. It serves the local driver under the name
// "example"; a real plugin serves its own driver.Driver the same way.
// docs/plugins.md walks through it.
package main

import (
	"github.com/fabro-sh/fabro-go/sdk/sandbox/plugin"
	"github.com/fabro-sh/fabro-go/services/sandbox/driver/local"
)

// exampleDriver is the local driver, renamed: everything else (files,
// exec, search, capabilities) is the local driver's.
type exampleDriver struct{ *local.Driver }

// Name is the driver's name in sandbox specs.
func (exampleDriver) Name() string { return "example" }

func main() {
	// Log through plugin.Logger: the lines reach the service's log.
	plugin.Logger().Info("example plugin starting")
	plugin.Serve(exampleDriver{local.New(local.Config{})}, plugin.WithVersion("v0.1.0"))
}
