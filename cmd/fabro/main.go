// Command fabro runs the fabro services and talks to them.
//
//	fabro serve                  every service and the REST gateway in one process
//	fabro exec "PROMPT"          run an agent on the current directory
//	fabro secret set NAME        store a credential (value from stdin or a prompt)
//	fabro secret list            list stored credentials (names and metadata only)
//	fabro secret rm NAME         delete a credential
//	fabro sandbox conformance P  check a sandbox driver plugin binary
//	fabro token create|list|revoke  manage people's tokens (admin)
//	fabro models                 the model catalog as a table
//	fabro providers              the providers and their readiness
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
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

const usage = `fabro runs AI coding agents against your code.

Usage:
  fabro serve [flags]             run every service and the REST gateway in one process
  fabro exec [flags] "PROMPT"     run an agent in the current directory; exit 0 done, 1 error, 130 interrupted
  fabro secret set NAME [flags]   store a credential; the value is read from stdin or a prompt
  fabro secret list [flags]       list stored credentials (never their values)
  fabro secret rm NAME [flags]    delete a credential, or one version of it
  fabro sandbox conformance PLUGIN  check a sandbox driver plugin binary against the driver contract
  fabro token create --name N [--role user|admin]   issue a token; its value is printed once
  fabro token list [flags]        list tokens (ids, names, roles; never values)
  fabro token revoke ID [flags]   revoke a token; its next call is refused

Client commands present the token in --token-file, else $FABRO_TOKEN, else
the admin token fabro serve writes to <data-dir>/auth/admin.token.
  fabro models [flags]            list the model catalog (context, output limit, prices, capabilities)
  fabro providers [flags]         list the providers and whether each is ready (-probe to check with a call)

Run "fabro COMMAND -h" for a command's flags. Every flag can also be set by
an environment variable: FABRO_ and the flag's name in capitals, "-" as "_"
(e.g. -data-dir is FABRO_DATA_DIR).
`

// run executes one command and returns the process exit code.
func run(ctx context.Context, args []string, e env) int {
	if len(args) == 0 {
		fmt.Fprint(e.stderr, usage)
		return 2
	}
	var err error
	switch args[0] {
	case "serve":
		err = serve(ctx, args[1:], e)
	case "secret":
		err = secret(ctx, args[1:], e)
	case "token":
		err = token(ctx, args[1:], e)
	case "exec":
		return execCmd(ctx, args[1:], e)
	case "sandbox":
		err = sandboxCmd(ctx, args[1:], e)
	case "models":
		err = modelsCmd(ctx, args[1:], e)
	case "providers":
		err = providersCmd(ctx, args[1:], e)
	case "help", "-h", "-help", "--help":
		fmt.Fprint(e.stdout, usage)
		return 0
	default:
		fmt.Fprintf(e.stderr, "fabro: unknown command %q\n\n%s", args[0], usage)
		return 2
	}
	switch {
	case err == nil:
		return 0
	case errors.Is(err, flag.ErrHelp):
		return 0
	case errors.As(err, new(usageError)):
		fmt.Fprintf(e.stderr, "fabro: %v\n", err)
		return 2
	default:
		fmt.Fprintf(e.stderr, "fabro: %v\n", err)
		return 1
	}
}

// usageError is a mistake in the command line.
type usageError struct{ msg string }

func (u usageError) Error() string { return u.msg }

func usagef(format string, a ...any) error { return usageError{fmt.Sprintf(format, a...)} }
