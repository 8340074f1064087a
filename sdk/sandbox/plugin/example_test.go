package plugin_test

import (
	"log/slog"
	"os"

	"github.com/fabro-sh/fabro-go/sdk/sandbox/driver"
	"github.com/fabro-sh/fabro-go/sdk/sandbox/plugin"
)

// myDriver stands for the plugin's driver.Driver.
var myDriver driver.Driver

// A plugin's main serves its driver: the host starts the binary, checks
// its SHA-256, and speaks the plugin protocol to it over mTLS. Serve
// returns only by exiting.
func ExampleServe() {
	logger := slog.New(slog.NewJSONHandler(os.Stderr, nil)) // the host reads the plugin's stderr
	plugin.Serve(myDriver, plugin.WithVersion("v1.2.0"), plugin.WithLogger(logger))
}
