package main

import (
	"context"
	"flag"
	"fmt"
	"strings"

	sandboxv1 "github.com/fabro-sh/fabro-go/gen/fabro/sandbox/v1"
)

// The sandbox's pause facet on the command line: pause and resume.

func sandboxPauseCommands() []*command {
	return []*command{{
		name: "pause", args: "SANDBOX_ID", summary: "freeze every process of a sandbox",
		long: `Pauses a sandbox of the server at --server: its processes keep their
memory and output but use no CPU, and no command starts until it is
resumed; its files stay readable and writable. Needs a driver with the
pause facet (docker, bwrap). Prints the sandbox's state.`,
		examples: "  fabro sandbox pause sbx-0123abcd",
		define:   func(fs *flag.FlagSet, e env) runner { return sandboxPauseResume(fs, e, true) },
	}, {
		name: "resume", args: "SANDBOX_ID", summary: "thaw a paused sandbox",
		long: `Resumes a sandbox paused by fabro sandbox pause: its processes run on
from where they were. Prints the sandbox's state.`,
		examples: "  fabro sandbox resume sbx-0123abcd",
		define:   func(fs *flag.FlagSet, e env) runner { return sandboxPauseResume(fs, e, false) },
	}}
}

func sandboxPauseResume(fs *flag.FlagSet, e env, pause bool) runner {
	c := newClientFlags(fs, e)
	out := newOutputFlag(fs)
	verb := "resume"
	if pause {
		verb = "pause"
	}
	return func(ctx context.Context, args []string) error {
		if len(args) != 1 {
			return usagef("%s takes one sandbox id, got %q", verb, args)
		}
		conn, ctx, done, err := c.connect(ctx)
		if err != nil {
			return err
		}
		defer done()
		client := sandboxv1.NewSandboxServiceClient(conn)
		var sb *sandboxv1.Sandbox
		if pause {
			resp, err := client.PauseSandbox(ctx, &sandboxv1.PauseSandboxRequest{SandboxId: args[0]})
			if err != nil {
				return c.rpcError(err)
			}
			sb = resp.GetSandbox()
		} else {
			resp, err := client.ResumeSandbox(ctx, &sandboxv1.ResumeSandboxRequest{SandboxId: args[0]})
			if err != nil {
				return c.rpcError(err)
			}
			sb = resp.GetSandbox()
		}
		if out.json() {
			return out.print(e.stdout, sb)
		}
		_, err = fmt.Fprintf(e.stdout, "%s %s\n", sb.GetSandboxId(), strings.ToLower(strings.TrimPrefix(sb.GetState().String(), "SANDBOX_STATE_")))
		return err
	}
}
