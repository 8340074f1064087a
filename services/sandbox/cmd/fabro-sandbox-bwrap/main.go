// Command fabro-sandbox-bwrap is the bubblewrap sandbox driver plugin
// (driver "bwrap"): commands run in Linux namespaces made by bwrap, from
// Debian's bubblewrap package, for hosts without Docker. The sandbox
// service starts it; see docs/plugins.md.
package main

import (
	"os"

	"github.com/fabro-sh/fabro-go/sdk/sandbox/plugin"
	"github.com/fabro-sh/fabro-go/services/sandbox/driver/bwrap"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == bwrap.InitArg {
		bwrap.Init() // inside a sandbox: the init of its pid namespace
		return
	}
	plugin.Serve(bwrap.New(bwrap.Config{WorkspaceRoot: os.Getenv("FABRO_BWRAP_WORKSPACE_ROOT"), Instance: os.Getenv(bwrap.InstanceEnv)}))
}
