package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	agentv1 "github.com/fabro-sh/fabro-go/gen/fabro/agent/v1"
)

// sessionsCommand is `fabro sessions list|show|resume|rm|checkpoints|diff|rewind`, against the
// agent of the server at --server.
func sessionsCommand() *command {
	return &command{
		name: "sessions", summary: "list, inspect, resume and delete the server's agent sessions",
		long: `The agent sessions of the server at --server: the ones fabro exec --server
started (it prints their ids), and any other client's of yours.`,
		examples: `  fabro sessions list
  fabro sessions show s_0123abcd
  fabro sessions resume s_0123abcd "now add the docs"
  fabro sessions resume s_0123abcd --continue
  fabro sessions rm s_0123abcd
  fabro sessions diff s_0123abcd --turn 2
  fabro sessions rewind s_0123abcd --to 1 --conversation`,
		subs: append([]*command{{
			name: "list", aliases: []string{"ls"}, summary: "list sessions, newest first",
			examples: "  fabro sessions list\n  fabro sessions list --state running --subagents",
			define:   sessionsList,
		}, {
			name: "show", args: "ID", summary: "show a session: state, model, sandbox, usage",
			examples: "  fabro sessions show s_0123abcd",
			define:   sessionsShow,
		}, {
			name: "resume", args: `ID ["PROMPT"]`, summary: "load a closed or suspended session again, and run a prompt on it",
			long: `Loads the session from its durable record (a closed one, or a suspended one
after a server restart). With PROMPT, runs it and prints its stream as
fabro exec does; with --continue, finishes the prompt that was left
unfinished. A session that is already loaded is used as it is.`,
			examples: "  fabro sessions resume s_0123abcd \"and now the README\"\n  fabro sessions resume s_0123abcd --continue\n  fabro sessions resume s_0123abcd --model openai/gpt-5",
			define:   sessionsResume,
		}, {
			name: "rm", aliases: []string{"delete"}, args: "ID...", summary: "delete sessions for good: their records, events and subagents",
			examples: "  fabro sessions rm s_0123abcd\n  fabro sessions rm s_0123abcd s_4567efgh",
			define:   sessionsRm,
		}}, checkpointCommands()...),
	}
}

// sessionStates are --state's words.
var sessionStates = map[string]agentv1.SessionState{
	"idle": agentv1.SessionState_SESSION_STATE_IDLE, "running": agentv1.SessionState_SESSION_STATE_RUNNING,
	"parked": agentv1.SessionState_SESSION_STATE_PARKED, "closed": agentv1.SessionState_SESSION_STATE_CLOSED,
	"suspended": agentv1.SessionState_SESSION_STATE_SUSPENDED,
}

func stateName(s agentv1.SessionState) string {
	return strings.ToLower(strings.TrimPrefix(s.String(), "SESSION_STATE_"))
}

func sessionsList(fs *flag.FlagSet, e env) runner {
	c := newClientFlags(fs, e)
	state := fs.String("state", "", "only sessions in this state: idle, running, parked, closed or suspended")
	subagents := fs.Bool("subagents", false, "include subagent sessions")
	limit := fs.Int("limit", 50, "most sessions to list (0: all)")
	out := newOutputFlag(fs)
	return func(ctx context.Context, args []string) error {
		if len(args) > 0 {
			return usagef("sessions list takes no arguments")
		}
		req := &agentv1.ListSessionsRequest{IncludeSubagents: *subagents}
		if *state != "" {
			st, ok := sessionStates[*state]
			if !ok {
				return usagef("--state must be idle, running, parked, closed or suspended, not %q", *state)
			}
			req.States = []agentv1.SessionState{st}
		}
		if *limit < 0 {
			return usagef("--limit must not be negative")
		}
		conn, ctx, done, err := c.connect(ctx)
		if err != nil {
			return err
		}
		defer done()
		client := agentv1.NewAgentServiceClient(conn)
		tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "SESSION\tSTATE\tMODEL\tPROMPTS\tTOKENS\tUPDATED")
		n := 0
		all := &agentv1.ListSessionsResponse{}
		for {
			if *limit > 0 {
				req.PageSize = int32(min(*limit-n, 500))
			}
			resp, err := client.ListSessions(ctx, req)
			if err != nil {
				return c.rpcError(err)
			}
			all.Sessions, all.NextPageToken = append(all.Sessions, resp.GetSessions()...), resp.GetNextPageToken()
			for _, s := range resp.GetSessions() {
				id := s.GetSessionId()
				if s.GetParentSessionId() != "" {
					id += " (of " + s.GetParentSessionId() + ")"
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%s\n", id, stateName(s.GetState()), modelOf(s), s.GetPromptCount(),
					s.GetUsage().GetInputTokens()+s.GetUsage().GetOutputTokens(), s.GetUpdateTime().AsTime().Local().Format(time.DateTime))
				n++
			}
			if resp.GetNextPageToken() == "" || *limit > 0 && n >= *limit {
				break
			}
			req.PageToken = resp.GetNextPageToken()
		}
		if out.json() {
			return out.print(e.stdout, all)
		}
		return tw.Flush()
	}
}

func sessionsResume(fs *flag.FlagSet, e env) runner {
	c := newClientFlags(fs, e)
	model := fs.String("model", "", "another model for the resumed session (provider/model, id or alias); its own when empty")
	cont := fs.Bool("continue", false, "finish the prompt that was left unfinished")
	reattach := fs.Duration("reattach-timeout", time.Minute, "how long to keep trying to reattach to the server after the connection drops")
	dir := fs.String("dir", "", "directory of the replacement sandbox when the session's own is gone (default: the current directory)")
	driver := fs.String("sandbox", "local", "driver of the replacement sandbox: local, docker or another driver of the server")
	return func(ctx context.Context, args []string) error {
		given := map[string]bool{}
		fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
		switch {
		case len(args) == 0 || len(args) > 2:
			return usagef(`sessions resume takes a session ID and at most one prompt: fabro sessions resume ID ["PROMPT"]`)
		case len(args) == 2 && *cont:
			return usagef("give a PROMPT or --continue, not both")
		case len(args) == 2 && strings.TrimSpace(args[1]) == "":
			return usagef("the prompt is empty")
		}
		id := args[0]
		conn, err := c.dialServer()
		if err != nil {
			return err
		}
		defer conn.Close()
		client := agentv1.NewAgentServiceClient(conn)
		spec := func() (*agentv1.ResumeSessionRequest_SandboxSpec, error) {
			d := *dir
			if d == "" {
				var err error
				if d, err = os.Getwd(); err != nil {
					return nil, err
				}
			}
			d, err := filepath.Abs(d)
			return &agentv1.ResumeSessionRequest_SandboxSpec{SandboxSpec: sandboxSpec(*driver, d)}, err
		}
		req := &agentv1.ResumeSessionRequest{SessionId: id, Model: *model}
		if given["dir"] || given["sandbox"] {
			if req.Sandbox, err = spec(); err != nil {
				return err
			}
		}
		rctx, cancel := context.WithTimeout(ctx, c.timeout)
		resp, err := client.ResumeSession(rctx, req)
		cancel()
		if st := status.Convert(err); req.Sandbox == nil && st.Code() == codes.FailedPrecondition && strings.Contains(st.Message(), "sandbox") && strings.Contains(st.Message(), "gone") {
			// A session that owned its sandbox deleted it when it closed:
			// resume it in a new one on this directory.
			if req.Sandbox, err = spec(); err != nil {
				return err
			}
			fmt.Fprintf(e.stderr, "the sandbox of session %s is gone; resuming it in a new one (%s %s)\n", id, *driver, req.GetSandboxSpec().GetWorkingDirectory()+req.GetSandboxSpec().GetDriverOptions()["host_dir"])
			rctx, cancel := context.WithTimeout(ctx, c.timeout)
			resp, err = client.ResumeSession(rctx, req)
			cancel()
		}
		var last uint64
		switch {
		case err == nil:
			last = resp.GetSession().GetLastSequence()
			fmt.Fprintf(e.stderr, "session %s resumed (%s)\n", id, stateName(resp.GetSession().GetState()))
		case status.Code(err) == codes.FailedPrecondition && strings.Contains(status.Convert(err).Message(), "already"):
			// Loaded already: prompt it as it is.
			fmt.Fprintf(e.stderr, "session %s is loaded already\n", id)
			hctx, cancel := context.WithTimeout(ctx, c.timeout)
			h, herr := client.GetHistory(hctx, &agentv1.GetHistoryRequest{SessionId: id})
			cancel()
			if herr != nil {
				return c.rpcError(herr)
			}
			last = h.GetSequence()
		default:
			return c.rpcError(err)
		}
		if len(args) == 1 && !*cont {
			fmt.Fprintf(e.stderr, "run a prompt on it with `fabro sessions resume %s \"PROMPT\"`\n", id)
			return nil
		}
		preq := &agentv1.PromptRequest{SessionId: id, ContinueUnfinished: *cont}
		if len(args) == 2 {
			preq.Text = args[1]
		}
		streamCtx, stop := context.WithCancel(context.WithoutCancel(ctx))
		defer stop()
		w := &watcher{
			e: e, client: client, id: id, remote: true, server: c.server, reattach: *reattach,
			last:    map[string]uint64{id: last},
			explain: func(err error) string { return c.rpcError(err).Error() },
		}
		return exitCode(w.prompt(ctx, streamCtx, preq))
	}
}

func sessionsShow(fs *flag.FlagSet, e env) runner {
	c := newClientFlags(fs, e)
	out := newOutputFlag(fs)
	return func(ctx context.Context, args []string) error {
		if len(args) != 1 {
			return usagef("sessions show takes one session ID (see fabro sessions list)")
		}
		conn, ctx, done, err := c.connect(ctx)
		if err != nil {
			return err
		}
		defer done()
		resp, err := agentv1.NewAgentServiceClient(conn).GetSession(ctx, &agentv1.GetSessionRequest{SessionId: args[0]})
		if err != nil {
			return c.rpcError(err)
		}
		if out.json() {
			return out.print(e.stdout, resp)
		}
		s := resp.GetSession()
		tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
		row := func(k string, v any) { fmt.Fprintf(tw, "%s\t%v\n", k, v) }
		row("session", s.GetSessionId())
		if s.GetParentSessionId() != "" {
			row("parent", s.GetParentSessionId())
			row("root", s.GetRootSessionId())
		}
		row("state", stateName(s.GetState()))
		if s.GetActivePromptId() != "" {
			row("prompt running", s.GetActivePromptId())
		}
		row("model", modelOf(s))
		row("permissions", strings.ReplaceAll(strings.ToLower(strings.TrimPrefix(s.GetPermissionLevel().String(), "PERMISSION_LEVEL_")), "_", "-"))
		sandbox := s.GetSandboxId()
		if s.GetSandboxOwned() {
			sandbox += " (the session's own)"
		}
		row("sandbox", sandbox)
		if s.GetPrincipal() != "" {
			row("owner", s.GetPrincipal())
		}
		row("created", s.GetCreateTime().AsTime().Local().Format(time.DateTime))
		row("updated", s.GetUpdateTime().AsTime().Local().Format(time.DateTime))
		if s.GetExpireTime() != nil {
			row("expires", s.GetExpireTime().AsTime().Local().Format(time.DateTime))
		}
		row("prompts", s.GetPromptCount())
		u := s.GetUsage()
		row("tokens", fmt.Sprintf("%d in, %d out", u.GetInputTokens()+u.GetCacheReadTokens(), u.GetOutputTokens()))
		row("events", s.GetLastSequence())
		return tw.Flush()
	}
}

func sessionsRm(fs *flag.FlagSet, e env) runner {
	c := newClientFlags(fs, e)
	return func(ctx context.Context, args []string) error {
		if len(args) == 0 {
			return usagef("sessions rm takes the IDs of the sessions to delete (see fabro sessions list)")
		}
		conn, ctx, done, err := c.connect(ctx)
		if err != nil {
			return err
		}
		defer done()
		client := agentv1.NewAgentServiceClient(conn)
		for _, id := range args {
			if _, err := client.DeleteSession(ctx, &agentv1.DeleteSessionRequest{SessionId: id}); err != nil {
				if len(args) == 1 {
					return c.rpcError(err)
				}
				return fmt.Errorf("%s: %w", id, c.rpcError(err))
			}
			fmt.Fprintf(e.stdout, "deleted %s\n", id)
		}
		return nil
	}
}

func modelOf(s *agentv1.Session) string {
	if r := s.GetRoute(); r.GetModel() != "" {
		return r.GetProvider() + "/" + r.GetModel()
	}
	return "-"
}
