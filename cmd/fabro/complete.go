package main

import (
	"context"
	"flag"
	"fmt"
	"time"

	agentv1 "github.com/fabro-sh/fabro-go/gen/fabro/agent/v1"
	llmv1 "github.com/fabro-sh/fabro-go/gen/fabro/llm/v1"
	sandboxv1 "github.com/fabro-sh/fabro-go/gen/fabro/sandbox/v1"
)

// completeCommandName is the hidden command the completion scripts run
// for the words only the server knows: `fabro __complete sessions|models|
// drivers [--server ADDR]` prints one per line, from --server (or the
// config file and environment, as every client command) when it answers
// within a second, and nothing otherwise. It is not in the command tree,
// so help, typo hints and the scripts' own word lists do not show it.
const completeCommandName = "__complete"

// completeKinds are the kinds of word __complete knows.
var completeKinds = map[string]bool{"sessions": true, "models": true, "drivers": true}

// flagKinds are the flags whose value the scripts ask the server for
// (falling back to flagWords when it does not answer).
var flagKinds = map[string]string{"model": "models", "sandbox": "drivers"}

// argKinds are the commands whose positional argument the scripts ask the
// server for.
var argKinds = map[string]string{"sessions show": "sessions", "sessions resume": "sessions", "sessions rm": "sessions"}

func completeCommand() *command {
	c := &command{name: completeCommandName, define: completeValues}
	c.path = completeCommandName
	return c
}

func completeValues(fs *flag.FlagSet, e env) runner {
	c := newClientFlags(fs, e)
	// A prompt waits for this: a second, not the commands' ten.
	if f := fs.Lookup("timeout"); f != nil {
		f.DefValue = time.Second.String()
		f.Value.Set(f.DefValue)
	}
	return func(ctx context.Context, args []string) error {
		if len(args) != 1 {
			return usagef("%s takes one kind: sessions, models or drivers", completeCommandName)
		}
		kind := args[0]
		if !completeKinds[kind] {
			return usagef("unknown kind %q: want sessions, models or drivers", kind)
		}
		words, err := serverWords(ctx, c, kind)
		if err != nil {
			// A completion prints what it can; the shell shows no error.
			return exitCode(exitFailure)
		}
		for _, w := range words {
			fmt.Fprintln(e.stdout, w)
		}
		return nil
	}
}

// serverWords asks the server for the words of kind, one page of up to
// 500 (more is no use at a prompt).
func serverWords(ctx context.Context, c *clientFlags, kind string) ([]string, error) {
	conn, ctx, done, err := c.connect(ctx)
	if err != nil {
		return nil, err
	}
	defer done()
	var out []string
	switch kind {
	case "sessions":
		resp, err := agentv1.NewAgentServiceClient(conn).ListSessions(ctx, &agentv1.ListSessionsRequest{PageSize: 500})
		if err != nil {
			return nil, err
		}
		for _, s := range resp.GetSessions() {
			out = append(out, s.GetSessionId())
		}
	case "models":
		resp, err := llmv1.NewLLMGatewayServiceClient(conn).ListModels(ctx, &llmv1.ListModelsRequest{PageSize: 500})
		if err != nil {
			return nil, err
		}
		for _, m := range resp.GetModels() {
			out = append(out, m.GetModelId())
		}
	case "drivers":
		resp, err := sandboxv1.NewSandboxServiceClient(conn).ListDrivers(ctx, &sandboxv1.ListDriversRequest{PageSize: 500})
		if err != nil {
			return nil, err
		}
		for _, d := range resp.GetDrivers() {
			out = append(out, d.GetDriverId())
		}
	}
	return out, nil
}
