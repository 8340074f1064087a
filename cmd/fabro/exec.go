package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	agentv1 "github.com/fabro-sh/fabro-go/gen/fabro/agent/v1"
	llmv1 "github.com/fabro-sh/fabro-go/gen/fabro/llm/v1"
	sandboxv1 "github.com/fabro-sh/fabro-go/gen/fabro/sandbox/v1"
	"github.com/fabro-sh/fabro-go/platform/auth"
	"github.com/fabro-sh/fabro-go/platform/grpcclient"
	"github.com/fabro-sh/fabro-go/platform/server"
	"github.com/fabro-sh/fabro-go/services/sandbox"
	"github.com/fabro-sh/fabro-go/services/vault"
)

// execCommand is `fabro exec`.
func execCommand() *command {
	return &command{
		name: "exec", args: `["PROMPT"]`, summary: "run an agent on a directory, non-interactively",
		long: `Runs one prompt with an agent working in --dir (default: the current
directory) and prints its stream: the answer as it arrives, each tool call
with its status. The session id is printed to stderr at the start and at
the end, for ` + "`fabro sessions show|resume ID`" + `.

With --server (or $FABRO_SERVER, or server in the config file) the agent of
that server runs it: if the connection drops, exec reattaches to the
session's event stream from the last event it printed, printing nothing
twice. Without one, every service runs in this process on the same data
directory's vault (the keys stored with ` + "`fabro secret set`" + `), else the
provider's environment variable (ANTHROPIC_API_KEY ...).

The prompt is read from stdin when it is "-" or stdin is not a terminal
(after the argument, when there is one). --output-format json prints one
result object at the end, stream-json every event as a JSON line and then
the result (docs/CLI.md). --resume ID and --continue (the latest session
started in this directory) go on with an earlier session; --max-cost stops
the prompt before a turn would pass the budget (exit 3).

A tool call that needs approval is asked on the terminal; without one it
is denied. Ctrl-C aborts the prompt (exit 130).`,
		examples: `  fabro exec "add a test for the parser"
  fabro exec --permissions full --sandbox docker "run the tests and fix what fails"
  fabro exec --server 127.0.0.1:7700 --model anthropic/claude-sonnet-4.5 "explain main.go"
  ANTHROPIC_API_KEY=sk-... fabro exec --permissions read-only "summarize the README"
  git diff | fabro exec --output-format json "review this diff" | jq -r .result
  fabro exec --continue --max-cost 0.50 "now fix what you found"`,
		define: execFlags,
	}
}

// execOptions are exec's flags.
type execOptions struct {
	model, perms, dir                 string
	maxTurns                          int
	overlay, sandboxDriver, pluginDir string
	settingsFile                      string
	reattach                          time.Duration
	cf                                clientFlags
	format                            outputFormat
	maxCost                           usdFlag
	resume, profile                   string
	cont                              bool
	subagents                         int
	lookupEnv                         func(string) (string, bool)
}

func execFlags(fs *flag.FlagSet, e env) runner {
	o := &execOptions{lookupEnv: e.lookupEnv}
	fs.StringVar(&o.model, "model", "", "model selector (provider/model, id or alias); the catalog default when empty")
	fs.StringVar(&o.perms, "permissions", "read-write", "tool permissions: read-only, read-write or full")
	fs.IntVar(&o.maxTurns, "max-turns", 0, "most model turns (0: unlimited)")
	o.cf.register(fs, "", e)
	fs.Lookup("server").Usage = "address of the fabro server (fabro serve, or the compose stack's front door) to run on; empty runs every service in this process"
	fs.StringVar(&o.dir, "dir", "", "directory the agent works in (default: the current directory)")
	fs.StringVar(&o.sandboxDriver, "sandbox", "local", "where the agent's tools run: local (this host), docker (a container with the directory mounted at /workspace) or another driver of the stack")
	fs.StringVar(&o.overlay, "llm-catalog-overlay", "", "JSON catalog file merged over the built-in model catalog (in-process stack)")
	fs.StringVar(&o.pluginDir, "sandbox-plugin-dir", "", "directory of sandbox driver plugins for the in-process stack (docs/plugins.md)")
	fs.Lookup("data-dir").Usage = "data directory of the in-process stack (or of the local fabro serve, for its admin token)"
	fs.StringVar(&o.settingsFile, "settings", defaultSettingsFile(e.lookupEnv), "your tool settings file (permission rules, hooks, MCP servers, trusted project settings); missing: none")
	fs.DurationVar(&o.reattach, "reattach-timeout", time.Minute, "how long to keep trying to reattach to the server after the connection drops")
	o.format = formatText
	fs.Var(&o.format, "output-format", "what stdout gets: text (the answer and tool calls, for people), json (one object at the end: result, status, usage, cost, session id, turns, duration) or stream-json (one JSON line per event, then the result; schema in docs/CLI.md)")
	fs.Var(&o.maxCost, "max-cost", "most US dollars the prompt may cost: it stops (status BUDGET_EXCEEDED, exit 3) before a turn that would go past it (0: no limit)")
	fs.StringVar(&o.resume, "resume", "", "run the prompt on this session (one of an earlier fabro exec) instead of a new one")
	fs.BoolVar(&o.cont, "continue", false, "run the prompt on the latest session fabro exec started in this directory (on this --server, or in process)")
	fs.StringVar(&o.profile, "profile", "", "the config file's [profile.NAME] section to apply over its top-level keys")
	fs.IntVar(&o.subagents, "subagents", 0, "offer the model subagents, at most N open at once besides the session itself (0: none)")
	return func(ctx context.Context, args []string) error {
		if _, err := permissionLevel(o.perms); err != nil {
			return err
		}
		if o.maxTurns < 0 {
			return usagef("--max-turns must not be negative")
		}
		if o.subagents < 0 {
			return usagef("--subagents must not be negative")
		}
		if o.resume != "" && o.cont {
			return usagef("give --resume ID or --continue, not both")
		}
		prompt, err := promptText(args, e.stdin)
		if err != nil {
			return err
		}
		return exitCode(o.run(ctx, prompt, e))
	}
}

// permissionLevel parses --permissions.
func permissionLevel(s string) (agentv1.PermissionLevel, error) {
	level, ok := map[string]agentv1.PermissionLevel{
		"read-only":  agentv1.PermissionLevel_PERMISSION_LEVEL_READ_ONLY,
		"read-write": agentv1.PermissionLevel_PERMISSION_LEVEL_READ_WRITE,
		"full":       agentv1.PermissionLevel_PERMISSION_LEVEL_FULL,
	}[s]
	if !ok {
		return 0, usagef("--permissions must be read-only, read-write or full, not %q", s)
	}
	return level, nil
}

// run runs the prompt and returns the exit code; the flags are valid.
func (o *execOptions) run(ctx context.Context, prompt string, e env) int {
	level, err := permissionLevel(o.perms)
	if err != nil {
		return exitUsage
	}
	dir := o.dir
	if dir == "" {
		if dir, err = os.Getwd(); err != nil {
			fmt.Fprintln(e.stderr, "fabro:", err)
			return exitFailure
		}
	}
	if abs, err := filepath.Abs(dir); err == nil {
		dir = abs
	}

	// The stream outlives a first interrupt: it aborts the prompt and the
	// report still arrives.
	streamCtx, stopStream := context.WithCancel(context.WithoutCancel(ctx))
	defer stopStream()
	remote := o.cf.server != ""
	if !remote {
		// A bad file: say so before a stack starts. Its warnings come as
		// the session's settings_ignored events.
		if _, _, _, err := userSettings(o.settingsFile, dir); err != nil {
			fmt.Fprintln(e.stderr, "fabro:", err)
			return exitUsage
		}
	}
	conn, closeConn, err := o.connect(streamCtx, dir)
	if err != nil {
		fmt.Fprintln(e.stderr, "fabro:", err)
		return exitFailure
	}
	defer closeConn()
	client := agentv1.NewAgentServiceClient(conn)
	explainErr := func(err error) string {
		if !remote {
			return status.Convert(err).Message()
		}
		return o.cf.rpcError(err).Error()
	}

	opts := &agentv1.AgentOptions{}
	if o.maxTurns > 0 {
		n := int32(o.maxTurns)
		opts.MaxTurns = &n
	}
	if o.subagents > 0 {
		n := int32(min(o.subagents, 1<<20) + 1) // the root is one of the open sessions
		opts.Subagents = &agentv1.SubagentOptions{Enabled: true, MaxOpenSessions: &n}
	}
	// In process, the agent reads your file as its operator's (host-side
	// hooks and MCP servers included). A remote agent gets its rules and
	// sandbox-side parts on CreateSession; it refuses host-side ones.
	var toolSettings *agentv1.ToolSettings
	var approvedProject string
	if remote {
		var warnings []string
		if toolSettings, approvedProject, warnings, err = userSettings(o.settingsFile, dir); err != nil {
			fmt.Fprintln(e.stderr, "fabro:", err)
			return exitUsage
		}
		for _, w := range warnings {
			fmt.Fprintln(e.stderr, "warning:", w)
		}
	}
	last := newLastSessions(o.cf.dataDir)
	resumeID := o.resume
	if o.cont {
		if resumeID, err = last.latest(o.cf.server, dir); err != nil {
			fmt.Fprintln(e.stderr, "fabro:", err)
			return exitFailure
		}
	}
	var session *agentv1.Session
	if resumeID != "" {
		// The session's own sandbox went with it when it closed: it
		// continues on this directory, as a new exec would start.
		req := &agentv1.ResumeSessionRequest{SessionId: resumeID, Model: o.model,
			Sandbox: &agentv1.ResumeSessionRequest_SandboxSpec{SandboxSpec: sandboxSpec(o.sandboxDriver, dir)}}
		if o.maxTurns > 0 || o.subagents > 0 {
			req.Options = opts
		}
		resumed, err := client.ResumeSession(streamCtx, req)
		if err != nil {
			fmt.Fprintln(e.stderr, "fabro: resume session "+resumeID+":", explainErr(err))
			return exitFailure
		}
		session = resumed.GetSession()
	} else {
		created, err := client.CreateSession(streamCtx, &agentv1.CreateSessionRequest{
			Model:           o.model,
			Sandbox:         &agentv1.CreateSessionRequest_SandboxSpec{SandboxSpec: sandboxSpec(o.sandboxDriver, dir)},
			PermissionLevel: level,
			Options:         opts,
			Settings:        toolSettings,

			ApprovedProjectSettingsSha256: approvedProject,
		})
		if err != nil {
			fmt.Fprintln(e.stderr, "fabro:", missingKeyHint(explainErr(err), credentialsOf(err), remote))
			return exitFailure
		}
		session = created.GetSession()
	}
	id := session.GetSessionId()
	if err := last.record(o.cf.server, dir, id); err != nil {
		fmt.Fprintln(e.stderr, "warning: --continue will not find this session:", err)
	}
	where := "in this process"
	if remote {
		where = "on " + o.cf.server
	}
	if resumeID != "" {
		fmt.Fprintf(e.stderr, "session %s resumed (%s)\n", id, where)
	} else {
		fmt.Fprintf(e.stderr, "session %s (%s)\n", id, where)
		var emit func(*agentv1.AgentEvent)
		if o.format == formatStreamJSON {
			emit = func(ev *agentv1.AgentEvent) { writeStreamLine(e, ev) }
		}
		printSetupNotes(streamCtx, e, client, id, session.GetLastSequence(), emit)
	}
	defer client.CloseSession(context.WithoutCancel(streamCtx), &agentv1.CloseSessionRequest{SessionId: id})
	w := &watcher{
		e: e, client: client, id: id, remote: remote, server: o.cf.server, reattach: o.reattach,
		last:    map[string]uint64{id: session.GetLastSequence()},
		explain: explainErr,
		format:  o.format, maxCostMicros: o.maxCost.micros,
	}
	return w.prompt(ctx, streamCtx, &agentv1.PromptRequest{SessionId: id, Text: prompt})
}

// connect dials the agent service: --server's, else a stack started in
// this process whose sandbox allows dir. closeConn ends both.
func (o *execOptions) connect(streamCtx context.Context, dir string) (conn *grpc.ClientConn, closeConn func(), err error) {
	if o.cf.server != "" {
		conn, err = o.cf.dialServer()
		if err != nil {
			return nil, nil, err
		}
		return conn, func() { conn.Close() }, nil
	}
	// The in-process stack shares the data directory's vault with `fabro
	// serve`, so stored credentials work here too; its agent keeps records
	// and NATS apart, as a server may be running on the same directory.
	st, err := startStack(streamCtx, stackConfig{
		server:       server.Config{GRPCAddr: "127.0.0.1:0"},
		vault:        vault.Config{DataDir: o.cf.dataDir, LookupEnv: o.lookupEnv},
		agentDataDir: filepath.Join(o.cf.dataDir, "exec"),
		llmOverlay:   o.overlay,
		natsListen:   "none",
		// Its events reach this command through its Prompt stream: an
		// in-memory stream starts in constant time however many runs
		// came before (the session records stay on disk).
		memoryEvents: true,
		// The directory it was started in is the one sandbox root it allows.
		sandbox:      sandbox.Config{PluginDir: o.pluginDir, Security: sandbox.Security{AllowedRoots: []string{dir}}},
		settingsFile: o.settingsFile, // yours: this process is the agent's operator
	}, slog.New(slog.DiscardHandler))
	if err != nil {
		return nil, nil, err
	}
	stop := func() {
		st.srv.Shutdown(context.WithoutCancel(streamCtx))
		st.close()
	}
	// This command is the stack's only person: a user token in memory.
	conn, err = grpcclient.New("passthrough:///fabro-exec", grpcclient.Options{
		Dialer: st.srv.DialInProcess, Token: grpcclient.Static(st.tokens.Issue("exec", auth.RoleUser)),
	})
	if err != nil {
		stop()
		return nil, nil, err
	}
	return conn, func() { conn.Close(); stop() }, nil
}

// printSetupNotes prints what the session said while it was created (the
// events before the prompt's): settings files or fields not used, MCP
// servers or tools left out, other warnings. Nothing of that is silent.
// With emit (stream-json), every setup event goes to it too.
func printSetupNotes(ctx context.Context, e env, client agentv1.AgentServiceClient, id string, last uint64, emit func(*agentv1.AgentEvent)) {
	stream, err := client.StreamEvents(ctx, &agentv1.StreamEventsRequest{SessionId: id, FromSequence: 1})
	if err != nil {
		fmt.Fprintln(e.stderr, "fabro: the session's setup events:", status.Convert(err).Message())
		return
	}
	for {
		resp, err := stream.Recv()
		if err != nil {
			if err != io.EOF {
				fmt.Fprintln(e.stderr, "fabro: the session's setup events:", status.Convert(err).Message())
			}
			return
		}
		ev := resp.GetEvent()
		if ev.GetSequence() > last {
			return
		}
		if emit != nil {
			emit(ev)
		}
		if n := setupNote(ev); n != "" {
			fmt.Fprintln(e.stderr, n)
		}
	}
}

// setupNote is the line a settings_ignored, extension_failed or warning
// event prints; "" for other events.
func setupNote(ev *agentv1.AgentEvent) string {
	switch {
	case ev.GetSettingsIgnored() != nil:
		ig := ev.GetSettingsIgnored()
		if ig.GetField() != "" {
			return fmt.Sprintf("warning: %s: %s", ig.GetFile(), ig.GetReason())
		}
		return "warning: " + ig.GetReason()
	case ev.GetExtensionFailed() != nil:
		return "warning: " + ev.GetExtensionFailed().GetReason()
	case ev.GetWarning() != nil:
		return "warning: " + ev.GetWarning().GetMessage()
	}
	return ""
}

// watcher runs a prompt on a session and prints its events, once each,
// across reconnections.
type watcher struct {
	e        env
	client   agentv1.AgentServiceClient
	id       string // the root session
	remote   bool
	server   string
	reattach time.Duration
	explain  func(error) string

	last     map[string]uint64 // the last sequence printed, per session
	promptID string
	midLine  bool // the cursor is after text on a line
	turnText bool // text of the current model turn was printed
	asker    *approvalAsker

	format        outputFormat
	maxCostMicros int64 // --max-cost; 0: none
	spentMicros   int64 // what the prompt's turns cost so far, subagents' included
	budgetStop    bool  // the prompt was aborted for --max-cost
}

// prompt starts the prompt and prints its events until its report, and
// returns the exit code. On a remote server a dropped stream is resumed
// with StreamEvents from the last event seen.
func (w *watcher) prompt(ctx, streamCtx context.Context, req *agentv1.PromptRequest) int {
	w.asker = newApprovalAsker(w.e)
	stream, err := w.client.Prompt(streamCtx, req)
	if err != nil {
		fmt.Fprintln(w.e.stderr, "fabro:", w.explain(err))
		return exitFailure
	}
	// An interrupt aborts the prompt; its report still arrives. The
	// goroutine ends with the prompt's watch.
	watching := make(chan struct{})
	defer close(watching)
	go func() {
		select {
		case <-ctx.Done():
			w.client.Abort(context.WithoutCancel(streamCtx), &agentv1.AbortRequest{SessionId: w.id, Reason: "interrupted"})
		case <-watching:
		}
	}()
	next := func() (*agentv1.AgentEvent, error) {
		resp, err := stream.Recv()
		return resp.GetEvent(), err
	}
	for {
		ev, err := next()
		if err != nil {
			if w.remote && ctx.Err() == nil && reattachable(err) {
				if next, err = w.reattachStream(ctx, streamCtx, err); err == nil {
					continue
				}
			}
			w.endLine()
			fmt.Fprintln(w.e.stderr, "fabro:", w.explain(err))
			w.printSession()
			if ctx.Err() != nil {
				return exitInterrupted
			}
			return exitFailure
		}
		if code, done := w.handle(ctx, streamCtx, ev); done {
			return code
		}
	}
}

// reattachable says whether a stream error is the connection's, not the
// server's answer.
func reattachable(err error) bool {
	st := status.Convert(err)
	return st.Code() == codes.Unavailable || st.Code() == codes.Internal && strings.Contains(st.Message(), "RST_STREAM")
}

// reattachStream watches the session again from the event after the last
// one printed, waiting up to --reattach-timeout for the server to answer.
func (w *watcher) reattachStream(ctx, streamCtx context.Context, cause error) (func() (*agentv1.AgentEvent, error), error) {
	// The answer on stdout stays whole: the notes go to stderr, on a line
	// of their own on a terminal that shows both.
	if w.midLine {
		fmt.Fprintln(w.e.stderr)
	}
	from := w.last[w.id] + 1
	fmt.Fprintf(w.e.stderr, "fabro: lost the stream (%s); reattaching to session %s from event %d\n", firstLine(status.Convert(cause).Message()), w.id, from)
	deadline := time.Now().Add(w.reattach)
	for {
		// A unary call proves the server answers and still has the session
		// (a stream may stay quiet for as long as a tool runs); then the
		// stream has no deadline.
		pctx, cancel := context.WithDeadline(ctx, deadline)
		_, err := w.client.GetSession(pctx, &agentv1.GetSessionRequest{SessionId: w.id}, grpc.WaitForReady(true))
		cancel()
		if err == nil {
			var stream grpc.ServerStreamingClient[agentv1.StreamEventsResponse]
			stream, err = w.client.StreamEvents(streamCtx, &agentv1.StreamEventsRequest{
				SessionId: w.id, FromSequence: from, Follow: true, IncludeSubagents: true, PromptId: w.promptID,
			}, grpc.WaitForReady(true))
			if err == nil {
				fmt.Fprintf(w.e.stderr, "fabro: reattached to session %s\n", w.id)
				return func() (*agentv1.AgentEvent, error) {
					resp, err := stream.Recv()
					return resp.GetEvent(), err
				}, nil
			}
		}
		if ctx.Err() != nil { // interrupted while waiting
			return nil, ctx.Err()
		}
		if time.Now().After(deadline) || !reattachable(err) && status.Code(err) != codes.DeadlineExceeded {
			return nil, fmt.Errorf("could not reattach within %s: %w", w.reattach, err)
		}
		select {
		case <-time.After(200 * time.Millisecond):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// handle prints one event; done with the exit code at the prompt's end.
func (w *watcher) handle(ctx, streamCtx context.Context, ev *agentv1.AgentEvent) (int, bool) {
	sid := ev.GetSessionId()
	if seq := ev.GetSequence(); seq != 0 {
		if seq <= w.last[sid] {
			return 0, false // seen before the stream was resumed
		}
		w.last[sid] = seq
	}
	own := sid == w.id
	if own && ev.GetPromptId() != "" {
		if w.promptID == "" && ev.GetPromptStarted() != nil {
			w.promptID = ev.GetPromptId()
		}
		if w.promptID != "" && ev.GetPromptId() != w.promptID {
			return 0, false // another prompt's, replayed by StreamEvents
		}
	}
	if w.maxCostMicros > 0 {
		w.checkBudget(streamCtx, ev)
	}
	if w.format == formatJSON || w.format == formatStreamJSON { // "" (sessions resume) is text
		return w.handleMachine(ctx, streamCtx, ev, own)
	}
	out, errOut := w.e.stdout, w.e.stderr
	if ar := ev.GetApprovalRequested(); ar != nil && own {
		w.endLine()
		req := w.asker.ask(ctx, ar)
		req.SessionId = w.id
		if _, err := w.client.Approve(streamCtx, req); err != nil {
			fmt.Fprintln(errOut, "fabro: approve:", w.explain(err))
		}
		return 0, false
	}
	if !own { // a subagent's event: its tool calls only
		if c := ev.GetToolCallStarted(); c != nil {
			w.endLine()
			fmt.Fprintf(out, "  ↳ [%s] %s %s\n", sid, c.GetToolName(), clip(c.GetArguments(), 100))
		}
		return 0, false
	}
	switch {
	case ev.GetTextDelta() != nil:
		d := ev.GetTextDelta().GetDelta()
		fmt.Fprint(out, d)
		if d != "" {
			w.midLine = !strings.HasSuffix(d, "\n")
			w.turnText = true
		}
	case ev.GetTurnStarted() != nil:
		w.turnText = false
	case ev.GetAssistantOutputReplace() != nil:
		// The model's stream failed after some text and the turn is
		// replayed: what was printed of it is void.
		if w.turnText {
			w.endLine()
			fmt.Fprintf(out, "↺ [the reply above was cut off and is discarded; the model answers again (attempt %d)]\n", ev.GetAssistantOutputReplace().GetAttempt())
			w.turnText = false
		}
	case ev.GetLlmRetry() != nil:
		r := ev.GetLlmRetry()
		w.endLine()
		fmt.Fprintf(errOut, "warning: the model call failed (%s); retrying in %s (attempt %d)\n",
			firstLine(r.GetError().GetMessage()), r.GetDelay().AsDuration().Round(time.Millisecond), r.GetAttempt())
	case ev.GetToolCallStarted() != nil:
		w.endLine()
		w.turnText = false
		c := ev.GetToolCallStarted()
		fmt.Fprintf(out, "▸ %s %s\n", c.GetToolName(), clip(c.GetArguments(), 120))
	case ev.GetToolCallCompleted() != nil:
		c := ev.GetToolCallCompleted()
		w.endLine()
		if c.GetIsError() {
			// Whole: the reason is often on its last line, not its first.
			fmt.Fprintf(out, "  ✗ %s failed: %s\n", c.GetToolName(), strings.ReplaceAll(toolErrorText(c.GetOutput()), "\n", "\n    "))
		} else {
			fmt.Fprintf(out, "  ✓ %s done (%s)\n", c.GetToolName(), c.GetDuration().AsDuration().Round(1e6))
		}
	case ev.GetWarning() != nil:
		w.endLine()
		fmt.Fprintf(errOut, "warning: %s\n", ev.GetWarning().GetMessage())
	case ev.GetSettingsIgnored() != nil || ev.GetExtensionFailed() != nil:
		w.endLine()
		fmt.Fprintln(errOut, setupNote(ev))
	case ev.GetPromptCompleted() != nil:
		w.endLine()
		rep := ev.GetPromptCompleted().GetReport()
		st, code := w.outcome(rep)
		fmt.Fprintf(errOut, "[%s: %d turns, %d tool calls, %d tokens in, %d out]\n", st,
			rep.GetTurns(), rep.GetToolCalls(), rep.GetUsage().GetInputTokens()+rep.GetUsage().GetCacheReadTokens(), rep.GetUsage().GetOutputTokens())
		w.printOutcomeError(rep, code)
		w.printSession()
		return code, true
	}
	return 0, false
}

// outcome is the status a prompt's report shows and exec's exit code.
func (w *watcher) outcome(rep *agentv1.PromptReport) (string, int) {
	st := strings.TrimPrefix(rep.GetStatus().String(), "PROMPT_STATUS_")
	switch rep.GetStatus() {
	case agentv1.PromptStatus_PROMPT_STATUS_COMPLETED:
		return st, exitOK
	case agentv1.PromptStatus_PROMPT_STATUS_CANCELLED:
		if w.budgetStop {
			return statusBudgetExceeded, exitBudget
		}
		return st, exitInterrupted
	}
	return st, exitFailure
}

// printOutcomeError says on stderr why a prompt did not complete.
func (w *watcher) printOutcomeError(rep *agentv1.PromptReport, code int) {
	switch {
	case code == exitBudget:
		fmt.Fprintf(w.e.stderr, "fabro: stopped by --max-cost %s: the prompt cost $%.6f and its next turn would have gone past the limit\n",
			(&usdFlag{w.maxCostMicros}).String(), float64(w.spentMicros)/1e6)
	case rep.GetError().GetMessage() != "" && code != exitOK:
		fmt.Fprintln(w.e.stderr, "fabro:", missingKeyHint(rep.GetError().GetMessage(), rep.GetError().GetLlm().GetMissingCredentials(), w.remote))
	}
}

// checkBudget adds each model turn's cost (a subagent's too) and aborts
// the prompt when the next turn, if it costs what this one did (a turn's
// context only grows), would take it past --max-cost. A turn that asked
// for no tool is the last: nothing follows it to stop.
func (w *watcher) checkBudget(ctx context.Context, ev *agentv1.AgentEvent) {
	am := ev.GetAssistantMessage()
	if am == nil || w.budgetStop {
		return
	}
	turn := am.GetCost().GetTotalUsdMicros()
	w.spentMicros += turn
	if am.GetToolCallCount() == 0 && ev.GetSessionId() == w.id {
		return
	}
	if w.spentMicros+turn <= w.maxCostMicros {
		return
	}
	w.budgetStop = true
	reason := fmt.Sprintf("--max-cost %s: spent $%.6f, the next turn would exceed it", (&usdFlag{w.maxCostMicros}).String(), float64(w.spentMicros)/1e6)
	if _, err := w.client.Abort(context.WithoutCancel(ctx), &agentv1.AbortRequest{SessionId: w.id, Reason: reason}); err != nil {
		fmt.Fprintln(w.e.stderr, "fabro: stopping the prompt for --max-cost:", w.explain(err))
	}
}

// handleMachine is handle for --output-format json and stream-json: stdout
// gets JSON only (every event as a line for stream-json), then the result.
func (w *watcher) handleMachine(ctx, streamCtx context.Context, ev *agentv1.AgentEvent, own bool) (int, bool) {
	if w.format == formatStreamJSON {
		writeStreamLine(w.e, ev)
	}
	if !own {
		return 0, false
	}
	switch {
	case ev.GetApprovalRequested() != nil:
		req := w.asker.ask(ctx, ev.GetApprovalRequested())
		req.SessionId = w.id
		if _, err := w.client.Approve(streamCtx, req); err != nil {
			fmt.Fprintln(w.e.stderr, "fabro: approve:", w.explain(err))
		}
	case ev.GetWarning() != nil:
		fmt.Fprintf(w.e.stderr, "warning: %s\n", ev.GetWarning().GetMessage())
	case ev.GetPromptCompleted() != nil:
		rep := ev.GetPromptCompleted().GetReport()
		st, code := w.outcome(rep)
		res := newExecResult(w.id, rep, st, code, w.maxCostMicros)
		var b []byte
		var err error
		if w.format == formatJSON {
			b, err = json.MarshalIndent(res, "", "  ")
		} else {
			b, err = json.Marshal(res)
		}
		if err != nil {
			fmt.Fprintln(w.e.stderr, "fabro: encoding the result:", err)
			return exitFailure, true
		}
		w.e.stdout.Write(append(b, '\n'))
		w.printOutcomeError(rep, code)
		w.printSession()
		return code, true
	}
	return 0, false
}

// endLine ends a line of answer text before anything else is printed.
func (w *watcher) endLine() {
	if w.midLine {
		fmt.Fprintln(w.e.stdout)
		w.midLine = false
	}
}

// printSession names the session at the end, with what can be done next.
func (w *watcher) printSession() {
	if w.remote {
		fmt.Fprintf(w.e.stderr, "session %s: see it with `fabro sessions show %s`, continue it with `fabro sessions resume %s \"PROMPT\"`\n", w.id, w.id, w.id)
		return
	}
	fmt.Fprintf(w.e.stderr, "session %s (ran in this process; its record is in the data directory's exec/)\n", w.id)
}

// credentialsOf returns the credentials a failed call's error says are
// missing (the gateway's ErrorDetail, passed through by the agent).
func credentialsOf(err error) []string {
	for _, d := range status.Convert(err).Details() {
		switch d := d.(type) {
		case *llmv1.ErrorDetail:
			if len(d.GetMissingCredentials()) > 0 {
				return d.GetMissingCredentials()
			}
		case *agentv1.AgentError:
			if m := d.GetLlm().GetMissingCredentials(); len(m) > 0 {
				return m
			}
		}
	}
	if m := missingCredentialRE.FindStringSubmatch(status.Convert(err).Message()); m != nil {
		return strings.Split(m[1], " or ")
	}
	return nil
}

// setItRE is the gateway's own advice, replaced by both ways.
var setItRE = regexp.MustCompile(`:? set it with ` + "`" + `fabro secret set [A-Z0-9_]+` + "`")

var missingCredentialRE = regexp.MustCompile(`needs the credential ([A-Z0-9_]+(?: or [A-Z0-9_]+)*)`)

// missingKeyHint adds to a missing-credential message both ways to give
// the key: the vault of a running server, or the environment of an
// in-process run.
func missingKeyHint(msg string, missing []string, remote bool) string {
	if len(missing) == 0 {
		if m := missingCredentialRE.FindStringSubmatch(msg); m != nil {
			missing = strings.Split(m[1], " or ")
		}
	}
	if len(missing) == 0 {
		return msg
	}
	name := missing[0]
	msg = strings.TrimRight(setItRE.ReplaceAllString(msg, ""), ".;: ")
	env := fmt.Sprintf("in the environment of an in-process run (fabro exec without --server): %s=... fabro exec ...", name)
	if remote {
		env = fmt.Sprintf("or in the environment of the server: %s=... fabro serve (it reads its own environment, not yours)", name)
	}
	hint := fmt.Sprintf("%s; give it one of two ways:\n"+
		"  - in the vault, through the running server: fabro secret set %s (it asks for the value; in-process runs read the same data directory's vault)\n"+
		"  - %s", msg, name, env)
	return hint
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
