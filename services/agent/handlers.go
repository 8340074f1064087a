package agent

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	agentv1 "github.com/fabro-sh/fabro-go/gen/fabro/agent/v1"
	llmv1 "github.com/fabro-sh/fabro-go/gen/fabro/llm/v1"
	sandboxv1 "github.com/fabro-sh/fabro-go/gen/fabro/sandbox/v1"
	"github.com/fabro-sh/fabro-go/platform/grpcerr"
	"github.com/fabro-sh/fabro-go/platform/logging"
	"github.com/fabro-sh/fabro-go/services/agent/internal/bus"
	"github.com/fabro-sh/fabro-go/services/agent/internal/loop"
	"github.com/fabro-sh/fabro-go/services/agent/internal/mcptools"
	"github.com/fabro-sh/fabro-go/services/agent/internal/settings"
	"github.com/fabro-sh/fabro-go/services/agent/internal/tools"
)

// Default and cap of ListSessions page sizes; the tree limit when
// SubagentOptions leaves it unset.
const (
	defaultPageSize       = 50
	maxPageSize           = 500
	defaultMaxOpenInTree  = 4
	steeringQueueCapacity = loop.SteeringCapacity
)

// lookup finds a session by id: INVALID_ARGUMENT for an empty id,
// NOT_FOUND for an unknown one.
func (s *Service) lookup(id string) (*session, error) {
	if id == "" {
		return nil, status.Error(codes.InvalidArgument, "session_id is required")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	sess, ok := s.sessions[id]
	if !ok {
		return nil, status.Errorf(codes.NotFound, "no session %q", id)
	}
	return sess, nil
}

// loaded is lookup plus the check that the session is neither closed nor
// suspended.
func (s *Service) loaded(id string) (*session, error) {
	sess, err := s.lookup(id)
	if err != nil {
		return nil, err
	}
	switch sess.state() {
	case agentv1.SessionState_SESSION_STATE_CLOSED:
		return nil, status.Errorf(codes.FailedPrecondition, "session %q is closed", id)
	case agentv1.SessionState_SESSION_STATE_SUSPENDED:
		return nil, status.Errorf(codes.FailedPrecondition, "session %q is suspended; resume it first", id)
	}
	return sess, nil
}

// upstreamStatus maps a gateway or sandbox error: their own client-facing
// codes pass through with their message; anything else is UNAVAILABLE.
func upstreamStatus(what string, err error) error {
	st, _ := status.FromError(err)
	switch st.Code() {
	case codes.NotFound, codes.InvalidArgument, codes.FailedPrecondition, codes.PermissionDenied, codes.Canceled, codes.DeadlineExceeded:
		msg := st.Message()
		for _, d := range st.Details() {
			if ed, ok := d.(*llmv1.ErrorDetail); ok && len(ed.GetHints()) > 0 {
				msg += " (did you mean " + strings.Join(ed.GetHints(), ", ") + "?)"
			}
		}
		return status.Error(st.Code(), what+": "+msg)
	}
	return status.Errorf(codes.Unavailable, "%s unavailable: %s", what, st.Message())
}

// resolveRoute resolves a model selector through the gateway's catalog.
func (s *Service) resolveRoute(ctx context.Context, selector string) (*agentv1.ModelRoute, error) {
	if selector == "" {
		selector = s.defaultModel
	}
	res, err := s.llm.ResolveModel(ctx, &llmv1.ResolveModelRequest{Selector: selector})
	if err != nil {
		return nil, upstreamStatus("model "+strconv.Quote(selector), err)
	}
	m := res.GetModel()
	profile, err := profileByName(m.GetAgentProfile())
	if err != nil {
		return nil, grpcerr.Domain("agent.fabro.dev").New(codes.FailedPrecondition, "AGENT_PROFILE_UNKNOWN",
			fmt.Sprintf("model %q: %v", selector, err), grpcerr.Meta("model", selector, "agent_profile", m.GetAgentProfile()))
	}
	route := &agentv1.ModelRoute{
		Selector:            selector,
		Provider:            res.GetProvider().GetProviderId(),
		Model:               m.GetModelId(),
		Profile:             profile,
		Codec:               res.GetProvider().GetCodec(),
		ContextWindowTokens: m.GetContextWindow(),
		MaxOutputTokens:     m.GetMaxOutputTokens(),
	}
	if route.Profile == agentv1.AgentProfile_AGENT_PROFILE_UNSPECIFIED {
		// The model names none: the provider's, by its wire protocol, so
		// the snapshot reports the profile really used.
		route.Profile = providerProfile(route.GetCodec())
	}
	return route, nil
}

func providerProfile(c llmv1.Codec) agentv1.AgentProfile {
	switch c {
	case llmv1.Codec_CODEC_ANTHROPIC_MESSAGES, llmv1.Codec_CODEC_BEDROCK_CONVERSE:
		return agentv1.AgentProfile_AGENT_PROFILE_ANTHROPIC
	case llmv1.Codec_CODEC_GEMINI_GENERATE:
		return agentv1.AgentProfile_AGENT_PROFILE_GEMINI
	}
	return agentv1.AgentProfile_AGENT_PROFILE_OPENAI
}

// attachSandbox finds or creates the session's sandbox.
func (s *Service) attachSandbox(ctx context.Context, id string, spec *sandboxv1.SandboxSpec) (*sandboxv1.Sandbox, bool, error) {
	switch {
	case id != "":
		resp, err := s.sandbox.GetSandbox(ctx, &sandboxv1.GetSandboxRequest{SandboxId: id})
		if err != nil {
			return nil, false, upstreamStatus("sandbox "+strconv.Quote(id), err)
		}
		if st := resp.GetSandbox().GetState(); st != sandboxv1.SandboxState_SANDBOX_STATE_READY {
			return nil, false, status.Errorf(codes.FailedPrecondition, "sandbox %q is not ready (%s)", id, st)
		}
		return resp.GetSandbox(), false, nil
	case spec != nil:
		resp, err := s.sandbox.CreateSandbox(ctx, &sandboxv1.CreateSandboxRequest{Spec: spec})
		if err != nil {
			return nil, false, upstreamStatus("create sandbox", err)
		}
		return resp.GetSandbox(), true, nil
	}
	return nil, false, status.Error(codes.InvalidArgument, "a sandbox_id or a sandbox_spec is required")
}

// CreateSession implements agentv1.AgentServiceServer.
func (s *Service) CreateSession(ctx context.Context, req *agentv1.CreateSessionRequest) (*agentv1.CreateSessionResponse, error) {
	sess, err := s.createSession(ctx, req, spawnInfo{})
	if err != nil {
		return nil, err
	}
	return &agentv1.CreateSessionResponse{Session: sess.snapshotInfo()}, nil
}

// spawnInfo is what a spawn_agent call adds to its child's
// sub_agent_spawned event.
type spawnInfo struct{ task, toolCallID string }

func (s *Service) createSession(ctx context.Context, req *agentv1.CreateSessionRequest, spawn spawnInfo) (*session, error) {
	if req.GetSandboxId() == "" && req.GetSandboxSpec() == nil {
		return nil, status.Error(codes.InvalidArgument, "a sandbox_id or a sandbox_spec is required")
	}
	if err := validateOptions(req.GetOptions()); err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	level := req.GetPermissionLevel()
	info := &agentv1.Session{Depth: 0}
	if pid := req.GetParentSessionId(); pid != "" {
		parent, err := s.lookup(pid)
		if err != nil {
			return nil, err
		}
		if parent.state() == agentv1.SessionState_SESSION_STATE_CLOSED || parent.state() == agentv1.SessionState_SESSION_STATE_SUSPENDED {
			return nil, status.Errorf(codes.FailedPrecondition, "parent session %q is not open", pid)
		}
		pinfo := parent.snapshotInfo()
		if level == agentv1.PermissionLevel_PERMISSION_LEVEL_UNSPECIFIED {
			level = pinfo.GetPermissionLevel()
		}
		if rank(level) > rank(pinfo.GetPermissionLevel()) {
			return nil, status.Errorf(codes.PermissionDenied, "a subagent may not have more permissions than its parent (%s)", pinfo.GetPermissionLevel())
		}
		root, err := s.lookup(pinfo.GetRootSessionId())
		if err != nil {
			return nil, err
		}
		limit := int(root.opts.GetSubagents().GetMaxOpenSessions())
		if limit == 0 {
			limit = defaultMaxOpenInTree
		}
		if s.openInTree(pinfo.GetRootSessionId()) >= limit {
			return nil, status.Errorf(codes.ResourceExhausted, "the session tree already has %d open sessions", limit)
		}
		if d := root.opts.GetSubagents().MaxDepth; d != nil && pinfo.GetDepth()+1 > *d {
			return nil, status.Errorf(codes.ResourceExhausted, "the session tree allows %d levels of subagents", *d)
		}
		info.ParentSessionId, info.RootSessionId, info.Depth = pid, pinfo.GetRootSessionId(), pinfo.GetDepth()+1
	}
	if level == agentv1.PermissionLevel_PERMISSION_LEVEL_UNSPECIFIED {
		level = agentv1.PermissionLevel_PERMISSION_LEVEL_READ_WRITE
	}
	route, err := s.resolveRoute(ctx, req.GetModel())
	if err != nil {
		return nil, err
	}
	sb, owned, err := s.attachSandbox(ctx, req.GetSandboxId(), req.GetSandboxSpec())
	if err != nil {
		return nil, err
	}
	ext := extSpec{request: req.GetSettings(), approvedHash: req.GetApprovedProjectSettingsSha256(), clientTools: req.GetClientTools()}
	if pid := req.GetParentSessionId(); pid != "" {
		parent, err := s.lookup(pid)
		if err != nil {
			return nil, err
		}
		ext.inherited = parent.layers
		if ext.inherited == nil {
			ext.inherited = []settings.Layer{}
		}
	}
	sess, err := s.newSession(ctx, info, route, level, sb, owned, req.GetModel(), req.GetOptions(), nil, 0, false, spawn, ext)
	if err != nil {
		if owned {
			_, _ = s.sandbox.DeleteSandbox(context.WithoutCancel(ctx), &sandboxv1.DeleteSandboxRequest{SandboxId: sb.GetSandboxId()})
		}
		return nil, err
	}
	return sess, nil
}

func rank(l agentv1.PermissionLevel) int {
	if l == agentv1.PermissionLevel_PERMISSION_LEVEL_UNSPECIFIED {
		return int(agentv1.PermissionLevel_PERMISSION_LEVEL_READ_WRITE)
	}
	return int(l)
}

func (s *Service) openInTree(root string) int {
	s.mu.Lock()
	var all []*session
	for _, sess := range s.sessions {
		all = append(all, sess)
	}
	s.mu.Unlock()
	n := 0
	for _, sess := range all {
		sess.mu.Lock()
		if sess.info.GetRootSessionId() == root && sess.info.GetState() != agentv1.SessionState_SESSION_STATE_CLOSED &&
			sess.info.GetState() != agentv1.SessionState_SESSION_STATE_SUSPENDED {
			n++
		}
		sess.mu.Unlock()
	}
	return n
}

// newSession builds and registers a session, then emits memory_loaded,
// skills_discovered and session_started.
func (s *Service) newSession(ctx context.Context, info *agentv1.Session, route *agentv1.ModelRoute, level agentv1.PermissionLevel,
	sb *sandboxv1.Sandbox, owned bool, requestedModel string, requestedOpts *agentv1.AgentOptions,
	history []*llmv1.Message, lastSeq uint64, resumed bool, spawn spawnInfo, ext extSpec) (*session, error) {
	opts := effectiveOptions(requestedOpts, route)
	if info.SessionId == "" {
		info.SessionId = newID("s_")
	}
	if info.RootSessionId == "" {
		info.RootSessionId = info.SessionId
	}
	now := time.Now()
	info.State = agentv1.SessionState_SESSION_STATE_IDLE
	info.Route, info.PermissionLevel = route, level
	info.SandboxId, info.SandboxOwned = sb.GetSandboxId(), owned
	if info.CreateTime == nil {
		info.CreateTime = timestamppb.New(now)
	}
	info.UpdateTime = timestamppb.New(now)

	sess := &session{svc: s, info: info, requestedModel: requestedModel, requestedOpts: requestedOpts, opts: opts, ext: ext, allowSession: map[string]bool{}}
	sess.env = s.probeEnvironment(ctx, sb)
	layers, settingsWarnings, err := s.loadLayers(ctx, sb.GetSandboxId(), sess.env.GetWorkingDirectory(), ext)
	if err != nil {
		return nil, err
	}
	if sess.policy, err = settings.Build(layers...); err != nil {
		return nil, settingsStatus(err)
	}
	sess.layers = layers
	var mcpServers []mcptools.Server
	for _, m := range sess.policy.MCPServers {
		srv := mcptools.Server{Spec: m.Spec}
		if m.Guarded {
			srv.HTTPClient = tools.PublicHTTPClient()
		}
		mcpServers = append(mcpServers, srv)
	}
	sess.mcp, sess.extExtras = mcptools.Start(ctx, mcpServers, func(msg string) { settingsWarnings = append(settingsWarnings, msg) }, s.logger)
	built := false
	defer func() {
		if !built {
			sess.mcp.Close()
		}
	}()
	clientExtras, err := sess.clientTools(ext.clientTools)
	if err != nil {
		return nil, err
	}
	sess.extExtras = append(sess.extExtras, clientExtras...)
	var memText string
	sess.memory, memText = s.loadMemory(ctx, sb.GetSandboxId(), opts.GetMemoryFiles())
	var skipped []*agentv1.SkippedSkill
	sess.skills, skipped = s.discoverSkills(ctx, sb.GetSandboxId(), opts.GetSkillDirs())
	sess.system = systemPrompt(route, level, opts, sess.env, memText, skillsSection(sess.skills), now)
	s.build(sess, lastSeq, history)
	toolNames := map[string]bool{}
	for _, n := range sess.toolset.Names() {
		toolNames[n] = true
	}
	for name := range opts.GetToolOutputLimits() {
		if !toolNames[name] {
			return nil, status.Errorf(codes.InvalidArgument, "options.tool_output_limits: %q is not a tool of the %s profile", name, profileName(route))
		}
	}

	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil, status.Error(codes.Unavailable, "the agent service is shutting down")
	}
	s.order++
	sess.order = s.order
	if old, ok := s.sessions[info.SessionId]; ok {
		sess.order = old.order
	}
	s.sessions[info.SessionId] = sess
	s.mu.Unlock()

	sess.emit(&agentv1.AgentEvent{Event: &agentv1.AgentEvent_MemoryLoaded{MemoryLoaded: &agentv1.MemoryLoaded{Profile: route.GetProfile(), Memory: sess.memory}}})
	sess.emit(&agentv1.AgentEvent{Event: &agentv1.AgentEvent_SkillsDiscovered{SkillsDiscovered: &agentv1.SkillsDiscovered{SourceDirs: opts.GetSkillDirs(), Skills: sess.skillInfos(), Skipped: skipped}}})
	for _, w := range settingsWarnings {
		s.logger.WarnContext(ctx, "tool settings", "session_id", info.GetSessionId(), "warning", w)
		sess.emit(&agentv1.AgentEvent{Event: &agentv1.AgentEvent_Warning{Warning: &agentv1.Warning{Kind: agentv1.WarningKind_WARNING_KIND_OTHER, Message: w}}})
	}
	sess.emit(&agentv1.AgentEvent{Event: &agentv1.AgentEvent_SessionStarted{SessionStarted: &agentv1.SessionStarted{
		Route: route, PermissionLevel: level, SandboxId: sb.GetSandboxId(), WorkingDirectory: sess.env.GetWorkingDirectory(), Resumed: resumed}}})
	sess.hooks.Event(ctx, agentv1.HookEvent_HOOK_EVENT_SESSION_START, "", "")
	if pid := info.GetParentSessionId(); pid != "" {
		if parent, err := s.lookup(pid); err == nil && parent.log != nil {
			parent.emit(&agentv1.AgentEvent{PromptId: parent.currentPrompt(), Event: &agentv1.AgentEvent_SubAgentSpawned{SubAgentSpawned: &agentv1.SubAgentSpawned{
				ChildSessionId: info.GetSessionId(), Task: spawn.task, Route: route, Depth: info.GetDepth(), ToolCallId: spawn.toolCallID}}})
		}
	}
	if err := sess.log.Flush(ctx); err != nil {
		return nil, status.Error(codes.Internal, "the durable event log refused an event")
	}
	sess.writeRecord()
	built = true
	return sess, nil
}

// Prompt implements agentv1.AgentServiceServer.
func (s *Service) Prompt(req *agentv1.PromptRequest, stream grpc.ServerStreamingServer[agentv1.PromptResponse]) error {
	sess, err := s.loaded(req.GetSessionId())
	if err != nil {
		return err
	}
	if req.GetContinueUnfinished() {
		if req.GetText() != "" {
			return status.Error(codes.InvalidArgument, "text must be empty with continue_unfinished")
		}
		h := sess.agent.History()
		if len(h) == 0 || h[len(h)-1].GetRole() == llmv1.Role_ROLE_ASSISTANT && !hasToolCalls(h[len(h)-1]) {
			return status.Error(codes.FailedPrecondition, "the session has no unfinished prompt")
		}
	} else if strings.TrimSpace(req.GetText()) == "" {
		return status.Error(codes.InvalidArgument, "text is required")
	}
	promptID := newID("p_")
	done, err := s.startPrompt(sess, promptID)
	if err != nil {
		return err
	}
	// The session's own events of this prompt, and its subagents' events
	// without their deltas.
	sub := s.hub.subscribe(sess.info.GetSessionId(), s.descendants(sess.info.GetSessionId())...)
	defer sub.Close()

	ctx := stream.Context()
	go s.runPrompt(ctx, sess, promptID, req.GetText(), req.GetContinueUnfinished(), done)
	for {
		ev, err := sub.Next(ctx)
		if err != nil {
			if errors.Is(err, bus.ErrEventStream) {
				return eventLogStatus(err)
			}
			return status.FromContextError(err).Err()
		}
		own := ev.GetSessionId() == req.GetSessionId()
		if own && ev.GetPromptId() != promptID || !own && isDelta(ev) {
			continue
		}
		if err := stream.Send(&agentv1.PromptResponse{Event: ev}); err != nil {
			return err
		}
		if own && ev.GetPromptCompleted() != nil {
			return nil
		}
	}
}

func hasToolCalls(m *llmv1.Message) bool {
	for _, p := range m.GetParts() {
		if p.GetToolCall() != nil {
			return true
		}
	}
	return false
}

// startPrompt marks the session running; FAILED_PRECONDITION when a prompt
// already runs.
func (s *Service) startPrompt(sess *session, promptID string) (chan struct{}, error) {
	s.mu.Lock()
	closed := s.closed
	if !closed {
		s.prompts.Add(1)
	}
	s.mu.Unlock()
	if closed {
		return nil, status.Error(codes.Unavailable, "the agent service is shutting down")
	}
	sess.mu.Lock()
	defer sess.mu.Unlock()
	if sess.running || sess.info.GetState() != agentv1.SessionState_SESSION_STATE_IDLE {
		s.prompts.Done()
		if sess.running {
			return nil, status.Errorf(codes.FailedPrecondition, "session %q is already running a prompt; queue it with FollowUp", sess.info.GetSessionId())
		}
		return nil, status.Errorf(codes.FailedPrecondition, "session %q is closed", sess.info.GetSessionId())
	}
	sess.running = true
	sess.promptID = promptID
	sess.done = make(chan struct{})
	sess.info.PromptCount++
	sess.info.ActivePromptId = promptID
	return sess.done, nil
}

// runPrompt runs the loop; a sandbox that disappeared or a failed event
// log ends the session.
func (s *Service) runPrompt(ctx context.Context, sess *session, promptID, text string, cont bool, done chan struct{}) {
	defer s.prompts.Done()
	ctx = logging.With(ctx, slog.String("session_id", sess.info.GetSessionId()), slog.String("prompt_id", promptID))
	sess.log.SetTraceContext(ctx)
	report, _ := sess.agent.Prompt(ctx, promptID, text, cont)
	sess.log.SetTraceContext(nil)
	sess.mu.Lock()
	sess.lastReport = report
	sess.running = false
	sess.promptID = ""
	sess.done = nil
	sess.info.ActivePromptId = ""
	sess.info.UpdateTime = timestamppb.Now()
	sess.mu.Unlock()
	// The parent hears of the end before a wait on done returns, so its
	// sub_agent_completed comes before anything the parent does next.
	s.notifyParent(sess, report)
	close(done)
	sess.writeRecord()
	switch {
	case sess.log.Err() != nil:
		sess.end(context.WithoutCancel(ctx), agentv1.SessionEndReason_SESSION_END_REASON_ERROR,
			&agentv1.AgentError{Kind: agentv1.AgentErrorKind_AGENT_ERROR_KIND_EVENT_STREAM, Message: sess.log.Err().Error()})
	case report.GetError().GetKind() == agentv1.AgentErrorKind_AGENT_ERROR_KIND_SANDBOX_UNAVAILABLE:
		aerr := proto.CloneOf(report.GetError())
		aerr.SandboxId = sess.info.GetSandboxId()
		sess.end(context.WithoutCancel(ctx), agentv1.SessionEndReason_SESSION_END_REASON_ERROR, aerr)
	}
}

// Steer implements agentv1.AgentServiceServer.
func (s *Service) Steer(_ context.Context, req *agentv1.SteerRequest) (*agentv1.SteerResponse, error) {
	sess, err := s.loaded(req.GetSessionId())
	if err != nil {
		return nil, err
	}
	if strings.TrimSpace(req.GetText()) == "" {
		return nil, status.Error(codes.InvalidArgument, "text is required")
	}
	id := newID("st_")
	depth, evicted := sess.agent.Steer(id, req.GetText(), req.GetMode() == agentv1.SteerMode_STEER_MODE_NOW, req.GetActor())
	return &agentv1.SteerResponse{SteeringId: id, QueueDepth: int32(depth), EvictedOldest: evicted}, nil
}

// FollowUp implements agentv1.AgentServiceServer.
func (s *Service) FollowUp(_ context.Context, req *agentv1.FollowUpRequest) (*agentv1.FollowUpResponse, error) {
	sess, err := s.loaded(req.GetSessionId())
	if err != nil {
		return nil, err
	}
	if strings.TrimSpace(req.GetText()) == "" {
		return nil, status.Error(codes.InvalidArgument, "text is required")
	}
	id := newID("f_")
	depth, err := sess.agent.FollowUp(id, req.GetText())
	if err != nil {
		return nil, status.Errorf(codes.FailedPrecondition, "session %q has no running prompt; send a Prompt instead", req.GetSessionId())
	}
	return &agentv1.FollowUpResponse{FollowUpId: id, QueueDepth: int32(depth)}, nil
}

// Interrupt implements agentv1.AgentServiceServer.
func (s *Service) Interrupt(_ context.Context, req *agentv1.InterruptRequest) (*agentv1.InterruptResponse, error) {
	sess, err := s.loaded(req.GetSessionId())
	if err != nil {
		return nil, err
	}
	ok, gen := sess.agent.Interrupt()
	return &agentv1.InterruptResponse{Interrupted: ok, Generation: gen}, nil
}

// Abort implements agentv1.AgentServiceServer.
func (s *Service) Abort(_ context.Context, req *agentv1.AbortRequest) (*agentv1.AbortResponse, error) {
	sess, err := s.loaded(req.GetSessionId())
	if err != nil {
		return nil, err
	}
	ok, id := sess.agent.Abort(req.GetReason())
	return &agentv1.AbortResponse{Aborted: ok, PromptId: id}, nil
}

// GetHistory implements agentv1.AgentServiceServer.
func (s *Service) GetHistory(_ context.Context, req *agentv1.GetHistoryRequest) (*agentv1.GetHistoryResponse, error) {
	sess, err := s.lookup(req.GetSessionId())
	if err != nil {
		return nil, err
	}
	if sess.agent == nil { // suspended: the record has the history
		rec, err := s.readRecord(req.GetSessionId())
		if err != nil {
			return nil, status.Errorf(codes.DataLoss, "session %q: its record cannot be read", req.GetSessionId())
		}
		return &agentv1.GetHistoryResponse{Messages: rec.GetMessages(), Sequence: rec.GetSession().GetLastSequence()}, nil
	}
	return &agentv1.GetHistoryResponse{Messages: sess.agent.History(), Sequence: sess.log.Committed()}, nil
}

// GetSnapshot implements agentv1.AgentServiceServer.
func (s *Service) GetSnapshot(_ context.Context, req *agentv1.GetSnapshotRequest) (*agentv1.GetSnapshotResponse, error) {
	sess, err := s.lookup(req.GetSessionId())
	if err != nil {
		return nil, err
	}
	if sess.agent == nil {
		return nil, status.Errorf(codes.FailedPrecondition, "session %q is suspended; resume it first", req.GetSessionId())
	}
	info := sess.snapshotInfo()
	snap := &agentv1.SessionSnapshot{
		Session:      info,
		Options:      sess.opts,
		Tools:        sess.describeTools(),
		Memory:       sess.memory,
		Skills:       sess.skillInfos(),
		TodoLists:    []*agentv1.TodoList{sess.todos.List()},
		Environment:  sess.env,
		SystemPrompt: sess.system,
		Sequence:     info.GetLastSequence(),
	}
	s.mu.Lock()
	for id, c := range s.sessions {
		if c.info.GetParentSessionId() == info.GetSessionId() && c.state() != agentv1.SessionState_SESSION_STATE_CLOSED {
			snap.OpenSubagentIds = append(snap.OpenSubagentIds, id)
		}
	}
	s.mu.Unlock()
	slices.Sort(snap.OpenSubagentIds)
	return &agentv1.GetSnapshotResponse{Snapshot: snap}, nil
}

// ListSessions implements agentv1.AgentServiceServer.
func (s *Service) ListSessions(_ context.Context, req *agentv1.ListSessionsRequest) (*agentv1.ListSessionsResponse, error) {
	size := int(req.GetPageSize())
	switch {
	case size < 0:
		return nil, status.Error(codes.InvalidArgument, "page_size must not be negative")
	case size == 0:
		size = defaultPageSize
	case size > maxPageSize:
		size = maxPageSize
	}
	offset := 0
	if t := req.GetPageToken(); t != "" {
		b, err := base64.RawURLEncoding.DecodeString(t)
		n, ok := strings.CutPrefix(string(b), "offset:")
		if err == nil && ok {
			offset, err = strconv.Atoi(n)
		}
		if err != nil || !ok || offset < 0 {
			return nil, status.Error(codes.InvalidArgument, "page_token was not issued by this service")
		}
	}
	s.mu.Lock()
	all := make([]*session, 0, len(s.sessions))
	for _, sess := range s.sessions {
		all = append(all, sess)
	}
	s.mu.Unlock()
	slices.SortFunc(all, func(a, b *session) int { return int(b.order - a.order) })
	var match []*agentv1.Session
	for _, sess := range all {
		info := sess.snapshotInfo()
		if p := req.GetParentSessionId(); p != "" {
			if info.GetParentSessionId() != p {
				continue
			}
		} else if !req.GetIncludeSubagents() && info.GetParentSessionId() != "" {
			continue
		}
		if len(req.GetStates()) > 0 && !slices.Contains(req.GetStates(), info.GetState()) {
			continue
		}
		match = append(match, info)
	}
	resp := &agentv1.ListSessionsResponse{}
	if offset < len(match) {
		end := min(offset+size, len(match))
		resp.Sessions = match[offset:end]
		if end < len(match) {
			resp.NextPageToken = base64.RawURLEncoding.EncodeToString(fmt.Appendf(nil, "offset:%d", end))
		}
	}
	return resp, nil
}

// CloseSession implements agentv1.AgentServiceServer.
func (s *Service) CloseSession(ctx context.Context, req *agentv1.CloseSessionRequest) (*agentv1.CloseSessionResponse, error) {
	sess, err := s.lookup(req.GetSessionId())
	if err != nil {
		return nil, err
	}
	if sess.agent == nil { // suspended: just mark the record closed
		sess.mu.Lock()
		sess.info.State = agentv1.SessionState_SESSION_STATE_CLOSED
		sess.mu.Unlock()
		return &agentv1.CloseSessionResponse{Session: sess.snapshotInfo()}, nil
	}
	s.closeChildren(ctx, req.GetSessionId())
	sess.end(ctx, agentv1.SessionEndReason_SESSION_END_REASON_CLOSED, nil)
	return &agentv1.CloseSessionResponse{Session: sess.snapshotInfo()}, nil
}

// closeChildren closes a session's subagents (with a 5 s grace each).
func (s *Service) closeChildren(ctx context.Context, parentID string) {
	s.mu.Lock()
	var kids []*session
	for _, c := range s.sessions {
		if c.info.GetParentSessionId() == parentID {
			kids = append(kids, c)
		}
	}
	s.mu.Unlock()
	parent, _ := s.lookup(parentID)
	for _, c := range kids {
		s.closeChild(ctx, parent, c)
	}
}

// closeChild closes a subagent and its own subagents (with a 5 s grace
// each) and tells its parent; it reports false when it was not open.
func (s *Service) closeChild(ctx context.Context, parent, c *session) bool {
	if c.agent == nil {
		return false
	}
	s.closeChildren(ctx, c.info.GetSessionId())
	gctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	closed := c.end(gctx, agentv1.SessionEndReason_SESSION_END_REASON_CLOSED, nil)
	cancel()
	if closed && parent != nil && parent.log != nil {
		parent.emit(&agentv1.AgentEvent{PromptId: parent.currentPrompt(), Event: &agentv1.AgentEvent_SubAgentClosed{SubAgentClosed: &agentv1.SubAgentClosed{ChildSessionId: c.info.GetSessionId()}}})
	}
	return closed
}

// ResumeSession implements agentv1.AgentServiceServer.
func (s *Service) ResumeSession(ctx context.Context, req *agentv1.ResumeSessionRequest) (*agentv1.ResumeSessionResponse, error) {
	if req.GetSessionId() == "" {
		return nil, status.Error(codes.InvalidArgument, "session_id is required")
	}
	if err := validateOptions(req.GetOptions()); err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	if sess, err := s.lookup(req.GetSessionId()); err == nil {
		if st := sess.state(); st != agentv1.SessionState_SESSION_STATE_CLOSED && st != agentv1.SessionState_SESSION_STATE_SUSPENDED {
			return nil, status.Errorf(codes.FailedPrecondition, "session %q is already loaded", req.GetSessionId())
		}
		if sess.log != nil {
			flushCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
			_ = sess.log.Flush(flushCtx)
			cancel()
			sess.writeRecord()
		}
	}
	rec, err := s.readRecord(req.GetSessionId())
	switch {
	case errors.Is(err, os.ErrNotExist):
		return nil, status.Errorf(codes.NotFound, "no record of session %q", req.GetSessionId())
	case err != nil:
		return nil, status.Errorf(codes.DataLoss, "session %q: %v", req.GetSessionId(), err)
	}
	old := rec.GetSession()
	selector := req.GetModel()
	if selector == "" {
		selector = old.GetRoute().GetSelector()
	}
	route, err := s.resolveRoute(ctx, selector)
	if err != nil {
		return nil, err
	}
	sbID, spec, owned := req.GetSandboxId(), req.GetSandboxSpec(), false
	if sbID == "" && spec == nil {
		sbID = old.GetSandboxId()
		if _, err := s.sandbox.GetSandbox(ctx, &sandboxv1.GetSandboxRequest{SandboxId: sbID}); err != nil {
			return nil, status.Errorf(codes.FailedPrecondition, "the sandbox of session %q is gone; give a replacement", req.GetSessionId())
		}
		owned = old.GetSandboxOwned()
	}
	sb, created, err := s.attachSandbox(ctx, sbID, spec)
	if err != nil {
		return nil, err
	}
	opts := rec.GetOptions()
	if req.GetOptions() != nil {
		opts = req.GetOptions()
	}
	info := &agentv1.Session{
		SessionId: old.GetSessionId(), ParentSessionId: old.GetParentSessionId(), RootSessionId: old.GetRootSessionId(),
		Depth: old.GetDepth(), CreateTime: old.GetCreateTime(), PromptCount: old.GetPromptCount(),
	}
	sess, err := s.newSession(ctx, info, route, old.GetPermissionLevel(), sb, owned || created, rec.GetRequestedModel(), opts,
		rec.GetMessages(), old.GetLastSequence(), true, spawnInfo{}, s.resumeExt(old, rec))
	if err != nil {
		return nil, err
	}
	for _, l := range rec.GetTodoLists() {
		sess.todos.Restore(l) // the plan, or the tree's tasks when not loaded already
	}
	return &agentv1.ResumeSessionResponse{Session: sess.snapshotInfo()}, nil
}

// StreamEvents implements agentv1.AgentServiceServer.
func (s *Service) StreamEvents(req *agentv1.StreamEventsRequest, stream grpc.ServerStreamingServer[agentv1.StreamEventsResponse]) error {
	sess, err := s.lookup(req.GetSessionId())
	if err != nil {
		return err
	}
	ctx := stream.Context()
	if req.GetIncludeSubagents() {
		return s.streamTree(ctx, sess, req, stream)
	}
	var sub *bus.Sub
	var committed uint64
	if sess.log != nil {
		sub, committed = sess.log.Subscribe()
		defer sub.Close()
	} else {
		committed = sess.snapshotInfo().GetLastSequence()
	}
	from := max(req.GetFromSequence(), 1)
	if from > committed+1 {
		return status.Errorf(codes.OutOfRange, "from_sequence %d is past the next sequence %d", from, committed+1)
	}
	ended := false
	if from <= committed {
		err := s.bus.Replay(ctx, req.GetSessionId(), from, committed, func(ev *agentv1.AgentEvent) error {
			ended = ev.GetSessionEnded() != nil
			return stream.Send(&agentv1.StreamEventsResponse{Event: ev})
		})
		if err != nil {
			if ctx.Err() != nil {
				return status.FromContextError(ctx.Err()).Err()
			}
			return replayStatus(err)
		}
	}
	if !req.GetFollow() || ended || sub == nil || sess.state() == agentv1.SessionState_SESSION_STATE_CLOSED && sess.log.Committed() == committed {
		return nil
	}
	for {
		ev, err := sub.Next(ctx)
		if err != nil {
			if errors.Is(err, bus.ErrEventStream) {
				return eventLogStatus(err)
			}
			return status.FromContextError(err).Err()
		}
		if ev.GetSequence() <= committed {
			continue
		}
		if err := stream.Send(&agentv1.StreamEventsResponse{Event: ev}); err != nil {
			return err
		}
		if ev.GetSessionEnded() != nil {
			return nil
		}
	}
}

// streamTree is StreamEvents with include_subagents: the session's events
// from from_sequence and its descendants' events committed since, in
// commit order, then (with follow) live ones until session_ended.
func (s *Service) streamTree(ctx context.Context, sess *session, req *agentv1.StreamEventsRequest, stream grpc.ServerStreamingServer[agentv1.StreamEventsResponse]) error {
	id := req.GetSessionId()
	desc := s.descendants(id)
	sub := s.hub.subscribe(id, desc...) // before the replay: nothing falls between
	defer sub.Close()
	committed := sess.snapshotInfo().GetLastSequence()
	from := max(req.GetFromSequence(), 1)
	if from > committed+1 {
		return status.Errorf(codes.OutOfRange, "from_sequence %d is past the next sequence %d", from, committed+1)
	}
	sent := map[string]uint64{}
	started, ended := from <= 1, false
	send := func(ev *agentv1.AgentEvent) error {
		sent[ev.GetSessionId()] = ev.GetSequence()
		if ev.GetSessionId() == id && ev.GetSessionEnded() != nil {
			ended = true
		}
		return stream.Send(&agentv1.StreamEventsResponse{Event: ev})
	}
	err := s.bus.ReplayMany(ctx, append([]string{id}, desc...), func(ev *agentv1.AgentEvent) error {
		if ev.GetSessionId() == id {
			if ev.GetSequence() < from {
				return nil
			}
			started = true
		} else if !started {
			return nil
		}
		return send(ev)
	})
	if err != nil {
		if ctx.Err() != nil {
			return status.FromContextError(ctx.Err()).Err()
		}
		return replayStatus(err)
	}
	if !req.GetFollow() || ended || sess.log == nil {
		return nil
	}
	for {
		ev, err := sub.Next(ctx)
		if err != nil {
			if errors.Is(err, bus.ErrEventStream) {
				return eventLogStatus(err)
			}
			return status.FromContextError(err).Err()
		}
		if ev.GetSequence() <= sent[ev.GetSessionId()] || ev.GetSessionId() == id && ev.GetSequence() < from {
			continue
		}
		if err := send(ev); err != nil {
			return err
		}
		if ended {
			return nil
		}
	}
}
