package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/status"

	agentv1 "github.com/fabro-sh/fabro-go/gen/fabro/agent/v1"
	sandboxv1 "github.com/fabro-sh/fabro-go/gen/fabro/sandbox/v1"
	"github.com/fabro-sh/fabro-go/platform/auth"
	"github.com/fabro-sh/fabro-go/platform/envflag"
	"github.com/fabro-sh/fabro-go/platform/grpcclient"
	"github.com/fabro-sh/fabro-go/platform/server"
	"github.com/fabro-sh/fabro-go/services/sandbox"
	"github.com/fabro-sh/fabro-go/services/vault"
)

// Exit codes of `fabro exec`.
const (
	exitDone        = 0
	exitError       = 1
	exitInterrupted = 130
)

// execCmd runs one agent prompt in a directory, non-interactively, and
// prints its stream: text as it arrives, each tool call with its status.
// It talks to a running stack (-server) or starts one in this process.
func execCmd(ctx context.Context, args []string, e env) int {
	fs := flag.NewFlagSet("fabro exec", flag.ContinueOnError)
	fs.SetOutput(e.stderr)
	var (
		model, perms, addr, dir, dataDir     string
		err                                  error
		maxTurns                             int
		overlay, sandboxDriver, settingsFile string
	)
	fs.StringVar(&model, "model", "", "model selector (provider/model, id or alias); the catalog default when empty")
	fs.StringVar(&perms, "permissions", "read-write", "tool permissions: read-only, read-write or full")
	fs.IntVar(&maxTurns, "max-turns", 0, "most model turns (0: unlimited)")
	var cf clientFlags
	cf.register(fs, "", e)
	fs.Lookup("server").Usage = "agent service gRPC address of a running stack; empty starts one in this process"
	fs.StringVar(&dir, "dir", "", "directory the agent works in (default: the current directory)")
	fs.StringVar(&sandboxDriver, "sandbox", "local", "where the agent's tools run: local (this host), docker (a container with the directory mounted at /workspace) or another driver of the stack")
	fs.StringVar(&overlay, "llm-catalog-overlay", "", "JSON catalog file merged over the built-in model catalog (in-process stack)")
	var pluginDir string
	fs.StringVar(&pluginDir, "sandbox-plugin-dir", "", "directory of sandbox driver plugins for the in-process stack (docs/plugins.md)")
	fs.Lookup("data-dir").Usage = "data directory of the in-process stack (or of the local fabro serve, for its admin token)"
	fs.StringVar(&settingsFile, "settings", defaultSettingsFile(e.lookupEnv), "your tool settings file (permission rules, hooks, MCP servers, trusted project settings); missing: none")
	if err := envflag.Parse(fs, args, "FABRO", e.lookupEnv); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return exitDone
		}
		return 2
	}
	addr, dataDir = cf.server, cf.dataDir
	if fs.NArg() != 1 || strings.TrimSpace(fs.Arg(0)) == "" {
		fmt.Fprintln(e.stderr, `fabro: exec takes one prompt: fabro exec [flags] "PROMPT"`)
		return 2
	}
	level, ok := map[string]agentv1.PermissionLevel{
		"read-only":  agentv1.PermissionLevel_PERMISSION_LEVEL_READ_ONLY,
		"read-write": agentv1.PermissionLevel_PERMISSION_LEVEL_READ_WRITE,
		"full":       agentv1.PermissionLevel_PERMISSION_LEVEL_FULL,
	}[perms]
	if !ok || maxTurns < 0 {
		fmt.Fprintf(e.stderr, "fabro: --permissions must be read-only, read-write or full, and --max-turns not negative\n")
		return 2
	}
	if dir == "" {
		var err error
		if dir, err = os.Getwd(); err != nil {
			fmt.Fprintln(e.stderr, "fabro:", err)
			return exitError
		}
	}
	if abs, err := filepath.Abs(dir); err == nil {
		dir = abs
	}

	// The stream outlives a first interrupt: it aborts the prompt and the
	// report still arrives.
	streamCtx, stopStream := context.WithCancel(context.WithoutCancel(ctx))
	defer stopStream()
	remote := addr != ""
	if !remote {
		if _, _, err := userSettings(settingsFile, dir); err != nil {
			fmt.Fprintln(e.stderr, "fabro:", err) // a bad file: say so before a stack starts
			return 2
		}
	}
	var conn *grpc.ClientConn
	if addr == "" {
		// The in-process stack shares the data directory's vault with `fabro
		// serve`, so stored credentials work here too; its agent keeps records
		// and NATS apart, as a server may be running on the same directory.
		st, serr := startStack(streamCtx, stackConfig{
			server:       server.Config{GRPCAddr: "127.0.0.1:0"},
			vault:        vault.Config{DataDir: dataDir, LookupEnv: e.lookupEnv},
			agentDataDir: filepath.Join(dataDir, "exec"),
			llmOverlay:   overlay,
			natsListen:   "none",
			// Its events reach this command through its Prompt stream: an
			// in-memory stream starts in constant time however many runs
			// came before (the session records stay on disk).
			memoryEvents: true,
			// The directory it was started in is the one sandbox root it allows.
			sandbox:      sandbox.Config{PluginDir: pluginDir, Security: sandbox.Security{AllowedRoots: []string{dir}}},
			settingsFile: settingsFile, // yours: this process is the agent's operator
		}, slog.New(slog.DiscardHandler))
		if serr != nil {
			fmt.Fprintln(e.stderr, "fabro:", serr)
			return exitError
		}
		defer func() {
			st.srv.Shutdown(context.WithoutCancel(streamCtx))
			st.close()
		}()
		// This command is the stack's only person: a user token in memory.
		conn, err = grpcclient.New("passthrough:///fabro-exec", grpcclient.Options{
			Dialer: st.srv.DialInProcess, Token: grpcclient.Static(st.tokens.Issue("exec", auth.RoleUser)),
		})
	} else {
		var tok string
		if tok, err = cf.token(); err == nil {
			o := cf.dial
			o.Token = grpcclient.Static(tok)
			conn, err = grpcclient.New(addr, o)
		}
	}
	if err != nil {
		fmt.Fprintln(e.stderr, "fabro:", err)
		return exitError
	}
	defer conn.Close()
	client := agentv1.NewAgentServiceClient(conn)

	opts := &agentv1.AgentOptions{}
	if maxTurns > 0 {
		n := int32(maxTurns)
		opts.MaxTurns = &n
	}
	// In process, the agent reads your file as its operator's (host-side
	// hooks and MCP servers included). A remote agent gets its rules and
	// sandbox-side parts on CreateSession; it refuses host-side ones.
	var toolSettings *agentv1.ToolSettings
	var approvedProject string
	if remote {
		if toolSettings, approvedProject, err = userSettings(settingsFile, dir); err != nil {
			fmt.Fprintln(e.stderr, "fabro:", err)
			return 2
		}
	}
	created, err := client.CreateSession(streamCtx, &agentv1.CreateSessionRequest{
		Model:           model,
		Sandbox:         &agentv1.CreateSessionRequest_SandboxSpec{SandboxSpec: sandboxSpec(sandboxDriver, dir)},
		PermissionLevel: level,
		Options:         opts,
		Settings:        toolSettings,

		ApprovedProjectSettingsSha256: approvedProject,
	})
	if err != nil {
		fmt.Fprintln(e.stderr, "fabro:", status.Convert(err).Message())
		return exitError
	}
	id := created.GetSession().GetSessionId()
	defer client.CloseSession(context.WithoutCancel(streamCtx), &agentv1.CloseSessionRequest{SessionId: id})

	stream, err := client.Prompt(streamCtx, &agentv1.PromptRequest{SessionId: id, Text: fs.Arg(0)})
	if err != nil {
		fmt.Fprintln(e.stderr, "fabro:", status.Convert(err).Message())
		return exitError
	}
	go func() {
		<-ctx.Done()
		client.Abort(context.WithoutCancel(streamCtx), &agentv1.AbortRequest{SessionId: id, Reason: "interrupted"})
	}()
	midLine := false
	asker := newApprovalAsker(e)
	for {
		resp, err := stream.Recv()
		if err != nil {
			fmt.Fprintln(e.stderr, "\nfabro:", status.Convert(err).Message())
			if ctx.Err() != nil {
				return exitInterrupted
			}
			return exitError
		}
		ev := resp.GetEvent()
		if ar := ev.GetApprovalRequested(); ar != nil && ev.GetSessionId() == id {
			if midLine {
				fmt.Fprintln(e.stdout)
				midLine = false
			}
			req := asker.ask(ctx, ar)
			req.SessionId = id
			if _, err := client.Approve(streamCtx, req); err != nil {
				fmt.Fprintln(e.stderr, "fabro: approve:", status.Convert(err).Message())
			}
			continue
		}
		if ev.GetSessionId() != id { // a subagent's event: its tool calls only
			if c := ev.GetToolCallStarted(); c != nil {
				fmt.Fprintf(e.stdout, "  ↳ [%s] %s %s\n", ev.GetSessionId(), c.GetToolName(), clip(c.GetArguments(), 100))
			}
			continue
		}
		switch {
		case ev.GetTextDelta() != nil:
			fmt.Fprint(e.stdout, ev.GetTextDelta().GetDelta())
			midLine = !strings.HasSuffix(ev.GetTextDelta().GetDelta(), "\n")
		case ev.GetToolCallStarted() != nil:
			if midLine {
				fmt.Fprintln(e.stdout)
				midLine = false
			}
			c := ev.GetToolCallStarted()
			fmt.Fprintf(e.stdout, "▸ %s %s\n", c.GetToolName(), clip(c.GetArguments(), 120))
		case ev.GetToolCallCompleted() != nil:
			c := ev.GetToolCallCompleted()
			if c.GetIsError() {
				fmt.Fprintf(e.stdout, "  ✗ %s failed: %s\n", c.GetToolName(), clip(firstLine(c.GetOutput()), 200))
			} else {
				fmt.Fprintf(e.stdout, "  ✓ %s done (%s)\n", c.GetToolName(), c.GetDuration().AsDuration().Round(1e6))
			}
		case ev.GetWarning() != nil:
			fmt.Fprintf(e.stderr, "warning: %s\n", ev.GetWarning().GetMessage())
		case ev.GetPromptCompleted() != nil:
			if midLine {
				fmt.Fprintln(e.stdout)
			}
			rep := ev.GetPromptCompleted().GetReport()
			fmt.Fprintf(e.stderr, "[%s: %d turns, %d tool calls, %d tokens in, %d out]\n", strings.TrimPrefix(rep.GetStatus().String(), "PROMPT_STATUS_"),
				rep.GetTurns(), rep.GetToolCalls(), rep.GetUsage().GetInputTokens()+rep.GetUsage().GetCacheReadTokens(), rep.GetUsage().GetOutputTokens())
			switch rep.GetStatus() {
			case agentv1.PromptStatus_PROMPT_STATUS_COMPLETED:
				return exitDone
			case agentv1.PromptStatus_PROMPT_STATUS_CANCELLED:
				return exitInterrupted
			}
			if m := rep.GetError().GetMessage(); m != "" {
				fmt.Fprintln(e.stderr, "fabro:", m)
			}
			return exitError
		}
	}
}

// startStack runs the gateway, the sandbox service and the agent service
// in this process on loopback ports, and returns the agent's address.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(strings.TrimSpace(s), "\n")
	return line
}

// sandboxSpec is where the agent works: dir itself for the local driver, dir
// mounted as the container's workspace for docker, the driver's own
// workspace otherwise.
func sandboxSpec(driverName, dir string) *sandboxv1.SandboxSpec {
	switch driverName {
	case "local":
		return &sandboxv1.SandboxSpec{Driver: driverName, WorkingDirectory: dir}
	case "docker":
		return &sandboxv1.SandboxSpec{Driver: driverName, DriverOptions: map[string]string{"host_dir": dir}}
	}
	return &sandboxv1.SandboxSpec{Driver: driverName}
}
