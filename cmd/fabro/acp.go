package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"

	acp "github.com/coder/acp-go-sdk"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	agentv1 "github.com/fabro-sh/fabro-go/gen/fabro/agent/v1"
	llmv1 "github.com/fabro-sh/fabro-go/gen/fabro/llm/v1"
)

// acpCommand is `fabro acp`.
func acpCommand() *command {
	return &command{
		name: "acp", summary: "be an Agent Client Protocol agent on stdio, for editors (Zed, JetBrains, Neovim, Emacs)",
		long: `Speaks the Agent Client Protocol (v1, JSON-RPC on stdin and stdout) as the
agent of an editor that starts it: session/new creates a fabro session on
the editor's directory, session/prompt runs a prompt and streams its
answer, reasoning and tool calls as session/update notifications, a tool
call that needs approval becomes session/request_permission, session/cancel
aborts the prompt, and session/load continues a fabro session (its history
replayed to the editor first).

As with fabro exec, the agent runs in this process (on --dir, by default
the directory the editor starts it in: a session's directory must be
inside it) or on --server. stdout carries the protocol only; diagnostics
go to stderr. docs/ACP.md shows the editors' settings.`,
		examples: `  fabro acp                                  # what an editor runs
  fabro acp --server 127.0.0.1:7700 --permissions read-only
  fabro acp --sandbox docker --model anthropic/claude-sonnet-4.5`,
		define: acpFlags,
	}
}

func acpFlags(fs *flag.FlagSet, e env) runner {
	o := &execOptions{lookupEnv: e.lookupEnv}
	fs.StringVar(&o.model, "model", "", "model selector (provider/model, id or alias); the catalog default when empty")
	fs.StringVar(&o.perms, "permissions", "read-write", "tool permissions of its sessions: read-only, read-write or full")
	fs.IntVar(&o.maxTurns, "max-turns", 0, "most model turns a prompt takes (0: unlimited)")
	o.cf.register(fs, "", e)
	fs.Lookup("server").Usage = "address of the fabro server to run on; empty runs every service in this process"
	fs.StringVar(&o.dir, "dir", "", "the directory sessions may work in, at or below (in-process stack; default: the current directory)")
	fs.StringVar(&o.sandboxDriver, "sandbox", "local", "where the agent's tools run: local, docker or another driver of the stack")
	fs.StringVar(&o.overlay, "llm-catalog-overlay", "", "JSON catalog file merged over the built-in model catalog (in-process stack)")
	fs.StringVar(&o.pluginDir, "sandbox-plugin-dir", "", "directory of sandbox driver plugins for the in-process stack (docs/plugins.md)")
	fs.Lookup("data-dir").Usage = "data directory of the in-process stack (or of the local fabro serve, for its admin token)"
	fs.StringVar(&o.settingsFile, "settings", defaultSettingsFile(e.lookupEnv), "your tool settings file (permission rules, hooks, MCP servers, trusted project settings); missing: none")
	return func(ctx context.Context, args []string) error {
		if len(args) > 0 {
			return usagef("acp takes no arguments (it reads the protocol on stdin)")
		}
		level, err := permissionLevel(o.perms)
		if err != nil {
			return err
		}
		if o.maxTurns < 0 {
			return usagef("--max-turns must not be negative")
		}
		return exitCode(o.serveACP(ctx, e, level))
	}
}

// serveACP runs the protocol on stdin and stdout until the editor closes
// them (or an interrupt), and returns the exit code.
func (o *execOptions) serveACP(ctx context.Context, e env, level agentv1.PermissionLevel) int {
	dir := o.dir
	if dir == "" {
		var err error
		if dir, err = os.Getwd(); err != nil {
			fmt.Fprintln(e.stderr, "fabro:", err)
			return exitFailure
		}
	}
	if abs, err := filepath.Abs(dir); err == nil {
		dir = abs
	}
	if o.cf.server == "" {
		if _, _, _, err := userSettings(o.settingsFile, dir); err != nil {
			fmt.Fprintln(e.stderr, "fabro:", err)
			return exitUsage
		}
	}
	// The stack outlives an interrupt long enough to abort what runs.
	stackCtx, stop := context.WithCancel(context.WithoutCancel(ctx))
	defer stop()
	conn, closeConn, err := o.connect(stackCtx, dir)
	if err != nil {
		fmt.Fprintln(e.stderr, "fabro:", err)
		return exitFailure
	}
	defer closeConn()
	a := &acpAgent{
		o: o, e: e, level: level, root: dir,
		client:   agentv1.NewAgentServiceClient(conn),
		sessions: map[string]*acpSession{},
	}
	out := &lockedWriter{w: e.stdout}
	in, startReading := filterJSONRPC(e.stdin, out)
	defer in.Close()
	// The SDK logs to the default logger (SetLogger races its reader):
	// warnings only, on stderr.
	slog.SetDefault(slog.New(slog.NewTextHandler(e.stderr, &slog.HandlerOptions{Level: slog.LevelWarn})))
	asc := acp.NewAgentSideConnection(a, out, in)
	a.conn = asc
	startReading() // after a.conn is set: no request reaches a before it
	select {
	case <-asc.Done():
	case <-ctx.Done():
	}
	a.closeAll()
	return exitOK
}

// acpAgent maps ACP's agent methods onto the agent service. ACP session
// ids are fabro session ids.
type acpAgent struct {
	o      *execOptions
	e      env
	level  agentv1.PermissionLevel
	root   string
	client agentv1.AgentServiceClient
	conn   *acp.AgentSideConnection

	mu       sync.Mutex
	sessions map[string]*acpSession // the sessions this connection opened
}

// acpSession is one session of the connection.
type acpSession struct {
	id   string
	dir  string // its working directory, for the editor's absolute paths
	last uint64 // the last event sequence sent to the editor
}

var (
	_ acp.Agent       = (*acpAgent)(nil)
	_ acp.AgentLoader = (*acpAgent)(nil)
)

func (a *acpAgent) Initialize(_ context.Context, p acp.InitializeRequest) (acp.InitializeResponse, error) {
	return acp.InitializeResponse{
		ProtocolVersion: acp.ProtocolVersionNumber,
		AgentCapabilities: acp.AgentCapabilities{
			LoadSession: true,
			// Context the editor embeds is text the prompt carries; images
			// and audio are not taken.
			PromptCapabilities: acp.PromptCapabilities{EmbeddedContext: true},
		},
		AgentInfo:   &acp.Implementation{Name: "fabro", Version: currentBuild().version},
		AuthMethods: []acp.AuthMethod{},
	}, nil
}

func (a *acpAgent) Authenticate(context.Context, acp.AuthenticateRequest) (acp.AuthenticateResponse, error) {
	// Credentials are the stack's (vault or environment), never the editor's.
	return acp.AuthenticateResponse{}, nil
}

// sessionDir checks a session's cwd: absolute, and inside --dir for the
// in-process stack (whose sandbox allows nothing else).
func (a *acpAgent) sessionDir(cwd string) (string, error) {
	if !filepath.IsAbs(cwd) {
		return "", acp.NewInvalidParams(map[string]any{"error": fmt.Sprintf("cwd must be an absolute path, not %q", cwd)})
	}
	cwd = filepath.Clean(cwd)
	if a.o.cf.server == "" {
		if rel, err := filepath.Rel(a.root, cwd); err != nil || rel == ".." || strings.HasPrefix(rel, "../") {
			return "", acp.NewInvalidParams(map[string]any{"error": fmt.Sprintf("cwd %s is outside %s, the directory fabro acp was started for (--dir)", cwd, a.root)})
		}
	}
	return cwd, nil
}

func (a *acpAgent) NewSession(ctx context.Context, p acp.NewSessionRequest) (acp.NewSessionResponse, error) {
	dir, err := a.sessionDir(p.Cwd)
	if err != nil {
		return acp.NewSessionResponse{}, err
	}
	if len(p.McpServers) > 0 {
		slog.New(slog.NewTextHandler(a.e.stderr, nil)).Warn("fabro acp: the editor's MCP servers are not used; give them in your settings file", "count", len(p.McpServers))
	}
	req := &agentv1.CreateSessionRequest{
		Model:           a.o.model,
		Sandbox:         &agentv1.CreateSessionRequest_SandboxSpec{SandboxSpec: sandboxSpec(a.o.sandboxDriver, dir)},
		PermissionLevel: a.level,
		Options:         a.options(),
	}
	if a.o.cf.server != "" {
		ts, approved, _, err := userSettings(a.o.settingsFile, dir)
		if err != nil {
			return acp.NewSessionResponse{}, acp.NewInvalidParams(map[string]any{"error": err.Error()})
		}
		req.Settings, req.ApprovedProjectSettingsSha256 = ts, approved
	}
	created, err := a.client.CreateSession(ctx, req)
	if err != nil {
		return acp.NewSessionResponse{}, a.rpcErr(err)
	}
	s := created.GetSession()
	a.add(&acpSession{id: s.GetSessionId(), dir: dir, last: s.GetLastSequence()})
	return acp.NewSessionResponse{SessionId: acp.SessionId(s.GetSessionId())}, nil
}

// LoadSession resumes a fabro session on the editor's directory and, as
// the spec asks, replays its conversation as session/update before it
// answers.
func (a *acpAgent) LoadSession(ctx context.Context, p acp.LoadSessionRequest) (acp.LoadSessionResponse, error) {
	dir, err := a.sessionDir(p.Cwd)
	if err != nil {
		return acp.LoadSessionResponse{}, err
	}
	id := string(p.SessionId)
	if a.get(id) != nil {
		return acp.LoadSessionResponse{}, acp.NewInvalidParams(map[string]any{"error": "session " + id + " is already open on this connection"})
	}
	resumed, err := a.client.ResumeSession(ctx, &agentv1.ResumeSessionRequest{SessionId: id, Model: a.o.model,
		Sandbox: &agentv1.ResumeSessionRequest_SandboxSpec{SandboxSpec: sandboxSpec(a.o.sandboxDriver, dir)}})
	if err != nil && status.Code(err) != codes.FailedPrecondition { // FAILED_PRECONDITION: it is open already (on a server)
		return acp.LoadSessionResponse{}, a.rpcErr(err)
	}
	// The conversation, not the event log: an in-process stack keeps its
	// events in memory only, while the history is the session's record.
	hist, err := a.client.GetHistory(ctx, &agentv1.GetHistoryRequest{SessionId: id})
	if err != nil {
		return acp.LoadSessionResponse{}, a.rpcErr(err)
	}
	for _, u := range historyUpdates(dir, hist.GetMessages()) {
		if err := a.conn.SessionUpdate(ctx, acp.SessionNotification{SessionId: p.SessionId, Update: u}); err != nil {
			return acp.LoadSessionResponse{}, err
		}
	}
	last := max(resumed.GetSession().GetLastSequence(), hist.GetSequence())
	a.add(&acpSession{id: id, dir: dir, last: last})
	return acp.LoadSessionResponse{}, nil
}

func (a *acpAgent) Prompt(ctx context.Context, p acp.PromptRequest) (acp.PromptResponse, error) {
	id := string(p.SessionId)
	s := a.get(id)
	if s == nil {
		return acp.PromptResponse{}, acp.NewInvalidParams(map[string]any{"error": "no session " + id + " on this connection: session/new or session/load it first"})
	}
	text, err := promptFromBlocks(p.Prompt)
	if err != nil {
		return acp.PromptResponse{}, err
	}
	// session/cancel (or the editor leaving) ends ctx; the prompt is
	// aborted and its stream still brings the report.
	streamCtx, stopStream := context.WithCancel(context.WithoutCancel(ctx))
	defer stopStream()
	stream, err := a.client.Prompt(streamCtx, &agentv1.PromptRequest{SessionId: id, Text: text})
	if err != nil {
		return acp.PromptResponse{}, a.rpcErr(err)
	}
	watching := make(chan struct{})
	defer close(watching)
	go func() { // ends with the prompt
		select {
		case <-ctx.Done():
			a.client.Abort(streamCtx, &agentv1.AbortRequest{SessionId: id, Reason: "cancelled by the editor (session/cancel)"})
		case <-watching:
		}
	}()
	m := &acpMapper{sid: id, dir: s.dir}
	for {
		resp, err := stream.Recv()
		if err != nil {
			if ctx.Err() != nil {
				return acp.PromptResponse{StopReason: acp.StopReasonCancelled}, nil
			}
			return acp.PromptResponse{}, a.rpcErr(err)
		}
		ev := resp.GetEvent()
		if ev.GetSessionId() == id && ev.GetSequence() > s.last {
			s.last = ev.GetSequence()
		}
		if ar := ev.GetApprovalRequested(); ar != nil && ev.GetSessionId() == id {
			a.askPermission(ctx, streamCtx, p.SessionId, s.dir, ar)
			continue
		}
		if ev.GetSessionId() != id { // a subagent's: the root's tool call stands for it
			continue
		}
		if pc := ev.GetPromptCompleted(); pc != nil {
			return a.stopReason(ctx, pc.GetReport())
		}
		for _, u := range m.updates(ev) {
			// Sent on streamCtx: a cancelled prompt still reports what ran.
			if err := a.conn.SessionUpdate(streamCtx, acp.SessionNotification{SessionId: p.SessionId, Update: u}); err != nil {
				return acp.PromptResponse{}, err
			}
		}
	}
}

// stopReason is the ACP end of a prompt's report; a failed prompt is the
// request's error, with fabro's message.
func (a *acpAgent) stopReason(ctx context.Context, rep *agentv1.PromptReport) (acp.PromptResponse, error) {
	switch rep.GetStatus() {
	case agentv1.PromptStatus_PROMPT_STATUS_COMPLETED:
		return acp.PromptResponse{StopReason: acp.StopReasonEndTurn}, nil
	case agentv1.PromptStatus_PROMPT_STATUS_CANCELLED:
		return acp.PromptResponse{StopReason: acp.StopReasonCancelled}, nil
	case agentv1.PromptStatus_PROMPT_STATUS_TURN_LIMIT:
		return acp.PromptResponse{StopReason: acp.StopReasonMaxTurnRequests}, nil
	}
	if ctx.Err() != nil {
		return acp.PromptResponse{StopReason: acp.StopReasonCancelled}, nil
	}
	msg := rep.GetError().GetMessage()
	if msg == "" {
		msg = "the prompt ended " + strings.TrimPrefix(rep.GetStatus().String(), "PROMPT_STATUS_")
	}
	return acp.PromptResponse{}, &acp.RequestError{Code: -32603, Message: msg}
}

// The permission options fabro offers, as ApproveRequest decisions.
var acpPermissionOptions = []struct {
	opt      acp.PermissionOption
	decision agentv1.ApprovalDecision
}{
	{acp.PermissionOption{OptionId: "allow_once", Name: "Allow once", Kind: acp.PermissionOptionKindAllowOnce}, agentv1.ApprovalDecision_APPROVAL_DECISION_ALLOW_ONCE},
	{acp.PermissionOption{OptionId: "allow_session", Name: "Allow for this session", Kind: acp.PermissionOptionKindAllowAlways}, agentv1.ApprovalDecision_APPROVAL_DECISION_ALLOW_SESSION},
	{acp.PermissionOption{OptionId: "reject_once", Name: "Deny", Kind: acp.PermissionOptionKindRejectOnce}, agentv1.ApprovalDecision_APPROVAL_DECISION_DENY},
}

// askPermission asks the editor about an approval_requested event and
// answers it with Approve. A cancelled or failed question denies.
func (a *acpAgent) askPermission(ctx, streamCtx context.Context, sid acp.SessionId, dir string, ar *agentv1.ApprovalRequested) {
	opts := make([]acp.PermissionOption, len(acpPermissionOptions))
	for i, o := range acpPermissionOptions {
		opts[i] = o.opt
	}
	title := toolTitle(ar.GetToolName(), ar.GetArguments())
	resp, err := a.conn.RequestPermission(ctx, acp.RequestPermissionRequest{
		SessionId: sid,
		ToolCall: acp.ToolCallUpdate{
			ToolCallId: acp.ToolCallId(ar.GetToolCallId()),
			Title:      acp.Ptr(title),
			Kind:       acp.Ptr(toolKind(ar.GetToolName())),
			Status:     acp.Ptr(acp.ToolCallStatusPending),
			RawInput:   rawArgs(ar.GetArguments()),
			Locations:  toolLocations(dir, ar.GetArguments()),
		},
		Options: opts,
	})
	req := &agentv1.ApproveRequest{SessionId: string(sid), ApprovalId: ar.GetApprovalId(), Decision: agentv1.ApprovalDecision_APPROVAL_DECISION_DENY}
	switch {
	case err != nil:
		req.Message = "the editor could not be asked: " + err.Error()
	case resp.Outcome.Selected != nil:
		req.Message = "denied in the editor"
		for _, o := range acpPermissionOptions {
			if o.opt.OptionId == resp.Outcome.Selected.OptionId {
				req.Decision = o.decision
			}
		}
	default:
		req.Message = "the prompt was cancelled in the editor"
	}
	if req.Decision != agentv1.ApprovalDecision_APPROVAL_DECISION_DENY {
		req.Message = ""
	}
	if _, err := a.client.Approve(streamCtx, req); err != nil {
		fmt.Fprintln(a.e.stderr, "fabro: approve:", status.Convert(err).Message())
	}
}

func (a *acpAgent) Cancel(_ context.Context, p acp.CancelNotification) error {
	// The SDK ends the prompt's context, which aborts it (see Prompt).
	return nil
}

func (a *acpAgent) CloseSession(ctx context.Context, p acp.CloseSessionRequest) (acp.CloseSessionResponse, error) {
	return acp.CloseSessionResponse{}, acp.NewMethodNotFound(acp.AgentMethodSessionClose)
}

func (a *acpAgent) ListSessions(context.Context, acp.ListSessionsRequest) (acp.ListSessionsResponse, error) {
	return acp.ListSessionsResponse{}, acp.NewMethodNotFound(acp.AgentMethodSessionList)
}

func (a *acpAgent) ResumeSession(context.Context, acp.ResumeSessionRequest) (acp.ResumeSessionResponse, error) {
	return acp.ResumeSessionResponse{}, acp.NewMethodNotFound(acp.AgentMethodSessionResume)
}

func (a *acpAgent) SetSessionConfigOption(context.Context, acp.SetSessionConfigOptionRequest) (acp.SetSessionConfigOptionResponse, error) {
	return acp.SetSessionConfigOptionResponse{}, acp.NewMethodNotFound(acp.AgentMethodSessionSetConfigOption)
}

// SetSessionMode: a session's permission level is fixed when it is
// created (--permissions); no mode is advertised.
func (a *acpAgent) SetSessionMode(context.Context, acp.SetSessionModeRequest) (acp.SetSessionModeResponse, error) {
	return acp.SetSessionModeResponse{}, acp.NewMethodNotFound(acp.AgentMethodSessionSetMode)
}

func (a *acpAgent) options() *agentv1.AgentOptions {
	opts := &agentv1.AgentOptions{}
	if a.o.maxTurns > 0 {
		n := int32(a.o.maxTurns)
		opts.MaxTurns = &n
	}
	return opts
}

func (a *acpAgent) add(s *acpSession) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.sessions[s.id] = s
}

func (a *acpAgent) get(id string) *acpSession {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.sessions[id]
}

// closeAll closes the connection's sessions when the editor goes.
func (a *acpAgent) closeAll() {
	a.mu.Lock()
	defer a.mu.Unlock()
	for id := range a.sessions {
		a.client.CloseSession(context.Background(), &agentv1.CloseSessionRequest{SessionId: id})
	}
}

// rpcErr is a gRPC error as a JSON-RPC one: bad arguments are invalid
// params, the rest internal errors, with fabro's message, not gRPC's.
func (a *acpAgent) rpcErr(err error) error {
	st := status.Convert(err)
	switch st.Code() {
	case codes.InvalidArgument, codes.NotFound, codes.FailedPrecondition, codes.PermissionDenied:
		return acp.NewInvalidParams(map[string]any{"error": st.Message(), "code": st.Code().String()})
	}
	return &acp.RequestError{Code: -32603, Message: st.Message(), Data: map[string]any{"code": st.Code().String()}}
}

// promptFromBlocks is the prompt's text: text blocks as they are, embedded
// text resources fenced with their URI, links named. Images, audio and
// binary resources were not offered and are refused.
func promptFromBlocks(blocks []acp.ContentBlock) (string, error) {
	var b strings.Builder
	for i, c := range blocks {
		if i > 0 {
			b.WriteString("\n")
		}
		switch {
		case c.Text != nil:
			b.WriteString(c.Text.Text)
		case c.ResourceLink != nil:
			fmt.Fprintf(&b, "[%s](%s)", c.ResourceLink.Name, c.ResourceLink.Uri)
		case c.Resource != nil && c.Resource.Resource.TextResourceContents != nil:
			r := c.Resource.Resource.TextResourceContents
			fmt.Fprintf(&b, "<context uri=%q>\n%s\n</context>", r.Uri, r.Text)
		default:
			return "", acp.NewInvalidParams(map[string]any{"error": fmt.Sprintf("prompt block %d: fabro takes text, resource links and embedded text resources (promptCapabilities), not this block", i)})
		}
	}
	if strings.TrimSpace(b.String()) == "" {
		return "", acp.NewInvalidParams(map[string]any{"error": "the prompt is empty"})
	}
	return b.String(), nil
}

// historyUpdates is a conversation as session/update payloads: user and
// assistant text, reasoning, tool calls and their results.
func historyUpdates(dir string, msgs []*llmv1.Message) []acp.SessionUpdate {
	var us []acp.SessionUpdate
	for _, m := range msgs {
		for _, part := range m.GetParts() {
			switch {
			case part.GetText() != nil && part.GetText().GetText() != "":
				t := part.GetText().GetText()
				switch m.GetRole() {
				case llmv1.Role_ROLE_USER:
					us = append(us, acp.UpdateUserMessageText(t))
				case llmv1.Role_ROLE_ASSISTANT:
					us = append(us, acp.UpdateAgentMessageText(t))
				}
			case part.GetReasoning() != nil && part.GetReasoning().GetText() != "":
				us = append(us, acp.UpdateAgentThoughtText(part.GetReasoning().GetText()))
			case part.GetToolCall() != nil:
				c := part.GetToolCall()
				us = append(us, acp.StartToolCall(acp.ToolCallId(c.GetId()), toolTitle(c.GetName(), c.GetArguments()),
					acp.WithStartKind(toolKind(c.GetName())),
					acp.WithStartStatus(acp.ToolCallStatusInProgress),
					acp.WithStartRawInput(rawArgs(c.GetArguments())),
					acp.WithStartLocations(toolLocations(dir, c.GetArguments()))))
			case part.GetToolResult() != nil:
				r := part.GetToolResult()
				var out strings.Builder
				for _, c := range r.GetContent() {
					out.WriteString(c.GetText().GetText())
				}
				st, text := acp.ToolCallStatusCompleted, out.String()
				if r.GetIsError() {
					st, text = acp.ToolCallStatusFailed, toolErrorText(text)
				}
				us = append(us, acp.UpdateToolCall(acp.ToolCallId(r.GetToolCallId()), acp.WithUpdateStatus(st),
					acp.WithUpdateContent([]acp.ToolCallContent{acp.ToolContent(acp.TextBlock(text))})))
			}
		}
	}
	return us
}

// acpMapper turns fabro events into session/update payloads.
type acpMapper struct {
	sid string // the session: a subagent's events are left out
	dir string // its working directory, for absolute locations
}

func (m *acpMapper) updates(ev *agentv1.AgentEvent) []acp.SessionUpdate {
	if ev.GetSessionId() != m.sid {
		return nil
	}
	switch {
	case ev.GetTextDelta() != nil:
		if d := ev.GetTextDelta().GetDelta(); d != "" {
			return []acp.SessionUpdate{acp.UpdateAgentMessageText(d)}
		}
	case ev.GetReasoningDelta() != nil:
		if d := ev.GetReasoningDelta().GetDelta(); d != "" {
			return []acp.SessionUpdate{acp.UpdateAgentThoughtText(d)}
		}
	case ev.GetToolCallStarted() != nil:
		c := ev.GetToolCallStarted()
		return []acp.SessionUpdate{acp.StartToolCall(acp.ToolCallId(c.GetToolCallId()), toolTitle(c.GetToolName(), c.GetArguments()),
			acp.WithStartKind(toolKind(c.GetToolName())),
			acp.WithStartStatus(acp.ToolCallStatusInProgress),
			acp.WithStartRawInput(rawArgs(c.GetArguments())),
			acp.WithStartLocations(toolLocations(m.dir, c.GetArguments())),
		)}
	case ev.GetToolCallCompleted() != nil:
		c := ev.GetToolCallCompleted()
		st := acp.ToolCallStatusCompleted
		out := c.GetOutput()
		if c.GetIsError() {
			st = acp.ToolCallStatusFailed
			out = toolErrorText(out)
		}
		return []acp.SessionUpdate{acp.UpdateToolCall(acp.ToolCallId(c.GetToolCallId()),
			acp.WithUpdateStatus(st),
			acp.WithUpdateContent([]acp.ToolCallContent{acp.ToolContent(acp.TextBlock(out))}),
		)}
	}
	return nil
}

// toolKind is the ACP kind of a fabro tool, for the editor's icon.
func toolKind(name string) acp.ToolKind {
	switch name {
	case "read_file", "read_many_files", "list_dir":
		return acp.ToolKindRead
	case "write_file", "edit_file", "apply_patch":
		return acp.ToolKindEdit
	case "shell":
		return acp.ToolKindExecute
	case "grep", "glob":
		return acp.ToolKindSearch
	case "web_fetch", "web_search":
		return acp.ToolKindFetch
	}
	return acp.ToolKindOther
}

// toolTitle is what the editor shows for a call: the tool and its main
// argument.
func toolTitle(name, args string) string {
	var m map[string]any
	if json.Unmarshal([]byte(args), &m) == nil {
		for _, k := range []string{"command", "file_path", "path", "pattern", "query", "url"} {
			if v, ok := m[k].(string); ok && v != "" {
				return name + " " + clip(v, 120)
			}
		}
	}
	return name
}

// rawArgs is a call's arguments as JSON for rawInput (the text when it is
// not JSON).
func rawArgs(args string) any {
	var v any
	if err := json.Unmarshal([]byte(args), &v); err != nil {
		return args
	}
	return v
}

// toolLocations is the file a call names, absolute as ACP wants it, so
// the editor can follow it.
func toolLocations(dir, args string) []acp.ToolCallLocation {
	var m map[string]any
	if json.Unmarshal([]byte(args), &m) != nil {
		return nil
	}
	for _, k := range []string{"file_path", "path"} {
		if v, ok := m[k].(string); ok && v != "" {
			if !filepath.IsAbs(v) && dir != "" {
				v = filepath.Join(dir, v)
			}
			return []acp.ToolCallLocation{{Path: v}}
		}
	}
	return nil
}

// lockedWriter writes whole messages one at a time: the SDK's and the
// filter's answers share stdout.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(b)
}

// acpMaxLine is the longest message taken; the SDK reads up to 10 MiB.
const acpMaxLine = 8 << 20

// filterJSONRPC passes stdin's messages on to the SDK and answers, as
// JSON-RPC 2.0 says, a line that is not JSON with a parse error (-32700)
// and a JSON value that is not a message object, or a line over
// acpMaxLine, with an invalid request (-32600), id null: the SDK would
// drop the first two silently and stop reading at the third. The
// goroutine, begun by start, ends at stdin's end or when the returned
// reader is closed.
func filterJSONRPC(in io.Reader, out io.Writer) (r io.ReadCloser, start func()) {
	pr, pw := io.Pipe()
	return pr, func() { go filterLines(in, out, pw) }
}

func filterLines(in io.Reader, out io.Writer, pw *io.PipeWriter) {
	br := bufio.NewReaderSize(in, 64<<10)
	for {
		line, tooLong, err := readLine(br, acpMaxLine)
		if len(bytes.TrimSpace(line)) > 0 || tooLong {
			var msg map[string]json.RawMessage
			var code int
			var text string
			switch {
			case tooLong:
				code, text = -32600, fmt.Sprintf("Invalid Request: a message over %d bytes", acpMaxLine)
			case !json.Valid(line):
				code, text = -32700, "Parse error: the line is not JSON"
			case json.Unmarshal(line, &msg) != nil || msg["method"] == nil && msg["id"] == nil:
				code, text = -32600, "Invalid Request: not a JSON-RPC 2.0 request, notification or response object"
			}
			if code != 0 {
				b, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": nil, "error": map[string]any{"code": code, "message": text}})
				if _, werr := out.Write(append(b, '\n')); werr != nil {
					pw.CloseWithError(werr)
					return
				}
			} else if _, werr := pw.Write(append(line, '\n')); werr != nil {
				return
			}
		}
		if err != nil {
			pw.CloseWithError(err)
			return
		}
	}
}

// readLine reads one line without its newline; past max bytes it reads
// on to the line's end and returns tooLong with none of it.
func readLine(br *bufio.Reader, max int) (line []byte, tooLong bool, err error) {
	for {
		chunk, isPrefix, err := br.ReadLine()
		if !tooLong {
			line = append(line, chunk...)
			if len(line) > max {
				tooLong, line = true, nil
			}
		}
		if err != nil || !isPrefix {
			return line, tooLong, err
		}
	}
}
