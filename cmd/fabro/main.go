// Command fabro runs the fabro services and talks to them. `fabro help`
// lists its commands; each has --help with examples.
package main

import (
	"context"
	"io"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], env{stdin: os.Stdin, stdout: os.Stdout, stderr: os.Stderr, lookupEnv: os.LookupEnv})
	stop()
	os.Exit(code)
}

// env is what a command may touch of the outside world, so tests can run
// commands in-process.
type env struct {
	stdin     io.Reader
	stdout    io.Writer
	stderr    io.Writer
	lookupEnv func(string) (string, bool)
}

// run executes one command line and returns the process exit code.
func run(ctx context.Context, args []string, e env) int {
	if len(args) > 0 && args[0] == completeCommandName {
		return runLeaf(ctx, completeCommand(), args[1:], e)
	}
	return dispatch(ctx, commands(), args, e)
}

// commands is the command tree.
func commands() *command {
	root := &command{examples: `  fabro serve &                                   # every service, on 127.0.0.1:7700
  fabro secret set ANTHROPIC_API_KEY              # into the server's vault
  fabro exec --server 127.0.0.1:7700 "fix the failing test"
  fabro exec "explain this code"                  # every service in this process
  fabro sessions list`, subs: []*command{
		serveCommand(),
		execCommand(),
		acpCommand(),
		sessionsCommand(),
		secretCommand(),
		tokenCommand(),
		modelsCommand(),
		providersCommand(),
		sandboxCommand(),
		completionCommand(),
		versionCommand(),
	}}
	root.subs = append(root.subs, helpCmd(root))
	return tree(root)
}
