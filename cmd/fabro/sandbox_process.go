package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	sandboxv1 "github.com/fabro-sh/fabro-go/gen/fabro/sandbox/v1"
)

// The sandbox's processes facet on the command line: ps and logs.

func sandboxProcessCommands() []*command {
	return []*command{{
		name: "ps", args: "SANDBOX_ID", summary: "list a sandbox's processes and services",
		long: `Lists the processes of a sandbox of the server at --server (your own, or
all of them for an admin), oldest first: id, service name, state, whether
its readiness probe passed, restarts, output bytes and the command.`,
		examples: "  fabro sandbox ps sbx-0123abcd\n  fabro sandbox ps -o json sbx-0123abcd",
		define:   sandboxPs,
	}, {
		name: "logs", args: "SANDBOX_ID PROCESS", summary: "print a process's output, and with -f follow it",
		long: `Prints the retained output (stdout and stderr together) of a process or
service, named by its id or a service's name. With -f it follows the
output until the process ends, and reattaches from the last byte printed
if the connection drops. Output the service dropped from its log (past its
retained limit) is reported on stderr as a gap.`,
		examples: "  fabro sandbox logs sbx-0123abcd web\n  fabro sandbox logs -f sbx-0123abcd proc-0123abcd",
		define:   sandboxLogs,
	}, sandboxShellCommand()}
}

func sandboxPs(fs *flag.FlagSet, e env) runner {
	c := newClientFlags(fs, e)
	out := newOutputFlag(fs)
	return func(ctx context.Context, args []string) error {
		if len(args) != 1 {
			return usagef("ps takes one sandbox id, got %q", args)
		}
		conn, ctx, done, err := c.connect(ctx)
		if err != nil {
			return err
		}
		defer done()
		resp, err := sandboxv1.NewSandboxServiceClient(conn).ListProcesses(ctx, &sandboxv1.ListProcessesRequest{SandboxId: args[0]})
		if err != nil {
			return c.rpcError(err)
		}
		if out.json() {
			return out.print(e.stdout, resp)
		}
		tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "PROCESS\tNAME\tSTATE\tREADY\tRESTARTS\tOUTPUT\tCOMMAND")
		for _, p := range resp.GetProcesses() {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%d\t%s\n", p.GetProcessId(), dash(p.GetSpec().GetName()), processState(p), readyWord(p),
				p.GetRestarts(), p.GetOutputBytes(), commandOf(p.GetSpec()))
		}
		return tw.Flush()
	}
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func processState(p *sandboxv1.Process) string {
	if p.GetState() != sandboxv1.ProcessState_PROCESS_STATE_EXITED {
		return "running"
	}
	r := p.GetResult()
	if r.GetSignal() != "" {
		return "exited (" + r.GetSignal() + ")"
	}
	return fmt.Sprintf("exited (%d)", r.GetExitCode())
}

func readyWord(p *sandboxv1.Process) string {
	switch {
	case p.GetSpec().GetReadiness() == nil:
		return "-"
	case p.GetReady():
		return "yes"
	}
	return "no"
}

func commandOf(s *sandboxv1.ProcessSpec) string {
	c := s.GetCommand()
	if c == "" {
		c = strings.Join(s.GetArgs(), " ")
	}
	if len(c) > 60 {
		c = c[:57] + "..."
	}
	return strings.ReplaceAll(c, "\n", " ")
}

func sandboxLogs(fs *flag.FlagSet, e env) runner {
	c := newClientFlags(fs, e)
	follow := fs.Bool("f", false, "follow the output until the process ends")
	reattach := fs.Duration("reattach-timeout", time.Minute, "with -f, how long to keep trying to reattach after the connection drops")
	return func(ctx context.Context, args []string) error {
		if len(args) != 2 {
			return usagef("logs takes a sandbox id and a process (its id or a service's name), got %q", args)
		}
		conn, err := c.dialServer()
		if err != nil {
			return err
		}
		defer conn.Close()
		client := sandboxv1.NewSandboxServiceClient(conn)
		var offset int64
		var lastErr error
		deadline := time.Time{}
		for {
			ended, err := followOnce(ctx, client, args[0], args[1], &offset, *follow, e)
			if err == nil && (ended || !*follow) {
				return nil
			}
			if err != nil {
				if ctx.Err() != nil || !*follow || !reattachable(err) {
					return c.rpcError(err)
				}
				lastErr = err
			}
			if deadline.IsZero() {
				deadline = time.Now().Add(*reattach)
			} else if time.Now().After(deadline) {
				return c.rpcError(lastErr)
			}
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(500 * time.Millisecond):
			}
		}
	}
}

// followOnce attaches from *offset and prints output until the process
// ends (or, without follow, until the retained output is printed). It
// reports whether the process ended.
func followOnce(ctx context.Context, client sandboxv1.SandboxServiceClient, sandboxID, process string, offset *int64, follow bool, e env) (bool, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	st, err := client.AttachProcess(ctx)
	if err != nil {
		return false, err
	}
	if err := st.Send(&sandboxv1.AttachProcessRequest{Event: &sandboxv1.AttachProcessRequest_Open{Open: &sandboxv1.AttachOpen{SandboxId: sandboxID, ProcessId: process, FromOffset: *offset}}}); err != nil {
		_, err = st.Recv()
		return false, err
	}
	st.CloseSend()
	var end int64 = -1 // without follow: the output there was when attached
	for {
		m, err := st.Recv()
		if errors.Is(err, io.EOF) {
			return true, nil
		}
		if err != nil {
			return false, err
		}
		switch ev := m.GetEvent().(type) {
		case *sandboxv1.AttachProcessResponse_Attached:
			end = ev.Attached.GetOutputBytes()
			if !follow && *offset >= end {
				return false, nil
			}
		case *sandboxv1.AttachProcessResponse_Gap:
			fmt.Fprintf(e.stderr, "[%d bytes of output dropped from the log]\n", ev.Gap.GetToOffset()-ev.Gap.GetFromOffset())
			*offset = ev.Gap.GetToOffset()
		case *sandboxv1.AttachProcessResponse_Output:
			if _, err := e.stdout.Write(ev.Output.GetData()); err != nil {
				return false, err
			}
			*offset = ev.Output.GetOffset() + int64(len(ev.Output.GetData()))
			if !follow && *offset >= end {
				return false, nil
			}
		case *sandboxv1.AttachProcessResponse_Exited:
			return true, nil
		}
	}
}
