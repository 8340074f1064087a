package main

import (
	"context"
	"flag"
	"fmt"
	"strings"
	"text/tabwriter"

	"google.golang.org/protobuf/proto"

	agentv1 "github.com/fabro-sh/fabro-go/gen/fabro/agent/v1"
)

// checkpointCommands are `fabro sessions checkpoints|diff|rewind`: what a
// session's turns changed in its workspace, and going back to one.
func checkpointCommands() []*command {
	return []*command{{
		name: "checkpoints", args: "ID", summary: "list a session's checkpoints: the turns that changed its workspace",
		examples: "  fabro sessions checkpoints s_0123abcd\n  fabro sessions checkpoints s_0123abcd -o json",
		define:   sessionsCheckpoints,
	}, {
		name: "diff", args: "ID", summary: "show what a session changed in its workspace, or what one turn did",
		long: `Prints the unified diff of everything the session's turns changed since
its first checkpoint, or with --turn of what that turn changed.`,
		examples: "  fabro sessions diff s_0123abcd\n  fabro sessions diff s_0123abcd --turn 3",
		define:   sessionsDiff,
	}, {
		name: "rewind", args: "ID", summary: "put a session's workspace (and history) back as it was after a turn",
		long: `Restores the files to the checkpoint of turn --to (0: before the first
turn) and, with --conversation, cuts the history back to that turn too.
Files changed outside the agent since its last turn are not overwritten:
the rewind is refused, listing them, unless --force.`,
		examples: "  fabro sessions rewind s_0123abcd --to 2\n  fabro sessions rewind s_0123abcd --to 0 --conversation --force",
		define:   sessionsRewind,
	}}
}

func sessionsCheckpoints(fs *flag.FlagSet, e env) runner {
	c := newClientFlags(fs, e)
	out := newOutputFlag(fs)
	return func(ctx context.Context, args []string) error {
		if len(args) != 1 {
			return usagef("sessions checkpoints takes one session ID (see fabro sessions list)")
		}
		conn, ctx, done, err := c.connect(ctx)
		if err != nil {
			return err
		}
		defer done()
		resp, err := agentv1.NewAgentServiceClient(conn).ListCheckpoints(ctx, &agentv1.ListCheckpointsRequest{SessionId: args[0]})
		if err != nil {
			return c.rpcError(err)
		}
		if out.json() {
			return out.print(e.stdout, resp)
		}
		tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "TURN\tCOMMIT\tHISTORY")
		for _, cp := range resp.GetCheckpoints() {
			hist := "-"
			if cp.GetHistoryLength() >= 0 {
				hist = fmt.Sprint(cp.GetHistoryLength())
			}
			fmt.Fprintf(tw, "%d\t%.12s\t%s\n", cp.GetTurn(), cp.GetCommit(), hist)
		}
		return tw.Flush()
	}
}

func sessionsDiff(fs *flag.FlagSet, e env) runner {
	c := newClientFlags(fs, e)
	turn := fs.Int("turn", -1, "only what this turn changed (default: everything since the first checkpoint)")
	return func(ctx context.Context, args []string) error {
		if len(args) != 1 {
			return usagef("sessions diff takes one session ID (see fabro sessions list)")
		}
		req := &agentv1.DiffCheckpointRequest{SessionId: args[0]}
		if *turn < -1 {
			return usagef("--turn must not be negative")
		}
		if *turn >= 0 {
			req.Turn = proto.Int32(int32(*turn))
		}
		conn, ctx, done, err := c.connect(ctx)
		if err != nil {
			return err
		}
		defer done()
		resp, err := agentv1.NewAgentServiceClient(conn).DiffCheckpoint(ctx, req)
		if err != nil {
			return c.rpcError(err)
		}
		_, err = fmt.Fprint(e.stdout, resp.GetDiff())
		return err
	}
}

func sessionsRewind(fs *flag.FlagSet, e env) runner {
	c := newClientFlags(fs, e)
	to := fs.Int("to", -1, "the turn to go back to (0: before the first turn); required")
	conversation := fs.Bool("conversation", false, "also cut the history back to that turn")
	force := fs.Bool("force", false, "overwrite files changed outside the agent since its last turn")
	out := newOutputFlag(fs)
	return func(ctx context.Context, args []string) error {
		if len(args) != 1 {
			return usagef("sessions rewind takes one session ID (see fabro sessions list)")
		}
		if *to < 0 {
			return usagef("--to is required: the turn to go back to (see fabro sessions checkpoints)")
		}
		conn, ctx, done, err := c.connect(ctx)
		if err != nil {
			return err
		}
		defer done()
		resp, err := agentv1.NewAgentServiceClient(conn).RestoreCheckpoint(ctx, &agentv1.RestoreCheckpointRequest{
			SessionId: args[0], Turn: int32(*to), Conversation: *conversation, Force: *force})
		if err != nil {
			return c.rpcError(err)
		}
		if out.json() {
			return out.print(e.stdout, resp)
		}
		fmt.Fprintf(e.stdout, "rewound %s to turn %d: %d files changed", args[0], *to, len(resp.GetFiles()))
		if len(resp.GetFiles()) > 0 {
			fmt.Fprintf(e.stdout, " (%s)", strings.Join(resp.GetFiles(), ", "))
		}
		if *conversation {
			fmt.Fprintf(e.stdout, "; history now %d messages", resp.GetHistoryLength())
		}
		fmt.Fprintln(e.stdout)
		return nil
	}
}
