package agent

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	agentv1 "github.com/fabro-sh/fabro-go/gen/fabro/agent/v1"
	llmv1 "github.com/fabro-sh/fabro-go/gen/fabro/llm/v1"
	sandboxv1 "github.com/fabro-sh/fabro-go/gen/fabro/sandbox/v1"
	"github.com/fabro-sh/fabro-go/platform/grpcerr"
	"github.com/fabro-sh/fabro-go/services/agent/internal/mcptools"
	"github.com/fabro-sh/fabro-go/services/agent/internal/settings"
	"github.com/fabro-sh/fabro-go/services/agent/internal/tools"
)

// defaultMaxOpenInTree is the tree limit when SubagentOptions leaves it
// unset.
const defaultMaxOpenInTree = 4

// lookup is the loaded session of an id a request names: find's errors
// for a bad or unknown id, FAILED_PRECONDITION for a session that is not
// loaded.
func (s *Service) lookup(ctx context.Context, id string) (*session, error) {
	sess, rec, err := s.find(ctx, "session_id", id)
	if err != nil {
		return nil, err
	}
	if sess == nil {
		return s.loaded(ctx, "session_id", rec.GetSession().GetSessionId())
	}
	return sess, nil
}

// upstream is the status of a failed call to the gateway or the sandbox
// service: its code and details pass through, prefixed with what was
// asked; a connection failure is UNAVAILABLE with RetryInfo.
func upstream(service, what string, err error) error {
	p := status.Convert(domain.Upstream(service, err)).Proto()
	p.Message = what + ": " + p.GetMessage()
	return status.FromProto(p).Err()
}

// resolveRoute resolves a model selector through the gateway's catalog.
func (s *Service) resolveRoute(ctx context.Context, selector string) (*agentv1.ModelRoute, error) {
	if selector == "" {
		selector = s.defaultModel
	}
	res, err := s.llm.ResolveModel(ctx, &llmv1.ResolveModelRequest{Selector: selector})
	if err != nil {
		return nil, upstream("llmgateway", "model "+strconv.Quote(selector), err)
	}
	m := res.GetModel()
	profile, err := profileByName(m.GetAgentProfile())
	if err != nil {
		return nil, domain.New(codes.FailedPrecondition, "AGENT_PROFILE_UNKNOWN",
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

// attachSandbox finds or creates the session's sandbox, as the session's
// owner (ctx is actFor it): the sandbox service answers NOT_FOUND for a
// person's sandbox that is not theirs, and an admin's session may not take
// another principal's sandbox either (a session's sandbox is its owner's).
func (s *Service) attachSandbox(ctx context.Context, id string, spec *sandboxv1.SandboxSpec) (*sandboxv1.Sandbox, bool, error) {
	switch {
	case id != "":
		resp, err := s.sandbox.GetSandbox(ctx, &sandboxv1.GetSandboxRequest{SandboxId: id})
		if err != nil {
			return nil, false, upstream("sandbox", "sandbox "+strconv.Quote(id), err)
		}
		// An unowned sandbox (made without authentication, or before
		// owners) is reached by admins only, or by all without authentication.
		if owner, got := actingFor(ctx), resp.GetSandbox().GetOwner(); owner != "" && got != "" && got != owner {
			return nil, false, domain.New(codes.FailedPrecondition, reasonSandboxOwner,
				fmt.Sprintf("sandbox %q belongs to %s, not to the session's owner %s", id, got, owner),
				grpcerr.Meta("sandbox_id", id, "owner", got))
		}
		if st := resp.GetSandbox().GetState(); st != sandboxv1.SandboxState_SANDBOX_STATE_READY {
			return nil, false, domain.New(codes.FailedPrecondition, reasonSandboxNotReady, fmt.Sprintf("sandbox %q is not ready (%s)", id, st),
				grpcerr.Meta("sandbox_id", id, "state", st.String()), grpcerr.RetryAfter(time.Second))
		}
		return resp.GetSandbox(), false, nil
	case spec != nil:
		resp, err := s.sandbox.CreateSandbox(ctx, &sandboxv1.CreateSandboxRequest{Spec: spec})
		if err != nil {
			return nil, false, upstream("sandbox", "create sandbox", err)
		}
		return resp.GetSandbox(), true, nil
	}
	return nil, false, domain.InvalidField("sandbox_id", "a sandbox_id or a sandbox_spec is required")
}

// CreateSession implements agentv1.AgentServiceServer.
func (s *Service) CreateSession(ctx context.Context, req *agentv1.CreateSessionRequest) (*agentv1.CreateSessionResponse, error) {
	sess, err := s.createSession(ctx, req, spawnInfo{principal: principalOf(ctx)})
	if err != nil {
		return nil, err
	}
	return &agentv1.CreateSessionResponse{Session: sess.snapshotInfo()}, nil
}

// spawnInfo is what a spawn_agent call adds to its child's
// sub_agent_spawned event.
type spawnInfo struct{ task, toolCallID, principal string }

func (s *Service) createSession(ctx context.Context, req *agentv1.CreateSessionRequest, spawn spawnInfo) (*session, error) {
	if req.GetSandboxId() == "" && req.GetSandboxSpec() == nil {
		return nil, domain.InvalidField("sandbox_id", "a sandbox_id or a sandbox_spec is required")
	}
	if err := validateOptions(req.GetOptions()); err != nil {
		return nil, err
	}
	level := req.GetPermissionLevel()
	if agentv1.PermissionLevel_name[int32(level)] == "" {
		return nil, domain.InvalidField("permission_level", fmt.Sprintf("permission_level: unknown value %d", level))
	}
	info := &agentv1.Session{Depth: 0, Principal: spawn.principal}
	var parent *session
	if pid := req.GetParentSessionId(); pid != "" {
		p, rec, err := s.find(ctx, "parent_session_id", pid)
		if err != nil {
			return nil, err
		}
		if p == nil || p.state() == agentv1.SessionState_SESSION_STATE_CLOSED {
			st := rec.GetSession().GetState()
			if p != nil {
				st = agentv1.SessionState_SESSION_STATE_CLOSED
			}
			return nil, domain.New(codes.FailedPrecondition, reasonParentNotOpen, fmt.Sprintf("parent session %q is not open (%s)", pid, st),
				grpcerr.Meta("parent_session_id", pid, "state", st.String()))
		}
		parent = p
		pinfo := parent.snapshotInfo()
		if level == agentv1.PermissionLevel_PERMISSION_LEVEL_UNSPECIFIED {
			level = pinfo.GetPermissionLevel()
		}
		if rank(level) > rank(pinfo.GetPermissionLevel()) {
			return nil, domain.New(codes.PermissionDenied, reasonPermissionEscalation,
				fmt.Sprintf("a subagent may not have more permissions than its parent (%s)", pinfo.GetPermissionLevel()),
				grpcerr.Meta("field", "permission_level", "parent_permission_level", pinfo.GetPermissionLevel().String()))
		}
		root := s.loadedSession(pinfo.GetRootSessionId())
		if root == nil {
			return nil, domain.New(codes.FailedPrecondition, reasonParentNotOpen, fmt.Sprintf("the root session %q of the tree is not open", pinfo.GetRootSessionId()),
				grpcerr.Meta("parent_session_id", pid, "root_session_id", pinfo.GetRootSessionId()))
		}
		limit := int(root.opts.GetSubagents().GetMaxOpenSessions())
		if limit == 0 {
			limit = defaultMaxOpenInTree
		}
		release, ok := s.reserveInTree(pinfo.GetRootSessionId(), limit)
		if !ok {
			return nil, domain.New(codes.ResourceExhausted, reasonTreeLimit, fmt.Sprintf("the session tree already has %d open sessions", limit),
				grpcerr.Meta("limit", "max_open_sessions", "value", strconv.Itoa(limit)))
		}
		defer release() // registered by then, or failed
		// GetSubagents is nil when the root sets no subagent options (the
		// field access on it was the parent_session_id panic).
		if sub := root.opts.GetSubagents(); sub != nil && sub.MaxDepth != nil && pinfo.GetDepth()+1 > sub.GetMaxDepth() {
			d := sub.MaxDepth
			return nil, domain.New(codes.ResourceExhausted, reasonTreeLimit, fmt.Sprintf("the session tree allows %d levels of subagents", *d),
				grpcerr.Meta("limit", "max_depth", "value", strconv.Itoa(int(*d))))
		}
		info.ParentSessionId, info.RootSessionId, info.Depth = pid, pinfo.GetRootSessionId(), pinfo.GetDepth()+1
		info.Principal = pinfo.GetPrincipal()
	}
	if level == agentv1.PermissionLevel_PERMISSION_LEVEL_UNSPECIFIED {
		level = agentv1.PermissionLevel_PERMISSION_LEVEL_READ_WRITE
	}
	ctx = actFor(ctx, info.GetPrincipal()) // its sandbox is its owner's
	route, err := s.resolveRoute(ctx, req.GetModel())
	if err != nil {
		return nil, err
	}
	sb, owned, err := s.attachSandbox(ctx, req.GetSandboxId(), req.GetSandboxSpec())
	if err != nil {
		return nil, err
	}
	ext := extSpec{request: req.GetSettings(), approvedHash: req.GetApprovedProjectSettingsSha256(), clientTools: req.GetClientTools()}
	if parent != nil {
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
		info.SessionId = newSessionID()
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

	sess := &session{svc: s, info: info, requestedModel: requestedModel, requestedOpts: requestedOpts, opts: opts, ext: ext, allowSession: map[string]bool{}, unloaded: make(chan struct{})}
	sess.env = s.probeEnvironment(ctx, sb)
	layers, settingsNotes, err := s.loadLayers(ctx, sb.GetSandboxId(), sess.env.GetWorkingDirectory(), ext)
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
		if m.Spec.GetPlace() == agentv1.HookPlace_HOOK_PLACE_SANDBOX {
			srv.Sandbox = &mcptools.SandboxTarget{Client: s.sandbox, SandboxID: sb.GetSandboxId()}
		}
		if m.Guarded {
			srv.HTTPClient = tools.PublicHTTPClient()
		}
		mcpServers = append(mcpServers, srv)
	}
	for _, ig := range sess.policy.Ignored {
		settingsNotes = append(settingsNotes, &agentv1.AgentEvent{Event: &agentv1.AgentEvent_SettingsIgnored{SettingsIgnored: ig}})
	}
	sess.mcp, sess.extExtras = mcptools.Start(ctx, mcpServers, func(f *agentv1.ExtensionFailed) {
		settingsNotes = append(settingsNotes, &agentv1.AgentEvent{Event: &agentv1.AgentEvent_ExtensionFailed{ExtensionFailed: f}})
	}, s.logger)
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
	var ancestors []memoryEntry
	if len(requestedOpts.GetMemoryFiles()) == 0 {
		// The default files apply from the repository's root down.
		ancestors = s.ancestorMemory(ctx, sb.GetSandboxId(), opts.GetMemoryFiles())
	}
	sess.memory, memText = s.loadMemory(ctx, sb.GetSandboxId(), opts.GetMemoryFiles(), ancestors)
	var skipped []*agentv1.SkippedSkill
	sess.skills, skipped = s.discoverSkills(ctx, sb.GetSandboxId(), opts.GetSkillDirs())
	sess.system = systemPrompt(route, level, opts, sess.env, memText, skillsSection(sess.skills), now)
	// On a cluster this replica must own the session first; its events
	// continue after the stream's last.
	if lastSeq, err = s.claim(ctx, info.GetSessionId(), lastSeq); err != nil {
		return nil, err
	}
	defer func() {
		if !built {
			s.release(ctx, info.GetSessionId())
		}
	}()
	s.build(sess, lastSeq, history)
	toolNames := map[string]bool{}
	for _, n := range sess.toolset.Names() {
		toolNames[n] = true
	}
	for name := range opts.GetToolOutputLimits() {
		if !toolNames[name] {
			field := fmt.Sprintf("options.tool_output_limits[%q]", name)
			return nil, domain.InvalidField(field, fmt.Sprintf("options.tool_output_limits: %q is not a tool of the %s profile", name, profileName(route)))
		}
	}
	if err := s.register(sess); err != nil {
		return nil, err
	}

	sess.emit(&agentv1.AgentEvent{Event: &agentv1.AgentEvent_MemoryLoaded{MemoryLoaded: &agentv1.MemoryLoaded{Profile: route.GetProfile(), Memory: sess.memory}}})
	sess.emit(&agentv1.AgentEvent{Event: &agentv1.AgentEvent_SkillsDiscovered{SkillsDiscovered: &agentv1.SkillsDiscovered{SourceDirs: opts.GetSkillDirs(), Skills: sess.skillInfos(), Skipped: skipped}}})
	for _, ev := range settingsNotes {
		s.logger.WarnContext(ctx, "tool settings", "session_id", info.GetSessionId(), "settings_ignored", ev.GetSettingsIgnored(), "extension_failed", ev.GetExtensionFailed())
		sess.emit(ev)
	}
	sess.emit(&agentv1.AgentEvent{Event: &agentv1.AgentEvent_SessionStarted{SessionStarted: &agentv1.SessionStarted{
		Route: route, PermissionLevel: level, SandboxId: sb.GetSandboxId(), WorkingDirectory: sess.env.GetWorkingDirectory(), Resumed: resumed}}})
	sess.hooks.Event(ctx, agentv1.HookEvent_HOOK_EVENT_SESSION_START, "", "")
	if pid := info.GetParentSessionId(); pid != "" {
		if parent := s.loadedSession(pid); parent != nil && parent.log != nil {
			parent.emit(&agentv1.AgentEvent{PromptId: parent.currentPrompt(), Event: &agentv1.AgentEvent_SubAgentSpawned{SubAgentSpawned: &agentv1.SubAgentSpawned{
				ChildSessionId: info.GetSessionId(), Task: spawn.task, Route: route, Depth: info.GetDepth(), ToolCallId: spawn.toolCallID}}})
		}
	}
	if err := sess.log.Flush(ctx); err != nil {
		s.unload(sess)
		return nil, eventLogStatus(err)
	}
	sess.writeRecord()
	built = true
	return sess, nil
}
