// Command fabro-bwrap-init is the init of a bwrap sandbox's pid namespace,
// installed beside the bwrap plugin (fabro-sandbox-bwrap), which runs it
// for every command: see services/sandbox/driver/bwrap/sandboxinit. It is
// a binary of its own so that it starts in a few milliseconds.
package main

import (
	"fmt"
	"os"

	"github.com/fabro-sh/fabro-go/services/sandbox/driver/bwrap/sandboxinit"
)

func main() {
	if len(os.Args) < 3 || os.Args[1] != sandboxinit.Arg {
		fmt.Fprintln(os.Stderr, "fabro-bwrap-init is run by the bwrap plugin as a sandbox's init")
		os.Exit(2)
	}
	sandboxinit.Run()
}
