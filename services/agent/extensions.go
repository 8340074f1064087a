package agent

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/timestamppb"

	agentv1 "github.com/fabro-sh/fabro-go/gen/fabro/agent/v1"
	"github.com/fabro-sh/fabro-go/platform/grpcerr"
	"github.com/fabro-sh/fabro-go/services/agent/internal/hooks"
	"github.com/fabro-sh/fabro-go/services/agent/internal/loop"
	"github.com/fabro-sh/fabro-go/services/agent/internal/permission"
	"github.com/fabro-sh/fabro-go/services/agent/internal/settings"
	"github.com/fabro-sh/fabro-go/services/agent/internal/toolchain"
)

// withInfo builds a status with the agent's ErrorInfo (reason and
// metadata).
func withInfo(code codes.Code, msg, reason string, md map[string]string) error {
	return domain.New(code, reason, msg, grpcerr.Metadata(md))
}

// settingsStatus is INVALID_ARGUMENT naming the file, line and rule.
func settingsStatus(err error) error {
	var se *settings.Error
	if !errors.As(err, &se) {
		return domain.Internal("settings: " + err.Error())
	}
	md := map[string]string{"file": se.File}
	if se.Line > 0 {
		md["line"] = strconv.Itoa(se.Line)
	}
	if se.Rule != "" {
		md["rule"] = se.Rule
	}
	if se.Forbidden {
		return withInfo(codes.PermissionDenied, "tool settings: "+se.Error(), "HOST_EXTENSION_FORBIDDEN", md)
	}
	return withInfo(codes.InvalidArgument, "bad tool settings: "+se.Error(), "INVALID_SETTINGS", md)
}

// extSpec is what a CreateSession or ResumeSession says about tool
// settings.
type extSpec struct {
	request      *agentv1.ToolSettings
	approvedHash string
	clientTools  []*agentv1.ClientTool
	// inherited are a subagent's parent's layers (files are not read
	// again: the child lives in the parent's trust).
	inherited []settings.Layer
}

// loadLayers collects a session's settings: the operator's file (on this
// host, outside every sandbox), each project file (.fabro/settings.json,
// then Claude Code's .claude/settings.json and .claude/settings.local.json)
// only when its content hash is approved, then the request's. It returns
// the events to emit once the session exists: settings_ignored for every
// file or field not used, and why.
//
// A project file lives in the workspace, which the agent's own tools
// write: taking it unapproved would let the agent configure itself (a
// host-side hook written by a tool call, run at the next session). So its
// hash is checked on every load, and a changed file is ignored until its
// new hash is approved.
func (s *Service) loadLayers(ctx context.Context, sandboxID, workDir string, ext extSpec) ([]settings.Layer, []*agentv1.AgentEvent, error) {
	if ext.inherited != nil {
		layers := slices.Clone(ext.inherited)
		if ext.request != nil {
			layers = append(layers, settings.Layer{Source: "CreateSession.settings", Settings: ext.request, Untrusted: true})
		}
		return layers, nil, nil
	}
	var layers []settings.Layer
	var notes []*agentv1.AgentEvent
	ignored := func(ig ...*agentv1.SettingsIgnored) {
		for _, i := range ig {
			notes = append(notes, &agentv1.AgentEvent{Event: &agentv1.AgentEvent_SettingsIgnored{SettingsIgnored: i}})
		}
	}
	var trusted []string
	if f := s.settingsFile; f != "" {
		data, err := os.ReadFile(f)
		switch {
		case errors.Is(err, os.ErrNotExist):
		case err != nil:
			return nil, nil, withInfo(codes.FailedPrecondition, fmt.Sprintf("the operator's settings file %s cannot be read: %v", f, err), "SETTINGS_UNREADABLE", map[string]string{"file": f})
		default:
			pf, err := settings.Parse(f, data)
			if err != nil {
				return nil, nil, settingsStatus(err)
			}
			trusted = pf.Trusted
			ignored(pf.Ignored...)
			layers = append(layers, settings.Layer{Source: f, Settings: pf.Settings, Data: data})
		}
	}
	found := false
	for _, rel := range settings.ProjectFiles {
		projPath := path.Join(workDir, rel)
		data, _, err := s.readSandboxFile(ctx, sandboxID, projPath, 1<<20)
		switch {
		case err == nil:
			hash := settings.Hash(data)
			found = true
			if hash != ext.approvedHash && !slices.Contains(trusted, hash) {
				ignored(&agentv1.SettingsIgnored{File: projPath, Sha256: hash, Reason: fmt.Sprintf("The project settings file %s (sha256 %s) is not approved and was ignored: "+
					"approve its content with CreateSession's approved_project_settings_sha256 or the operator's trusted_project_settings.", projPath, hash)})
				continue
			}
			pf, err := settings.Parse(projPath, data)
			if err != nil {
				return nil, nil, settingsStatus(err)
			}
			ignored(pf.Ignored...)
			// Approved by the caller alone, the file gets what CreateSession's
			// own settings get: rules and sandbox-side hooks. Host-side hooks
			// and stdio MCP servers run on the agent's host, so only the
			// operator's trusted_project_settings can let a workspace file
			// (which any tool call may have written) bring them.
			layers = append(layers, settings.Layer{Source: projPath, Settings: pf.Settings, Data: data, Untrusted: !slices.Contains(trusted, hash)})
		case errors.Is(err, os.ErrNotExist):
		default:
			s.logger.WarnContext(ctx, "read project settings", "path", projPath, "error", err)
			ignored(&agentv1.SettingsIgnored{File: projPath, Reason: fmt.Sprintf("The project settings file %s could not be read and was ignored: %v", projPath, err)})
		}
	}
	if ext.approvedHash != "" && !found {
		ignored(&agentv1.SettingsIgnored{Sha256: ext.approvedHash, Reason: fmt.Sprintf("approved_project_settings_sha256 is set but no project settings file (%s) exists.", strings.Join(settings.ProjectFiles, ", "))})
	}
	if ext.request != nil {
		layers = append(layers, settings.Layer{Source: "CreateSession.settings", Settings: ext.request, Untrusted: true})
	}
	return layers, notes, nil
}

// buildChain wires the session's tool middleware chain: the permission
// level, the rules, the hooks, the approval, then the tool set.
func (s *Service) buildChain(sess *session) {
	pol := sess.policy
	sess.hooks = &hooks.Engine{
		Hooks:     pol.Hooks,
		Host:      hooks.Host{},
		Sandbox:   hooks.Sandbox{Client: s.sandbox, SandboxID: sess.info.GetSandboxId()},
		SessionID: sess.info.GetSessionId(),
		WorkDir:   sess.env.GetWorkingDirectory(),
		Failed: func(f *agentv1.HookFailed) {
			sess.emitLive(&agentv1.AgentEvent{PromptId: sess.currentPrompt(), Event: &agentv1.AgentEvent_HookFailed{HookFailed: f}})
		},
		Logger: s.logger,
	}
	set := sess.toolset
	rules := toolchain.Rules(&pol.Rules, sess.env.GetWorkingDirectory(), set.Refusal, set.Resolve)
	sess.chain = toolchain.Build(func(ctx context.Context, c toolchain.Call) loop.ToolResult {
		return runSet(ctx, set, c.ToolCall)
	},
		rules,
		toolchain.HookLink(sess.hooks, rules),
		toolchain.Approval(sess))
}

// approval is one ask waiting for an Approve.
type approval struct {
	id, sessionID, rootID string
	answer                chan approvalAnswer // buffered 1; the Approve that answers sends once
	answered              bool                // under Service.amu
}

type approvalAnswer struct {
	decision agentv1.ApprovalDecision
	message  string
}

// Approve implements toolchain.Approver: it emits approval_requested (on
// the root session, so a subagent's ask reaches whoever drives the tree)
// and waits for the Approve RPC, the timeout, or the call's cancellation.
func (sess *session) Approve(ctx context.Context, c toolchain.Call) (bool, string) {
	// "Allow for session" covers what asked: the rule (or, for the default
	// mode and dynamic commands, this very call), not the whole tool.
	key := c.Key
	if key == "" {
		key = "tool\x00" + c.Name
	}
	sess.mu.Lock()
	ok := sess.allowSession[key]
	sess.mu.Unlock()
	if ok {
		return true, ""
	}
	s := sess.svc
	a := &approval{id: newID("ap_"), sessionID: sess.info.GetSessionId(), rootID: sess.info.GetRootSessionId(), answer: make(chan approvalAnswer, 1)}
	s.amu.Lock()
	s.approvals[a.id] = a
	s.amu.Unlock()
	target := sess
	if root := s.loadedSession(a.rootID); root != nil && root.log != nil && root.state() != agentv1.SessionState_SESSION_STATE_CLOSED {
		target = root
	}
	timeout := sess.policy.ApprovalTimeout
	target.emitLive(&agentv1.AgentEvent{PromptId: target.currentPrompt(), Event: &agentv1.AgentEvent_ApprovalRequested{ApprovalRequested: &agentv1.ApprovalRequested{
		ApprovalId: a.id, RequestingSessionId: a.sessionID, ToolName: c.Name, ToolCallId: c.ID, Arguments: c.Arguments,
		Reason: c.Reason, ExpireTime: timestamppb.New(time.Now().Add(timeout))}}})
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	resolved := &agentv1.ApprovalResolved{ApprovalId: a.id, RequestingSessionId: a.sessionID, Decision: agentv1.ApprovalDecision_APPROVAL_DECISION_DENY}
	var ans approvalAnswer
	select {
	case ans = <-a.answer:
	case <-timer.C:
		resolved.TimedOut = true
	case <-ctx.Done():
		resolved.Message = "cancelled"
	}
	s.amu.Lock()
	if !a.answered { // the timeout or the cancellation won
		a.answered = true
	} else if resolved.TimedOut || resolved.Message != "" {
		// An Approve raced us and its answer is in the channel: honour it.
		ans = <-a.answer
		resolved.TimedOut, resolved.Message = false, ""
	}
	s.amu.Unlock()
	if ans.decision != agentv1.ApprovalDecision_APPROVAL_DECISION_UNSPECIFIED {
		resolved.Decision, resolved.Message = ans.decision, ans.message
	}
	target.emitLive(&agentv1.AgentEvent{PromptId: target.currentPrompt(), Event: &agentv1.AgentEvent_ApprovalResolved{ApprovalResolved: resolved}})
	switch {
	case resolved.TimedOut:
		return false, fmt.Sprintf("No approval came within %s, so the call of %s was not run.", timeout, c.Name)
	case ctx.Err() != nil && ans.decision == agentv1.ApprovalDecision_APPROVAL_DECISION_UNSPECIFIED:
		return false, "Cancelled"
	case resolved.Decision == agentv1.ApprovalDecision_APPROVAL_DECISION_ALLOW_SESSION:
		sess.mu.Lock()
		sess.allowSession[key] = true
		sess.mu.Unlock()
		return true, ""
	case resolved.Decision == agentv1.ApprovalDecision_APPROVAL_DECISION_ALLOW_ONCE:
		return true, ""
	}
	msg := "The user denied this call of " + c.Name + "."
	if resolved.Message != "" {
		msg += " They said: " + resolved.Message
	}
	return false, msg
}

// Approve implements agentv1.AgentServiceServer.
func (s *Service) Approve(ctx context.Context, req *agentv1.ApproveRequest) (*agentv1.ApproveResponse, error) {
	if err := checkID("session_id", req.GetSessionId()); err != nil {
		return nil, err
	}
	if err := checkID("approval_id", req.GetApprovalId()); err != nil {
		return nil, err
	}
	d := req.GetDecision()
	if _, known := agentv1.ApprovalDecision_name[int32(d)]; !known || d == agentv1.ApprovalDecision_APPROVAL_DECISION_UNSPECIFIED {
		return nil, domain.InvalidField("decision", "decision must be ALLOW_ONCE, ALLOW_SESSION or DENY")
	}
	if _, _, err := s.find(ctx, "session_id", req.GetSessionId()); err != nil {
		return nil, err
	}
	s.amu.Lock()
	defer s.amu.Unlock()
	a, ok := s.approvals[req.GetApprovalId()]
	if !ok || a.sessionID != req.GetSessionId() && a.rootID != req.GetSessionId() {
		return nil, withInfo(codes.NotFound, fmt.Sprintf("no approval %q in session %q", req.GetApprovalId(), req.GetSessionId()),
			reasonApprovalNotFound, map[string]string{"approval_id": req.GetApprovalId(), "session_id": req.GetSessionId()})
	}
	if a.answered {
		return nil, withInfo(codes.FailedPrecondition, fmt.Sprintf("approval %q was already answered or timed out", a.id),
			reasonApprovalResolved, map[string]string{"approval_id": a.id})
	}
	a.answered = true
	// The answer lets the prompt go on: governed by the answerer's token.
	if as := s.loadedSession(a.sessionID); as != nil {
		as.drive(ctx)
	}
	a.answer <- approvalAnswer{decision: d, message: req.GetMessage()}
	return &agentv1.ApproveResponse{RequestingSessionId: a.sessionID}, nil
}

// forgetApprovals drops a closed session's approval records.
func (s *Service) forgetApprovals(sessionID string) {
	s.amu.Lock()
	defer s.amu.Unlock()
	for id, a := range s.approvals {
		if a.sessionID == sessionID {
			delete(s.approvals, id)
		}
	}
}

// approvalsState is the Service's part for approvals.
type approvalsState struct {
	amu       sync.Mutex
	approvals map[string]*approval
}

// resumeExt rebuilds the settings of a resumed session: the recorded
// request settings and approval over the files as they are now (a
// subagent's parent, when loaded, gives its layers again).
func (s *Service) resumeExt(old *agentv1.Session, rec *agentv1.SessionRecord) extSpec {
	ext := extSpec{request: rec.GetSettings(), approvedHash: rec.GetApprovedProjectSettingsSha256(), clientTools: rec.GetClientTools()}
	if pid := old.GetParentSessionId(); pid != "" {
		if parent := s.loadedSession(pid); parent != nil && parent.layers != nil {
			ext.inherited = parent.layers
		}
	}
	return ext
}

// ParseSettingsFile reads a tool settings file (fabro's format or Claude
// Code's, see docs/permissions.md) for a client such as `fabro exec` that
// sends it on CreateSession; it also returns the project-file hashes the
// file trusts and a warning for each field it does not honour. A missing
// file is no settings.
func ParseSettingsFile(path string) (ts *agentv1.ToolSettings, trusted, warnings []string, err error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil, nil, nil
	}
	if err != nil {
		return nil, nil, nil, err
	}
	pf, err := settings.Parse(path, data)
	if err != nil {
		return nil, nil, nil, err
	}
	pol, err := settings.Build(settings.Layer{Source: path, Settings: pf.Settings, Data: data})
	if err != nil {
		return nil, nil, nil, err
	}
	for _, ig := range append(pf.Ignored, pol.Ignored...) {
		warnings = append(warnings, ig.GetFile()+": "+ig.GetReason())
	}
	return pf.Settings, pf.Trusted, warnings, nil
}

// ProjectSettingsHash is the SHA-256 a project settings file is approved
// by.
func ProjectSettingsHash(data []byte) string { return settings.Hash(data) }

// ProjectSettingsFile is the project settings file's path relative to the
// working directory.
const ProjectSettingsFile = settings.ProjectFile

// ProjectSettingsFiles are every project settings file read, relative to
// the working directory, in order.
var ProjectSettingsFiles = settings.ProjectFiles

// conceal is the tools' Conceal: a path a search or listing found is kept
// from the model when a read rule denies or asks for it, as written or
// where it leads (the searched directory resolved in the sandbox, so a
// search through a link to a denied tree finds nothing there).
func (sess *session) conceal(ctx context.Context, dir string, paths []string) ([]string, error) {
	rs := &sess.policy.Rules
	if !rs.NeedsPaths("grep") {
		return nil, nil
	}
	wd := sess.env.GetWorkingDirectory()
	resolved, err := sess.toolset.Resolve(ctx, []string{wd, dir})
	if err != nil {
		return nil, err
	}
	why := make([]string, len(paths))
	for i, p := range paths {
		sub := permission.Subject{Path: true, Values: []string{permission.Rel(wd, p)}}
		if rel, ok := strings.CutPrefix(p, strings.TrimSuffix(dir, "/")+"/"); ok && resolved[1] != dir {
			sub.Resolved = []string{permission.Rel(resolved[0], path.Join(resolved[1], rel))}
		}
		if d := rs.Concealed(sub); d != "" {
			why[i] = d
		}
	}
	return why, nil
}
