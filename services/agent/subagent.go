package agent

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	agentv1 "github.com/fabro-sh/fabro-go/gen/fabro/agent/v1"
	"github.com/fabro-sh/fabro-go/platform/auth"
	"github.com/fabro-sh/fabro-go/services/agent/internal/tools"
)

// Subagent tools (upstream 2.8): spawn_agent starts a child session on a
// task in the same sandbox and returns at once; send_input gives a child
// more input (a follow-up while it runs, a new prompt once it is done);
// wait blocks until a child (or every child) has finished and returns its
// answer; close_agent closes a child. Children inherit the sandbox, the
// model unless one is named, the permission level and the options, but not
// the skills. Limits (max_open_sessions, max_depth) are error results the
// model sees.
func (s *Service) subagentTools(sess *session) []tools.Extra {
	if !sess.opts.GetSubagents().GetEnabled() {
		return nil
	}
	return []tools.Extra{{
		Name: "spawn_agent",
		Description: "Start a subagent on a self-contained task. It works in the same sandbox with its own conversation and runs in the background; " +
			"call wait with its agent_id to get its answer.",
		Parameters: `{"type":"object","properties":{` +
			`"task":{"type":"string","description":"The complete task for the subagent; it sees nothing of your conversation"},` +
			`"model":{"type":"string","description":"Model selector for the subagent; yours when omitted"},` +
			`"max_turns":{"type":"integer","minimum":0,"description":"Most model turns the subagent may use; 0 or omitted: unlimited"}},` +
			`"required":["task"],"additionalProperties":false}`,
		Category: tools.CategorySubagent,
		Run: func(ctx context.Context, callID string, args []byte) (string, bool) {
			return s.spawnAgent(ctx, sess, callID, args)
		},
	}, {
		Name:        "send_input",
		Description: "Send a message to a subagent: queued as a follow-up while it works, or started as its next task once it is done.",
		Parameters: `{"type":"object","properties":{"agent_id":{"type":"string","description":"The subagent's id"},` +
			`"message":{"type":"string","description":"The message"}},"required":["agent_id","message"],"additionalProperties":false}`,
		Category: tools.CategorySubagent,
		Run:      func(ctx context.Context, _ string, args []byte) (string, bool) { return s.sendInput(ctx, sess, args) },
	}, {
		Name:        "wait",
		Description: "Wait until a subagent (or, without agent_id, every subagent) has finished its task, and return its answer.",
		Parameters: `{"type":"object","properties":{"agent_id":{"type":"string","description":"The subagent's id; all subagents when omitted"}},` +
			`"additionalProperties":false}`,
		Category: tools.CategorySubagent,
		Run:      func(ctx context.Context, _ string, args []byte) (string, bool) { return s.waitAgents(ctx, sess, args) },
	}, {
		Name:        "close_agent",
		Description: "Close a subagent (and its own subagents) when you no longer need it.",
		Parameters:  `{"type":"object","properties":{"agent_id":{"type":"string","description":"The subagent's id"}},"required":["agent_id"],"additionalProperties":false}`,
		Category:    tools.CategorySubagent,
		Run:         func(ctx context.Context, _ string, args []byte) (string, bool) { return s.closeAgent(ctx, sess, args) },
	}}
}

func (s *Service) spawnAgent(ctx context.Context, sess *session, callID string, raw []byte) (string, bool) {
	var a struct {
		Task     string `json:"task"`
		Model    string `json:"model"`
		MaxTurns int32  `json:"max_turns"`
	}
	if err := json.Unmarshal(raw, &a); err != nil || strings.TrimSpace(a.Task) == "" {
		return "spawn_agent needs a non-empty task.", true
	}
	info := sess.snapshotInfo()
	opts := proto.CloneOf(sess.requestedOpts)
	if opts == nil {
		opts = &agentv1.AgentOptions{}
	}
	opts.SkillDirs = nil
	opts.MaxTurns = nil
	if a.MaxTurns > 0 {
		opts.MaxTurns = proto.Int32(a.MaxTurns)
	}
	model := a.Model
	if model == "" {
		model = info.GetRoute().GetSelector()
	}
	child, err := s.createSession(ctx, &agentv1.CreateSessionRequest{
		Model:           model,
		Sandbox:         &agentv1.CreateSessionRequest_SandboxId{SandboxId: info.GetSandboxId()},
		PermissionLevel: info.GetPermissionLevel(),
		Options:         opts,
		ParentSessionId: info.GetSessionId(),
	}, spawnInfo{task: a.Task, toolCallID: callID})
	if err != nil {
		return "Could not start a subagent: " + status.Convert(err).Message(), true
	}
	id := child.info.GetSessionId()
	if err := s.startChild(sess.governed(ctx), child, a.Task); err != nil {
		return "Could not start a subagent: " + status.Convert(err).Message(), true
	}
	return fmt.Sprintf("Subagent %s started on the task. Call wait with agent_id %q for its answer.", id, id), false
}

// startChild runs a prompt on a subagent in the background.
// The child's prompt span is a child of ctx's span, the spawning tool
// call's, though the prompt outlives that call.
func (s *Service) startChild(ctx context.Context, child *session, text string) error {
	promptID := newID("p_")
	done, err := s.startPrompt(ctx, child, promptID, false)
	if err != nil {
		return err
	}
	bg := trace.ContextWithSpan(context.Background(), trace.SpanFromContext(ctx))
	// And the caller of the prompt that spawned it, with its token: the
	// child's model calls are governed by that token's policy (model list,
	// budget) and stop with its revocation, as the parent's do.
	if p, ok := auth.FromContext(ctx); ok {
		bg = auth.WithPrincipal(bg, p)
	}
	go s.runPrompt(bg, child, promptID, text, false, done)
	return nil
}

// child finds one of sess's subagents.
func (s *Service) child(sess *session, id string) (*session, string) {
	c := s.loadedSession(id)
	if c == nil || c.info.GetParentSessionId() != sess.info.GetSessionId() {
		if slices.Contains(s.childIDs(sess.info.GetSessionId()), id) {
			return nil, fmt.Sprintf("Subagent %s is closed.", id)
		}
		return nil, fmt.Sprintf("No subagent %q of this session.", id)
	}
	return c, ""
}

func (s *Service) sendInput(ctx context.Context, sess *session, raw []byte) (string, bool) {
	var a struct {
		AgentID string `json:"agent_id"`
		Message string `json:"message"`
	}
	if err := json.Unmarshal(raw, &a); err != nil || strings.TrimSpace(a.Message) == "" {
		return "send_input needs an agent_id and a non-empty message.", true
	}
	c, msg := s.child(sess, a.AgentID)
	if c == nil {
		return msg, true
	}
	if st := c.state(); st == agentv1.SessionState_SESSION_STATE_CLOSED || st == agentv1.SessionState_SESSION_STATE_SUSPENDED {
		return fmt.Sprintf("Subagent %s is closed.", a.AgentID), true
	}
	c.drive(sess.governed(ctx)) // the child's next turn is governed as the parent's
	if _, err := c.agent.FollowUp(newID("f_"), a.Message); err == nil {
		return fmt.Sprintf("Message queued for subagent %s; it reads it when its current answer is done.", a.AgentID), false
	}
	if err := s.startChild(sess.governed(ctx), c, a.Message); err != nil {
		// It started another prompt between the two checks: queue instead.
		if _, ferr := c.agent.FollowUp(newID("f_"), a.Message); ferr == nil {
			return fmt.Sprintf("Message queued for subagent %s.", a.AgentID), false
		}
		return "Could not send the message: " + status.Convert(err).Message(), true
	}
	return fmt.Sprintf("Subagent %s started on the message. Call wait for its answer.", a.AgentID), false
}

func (s *Service) waitAgents(ctx context.Context, sess *session, raw []byte) (string, bool) {
	var a struct {
		AgentID string `json:"agent_id"`
	}
	_ = json.Unmarshal(raw, &a)
	var kids []*session
	if a.AgentID != "" {
		c, msg := s.child(sess, a.AgentID)
		if c == nil {
			return msg, true
		}
		kids = append(kids, c)
	} else {
		for _, id := range s.childIDs(sess.info.GetSessionId()) {
			if c, _ := s.child(sess, id); c != nil && c.agent != nil {
				kids = append(kids, c)
			}
		}
		if len(kids) == 0 {
			return "This session has no subagents.", true
		}
	}
	var b strings.Builder
	failed := false
	for _, c := range kids {
		c.mu.Lock()
		done := c.done
		c.mu.Unlock()
		if done != nil {
			select {
			case <-done:
			case <-ctx.Done():
				return "Cancelled while waiting for subagents.", true
			}
		}
		c.mu.Lock()
		rep := c.lastReport
		c.mu.Unlock()
		id := c.info.GetSessionId()
		if b.Len() > 0 {
			b.WriteString("\n\n")
		}
		if rep == nil {
			fmt.Fprintf(&b, "Subagent %s has not run a task.", id)
			continue
		}
		ok := rep.GetStatus() == agentv1.PromptStatus_PROMPT_STATUS_COMPLETED
		failed = failed || !ok
		fmt.Fprintf(&b, "Agent %s completed (success: %t, turns: %d)", id, ok, rep.GetTurns())
		if !ok {
			fmt.Fprintf(&b, " [%s: %s]", strings.TrimPrefix(rep.GetStatus().String(), "PROMPT_STATUS_"), rep.GetError().GetMessage())
		}
		b.WriteString("\n")
		b.WriteString(rep.GetOutput())
	}
	return b.String(), failed && len(kids) == 1
}

func (s *Service) closeAgent(ctx context.Context, sess *session, raw []byte) (string, bool) {
	var a struct {
		AgentID string `json:"agent_id"`
	}
	_ = json.Unmarshal(raw, &a)
	c, msg := s.child(sess, a.AgentID)
	if c == nil {
		return msg, true
	}
	if !s.closeChild(context.WithoutCancel(ctx), sess, c) {
		return fmt.Sprintf("Subagent %s was already closed.", a.AgentID), false
	}
	return fmt.Sprintf("Subagent %s closed.", a.AgentID), false
}

// childIDs lists a session's direct children this process knows, oldest
// first.
func (s *Service) childIDs(parentID string) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.tree[parentID]...)
}

// parentOf is a subagent's loaded parent; nil for a root session.
func (s *Service) parentOf(sess *session) *session {
	pid := sess.info.GetParentSessionId()
	if pid == "" {
		return nil
	}
	p := s.loadedSession(pid)
	if p == nil || p.log == nil {
		return nil
	}
	return p
}

// notifyParent reports a subagent's finished prompt to its parent:
// sub_agent_failed for a failure, sub_agent_completed otherwise.
func (s *Service) notifyParent(sess *session, rep *agentv1.PromptReport) {
	parent := s.parentOf(sess)
	if parent == nil || rep == nil {
		return
	}
	id := sess.info.GetSessionId()
	ev := &agentv1.AgentEvent{PromptId: parent.currentPrompt()}
	if rep.GetStatus() == agentv1.PromptStatus_PROMPT_STATUS_FAILED {
		ev.Event = &agentv1.AgentEvent_SubAgentFailed{SubAgentFailed: &agentv1.SubAgentFailed{ChildSessionId: id, Error: rep.GetError()}}
	} else {
		ev.Event = &agentv1.AgentEvent_SubAgentCompleted{SubAgentCompleted: &agentv1.SubAgentCompleted{
			ChildSessionId: id, Success: rep.GetStatus() == agentv1.PromptStatus_PROMPT_STATUS_COMPLETED,
			Turns: rep.GetTurns(), Output: rep.GetOutput(), Usage: rep.GetUsage(), Cost: rep.GetCost()}}
	}
	parent.emitLive(ev)
}
