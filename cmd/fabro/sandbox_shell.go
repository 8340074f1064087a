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

	"golang.org/x/term"

	sandboxv1 "github.com/fabro-sh/fabro-go/gen/fabro/sandbox/v1"
)

func sandboxShellCommand() *command {
	return &command{
		name: "shell", args: "SANDBOX_ID", summary: "an interactive terminal in a sandbox",
		long: `Starts a shell (or --command) on a terminal inside a sandbox of the server at
--server and connects this terminal to it: raw mode, every key passed on,
the window's size followed. The shell's exit ends it, with its exit code.
The sandbox's driver needs the terminals capability (local).`,
		examples: "  fabro sandbox shell sbx-0123abcd\n  fabro sandbox shell --command 'htop' sbx-0123abcd",
		define:   sandboxShell,
	}
}

func sandboxShell(fs *flag.FlagSet, e env) runner {
	c := newClientFlags(fs, e)
	command := fs.String("command", "exec bash -i", "Bash source to run on the terminal")
	return func(ctx context.Context, args []string) error {
		if len(args) != 1 {
			return usagef("shell takes one sandbox id, got %q", args)
		}
		conn, err := c.dialServer()
		if err != nil {
			return err
		}
		defer conn.Close()
		client := sandboxv1.NewSandboxServiceClient(conn)
		in, _ := e.stdin.(*os.File)
		tty := in != nil && term.IsTerminal(int(in.Fd()))
		size := &sandboxv1.TerminalSize{Rows: 24, Cols: 80}
		if tty {
			if w, h, err := term.GetSize(int(in.Fd())); err == nil && w > 0 && h > 0 {
				size = &sandboxv1.TerminalSize{Rows: int32(min(h, 1000)), Cols: int32(min(w, 1000))}
			}
		}
		resp, err := client.StartProcess(ctx, &sandboxv1.StartProcessRequest{SandboxId: args[0], Spec: &sandboxv1.ProcessSpec{
			Command: *command, Terminal: size, Env: map[string]string{"TERM": termName(e)}}})
		if err != nil {
			return c.rpcError(err)
		}
		pid := resp.GetProcess().GetProcessId()
		sctx, cancel := context.WithCancel(ctx)
		defer cancel()
		st, err := client.AttachProcess(sctx)
		if err == nil {
			err = st.Send(&sandboxv1.AttachProcessRequest{Event: &sandboxv1.AttachProcessRequest_Open{Open: &sandboxv1.AttachOpen{SandboxId: args[0], ProcessId: pid}}})
		}
		if err != nil {
			client.SignalProcess(context.WithoutCancel(ctx), &sandboxv1.SignalProcessRequest{SandboxId: args[0], ProcessId: pid, Signal: "KILL"})
			return c.rpcError(err)
		}
		if tty {
			old, err := term.MakeRaw(int(in.Fd()))
			if err != nil {
				return err
			}
			defer term.Restore(int(in.Fd()), old)
			winch := make(chan os.Signal, 1)
			signal.Notify(winch, syscall.SIGWINCH)
			defer signal.Stop(winch)
			go func() {
				for {
					select {
					case <-sctx.Done():
						return
					case <-winch:
						if w, h, err := term.GetSize(int(in.Fd())); err == nil && w > 0 && h > 0 {
							st.Send(&sandboxv1.AttachProcessRequest{Event: &sandboxv1.AttachProcessRequest_Resize{Resize: &sandboxv1.TerminalSize{Rows: int32(min(h, 1000)), Cols: int32(min(w, 1000))}}})
						}
					}
				}
			}()
		}
		// Keys go on as they come; the reader ends with stdin (the process
		// then gets the end-of-file character) or with the process.
		go func() {
			buf := make([]byte, 4096)
			for {
				n, err := e.stdin.Read(buf)
				if n > 0 && st.Send(&sandboxv1.AttachProcessRequest{Event: &sandboxv1.AttachProcessRequest_Stdin{Stdin: append([]byte(nil), buf[:n]...)}}) != nil {
					return
				}
				if err != nil {
					st.Send(&sandboxv1.AttachProcessRequest{Event: &sandboxv1.AttachProcessRequest_CloseStdin{CloseStdin: true}})
					return
				}
			}
		}()
		for {
			m, err := st.Recv()
			if errors.Is(err, io.EOF) {
				return nil
			}
			if err != nil {
				return c.rpcError(err)
			}
			switch ev := m.GetEvent().(type) {
			case *sandboxv1.AttachProcessResponse_Output:
				e.stdout.Write(ev.Output.GetData())
			case *sandboxv1.AttachProcessResponse_Exited:
				r := ev.Exited.GetResult()
				if r.GetSignal() != "" {
					fmt.Fprintf(e.stderr, "\r\nthe shell ended by %s\r\n", r.GetSignal())
					return exitCode(1)
				}
				return exitCode(int(r.GetExitCode()))
			}
		}
	}
}

// termName is the terminal type to give the shell: this one's, else xterm.
func termName(e env) string {
	if t, ok := e.lookupEnv("TERM"); ok && t != "" {
		return t
	}
	return "xterm-256color"
}
