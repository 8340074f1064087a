package agent

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	agentv1 "github.com/fabro-sh/fabro-go/gen/fabro/agent/v1"
	llmv1 "github.com/fabro-sh/fabro-go/gen/fabro/llm/v1"
	sandboxv1 "github.com/fabro-sh/fabro-go/gen/fabro/sandbox/v1"
	"github.com/fabro-sh/fabro-go/platform/auth"
	"github.com/fabro-sh/fabro-go/platform/grpcerr"
	"github.com/fabro-sh/fabro-go/services/agent/internal/loop"
	"github.com/fabro-sh/fabro-go/services/agent/internal/records"
)

// A restart is a takeover: a session whose record names an unfinished
// prompt (its process died mid-prompt: a kill -9, a crash, a replica cut
// off) is resumed and its prompt continued from the record's checkpoint,
// by the process that starts next (resumeOnStart) as by a replica that
// sees the owner's lease expire (cluster.go). Both take continueUnfinished.

// errNoUnfinished: the record names no prompt a resume would continue.
var errNoUnfinished = errors.New("no unfinished prompt on record")

// continueUnfinished resumes a session on record and continues its
// unfinished prompt, in the background, under the same prompt id: its
// watchers (reconnecting to any replica) find its events in the stream.
// A subagent's prompt is ended instead (endUnfinished). errNoUnfinished
// when the record names none, or names a closed session.
func (s *Service) continueUnfinished(ctx context.Context, id string) error {
	rec, rev, err := s.records.Get(ctx, id)
	if err != nil {
		return err
	}
	info := rec.GetSession()
	promptID := rec.GetUnfinishedPromptId()
	if info.GetState() == agentv1.SessionState_SESSION_STATE_CLOSED || promptID == "" {
		return errNoUnfinished
	}
	if err := s.repairFinished(ctx, rec, rev); err != nil {
		return err
	}
	if info.GetParentSessionId() != "" {
		return s.endUnfinished(ctx, rec)
	}
	defer s.markResuming(id, promptID)()
	ctx, sess, err := s.loadRecorded(ctx, rec)
	if err != nil {
		return err
	}
	r, err := s.resumption(ctx, sess, rec)
	if err != nil {
		return err
	}
	// Governed as before the restart, by the token on record; one revoked
	// meanwhile ends the prompt instead.
	gctx, revoked := s.recordedGovernor(ctx, rec)
	done, err := s.startPromptAt(gctx, sess, promptID, r.Turn, false) // counted when it started
	if err != nil {
		return err
	}
	s.closeOpenApprovals(ctx, sess, rec)
	if revoked {
		s.logger.WarnContext(ctx, "an unfinished prompt's token was revoked; the prompt is ended, not continued",
			"session_id", id, "prompt_id", promptID, "token_id", rec.GetUnfinishedPromptTokenId())
		go s.runLoop(context.WithoutCancel(ctx), sess, promptID, done, func(ctx context.Context) (*agentv1.PromptReport, error) {
			return sess.agent.AbandonWith(ctx, promptID, r, agentv1.PromptStatus_PROMPT_STATUS_FAILED,
				agentv1.AgentErrorKind_AGENT_ERROR_KIND_INVALID_STATE, tokenRevokedMessage(rec.GetUnfinishedPromptTokenId()))
		})
		return nil
	}
	go s.runLoop(context.WithoutCancel(gctx), sess, promptID, done, func(ctx context.Context) (*agentv1.PromptReport, error) {
		return sess.agent.Resume(ctx, promptID, r)
	})
	return nil
}

// repairFinished: a record that lags the log (its process died after the
// prompt's prompt_completed was stored, before the record saying so was
// written) names a prompt that ended. Running it again would do its work
// twice: the record is repaired from the log instead (no unfinished
// prompt, the log's last sequence), compare-and-set on the revision read,
// and errNoUnfinished returned. nil when the log holds no end of it.
func (s *Service) repairFinished(ctx context.Context, rec *agentv1.SessionRecord, rev records.Revision) error {
	id, promptID := rec.GetSession().GetSessionId(), rec.GetUnfinishedPromptId()
	last, err := s.bus.LastSequence(ctx, id)
	if err != nil {
		return fmt.Errorf("read the session's last stored sequence: %w", err)
	}
	from := rec.GetSession().GetLastSequence() + 1
	if last < from {
		return nil
	}
	if ended, err := s.promptEnded(ctx, id, promptID, from, last); err != nil || !ended {
		return err
	}
	fixed := proto.Clone(rec).(*agentv1.SessionRecord)
	fixed.UnfinishedPromptId, fixed.UnfinishedPromptTurn = "", 0
	fixed.Session.ActivePromptId, fixed.Session.LastSequence = "", last
	if _, err := s.records.Put(ctx, fixed, rev); err != nil {
		return fmt.Errorf("repair a record that lags the log: %w", err)
	}
	s.logger.InfoContext(ctx, "the record named a prompt the log shows ended; repaired, not run again",
		"session_id", id, "prompt_id", promptID, "last_sequence", last)
	return errNoUnfinished
}

// approvalRestarted is an approval_resolved's message for an approval the
// previous process left waiting.
const approvalRestarted = "the agent's process restarted while this approval waited; it can no longer be answered " +
	"(a continued prompt asks again with a new approval id)"

// closeOpenApprovals resolves every approval the unfinished prompt's
// earlier incarnation requested and nobody answered (its process died as
// it waited): nothing can answer them now, so their watchers are told so
// (DENY, with why), and the call, run again, asks afresh. The running
// prompt is promptID's (startPromptAt came first).
func (s *Service) closeOpenApprovals(ctx context.Context, sess *session, rec *agentv1.SessionRecord) {
	promptID := rec.GetUnfinishedPromptId()
	var open []*agentv1.ApprovalRequested
	err := s.bus.Replay(ctx, sess.info.GetSessionId(), rec.GetSession().GetLastSequence()+1, sess.log.Committed(), func(ev *agentv1.AgentEvent) error {
		if ev.GetPromptId() != promptID {
			return nil
		}
		if a := ev.GetApprovalRequested(); a != nil {
			open = append(open, a)
		}
		if a := ev.GetApprovalResolved(); a != nil {
			open = slices.DeleteFunc(open, func(o *agentv1.ApprovalRequested) bool { return o.GetApprovalId() == a.GetApprovalId() })
		}
		return nil
	})
	if err != nil {
		s.logger.WarnContext(ctx, "read the approvals an unfinished prompt left waiting", "session_id", sess.info.GetSessionId(), "error", err)
		return
	}
	for _, a := range open {
		sess.emitLive(&agentv1.AgentEvent{PromptId: promptID, Event: &agentv1.AgentEvent_ApprovalResolved{ApprovalResolved: &agentv1.ApprovalResolved{
			ApprovalId: a.GetApprovalId(), RequestingSessionId: a.GetRequestingSessionId(),
			Decision: agentv1.ApprovalDecision_APPROVAL_DECISION_DENY, Message: approvalRestarted}}})
	}
}

// promptEnded reports whether the log holds promptID's prompt_completed
// between from and to.
func (s *Service) promptEnded(ctx context.Context, id, promptID string, from, to uint64) (bool, error) {
	ended := false
	if err := s.bus.Replay(ctx, id, from, to, func(ev *agentv1.AgentEvent) error {
		ended = ended || ev.GetPromptId() == promptID && ev.GetPromptCompleted() != nil
		return nil
	}); err != nil {
		return false, fmt.Errorf("read the unfinished prompt's events: %w", err)
	}
	return ended, nil
}

// markResuming says a prompt of id is being continued or ended here
// (s.resuming), until done: a watcher of it waits for its end, and the
// ResumeSession that loads it leaves it be (endInterrupted).
func (s *Service) markResuming(id, promptID string) (done func()) {
	s.mu.Lock()
	if s.resuming == nil {
		s.resuming = map[string]string{}
	}
	s.resuming[id] = promptID
	s.mu.Unlock()
	return func() {
		s.mu.Lock()
		delete(s.resuming, id)
		s.mu.Unlock()
	}
}

// promptInterrupted is why a prompt a ResumeSession found unfinished was
// ended.
const promptInterrupted = "the agent's process stopped while this prompt ran; it was not continued at the restart: " +
	"continue it (fabro sessions resume --continue, or a prompt with continue_unfinished)"

// endInterrupted ends, as a ResumeSession loads it, the prompt the record
// names unfinished when nothing here continues it (-agent-resume-on-start
// off, or a resume that came first): the calls it left running complete
// as INTERRUPTED and its prompt_completed says CANCELLED, so its watchers
// end and a continuation goes on from its history. Nothing when the log
// already ends it, or it never announced itself.
func (s *Service) endInterrupted(ctx context.Context, sess *session, rec *agentv1.SessionRecord) error {
	id, promptID := rec.GetSession().GetSessionId(), rec.GetUnfinishedPromptId()
	s.mu.Lock()
	resuming := s.resuming[id] == promptID
	s.mu.Unlock()
	if promptID == "" || resuming {
		return nil
	}
	ended, err := s.promptEnded(ctx, id, promptID, rec.GetSession().GetLastSequence()+1, sess.log.Committed())
	if err != nil || ended {
		return err
	}
	r, err := s.resumption(ctx, sess, rec)
	switch {
	case errors.Is(err, errNoUnfinished):
		return nil
	case err != nil:
		return err
	}
	defer s.markResuming(id, promptID)()
	done, err := s.startPromptAt(ctx, sess, promptID, r.Turn, false)
	if err != nil {
		return err
	}
	s.closeOpenApprovals(ctx, sess, rec)
	s.runLoop(context.WithoutCancel(ctx), sess, promptID, done, func(ctx context.Context) (*agentv1.PromptReport, error) {
		return sess.agent.Abandon(ctx, promptID, r, promptInterrupted)
	})
	return nil
}

// tokenRevokedMessage is why a continued prompt was ended.
func tokenRevokedMessage(tokenID string) string {
	return fmt.Sprintf("the fabro token %s that governed this prompt was revoked while the agent restarted; the prompt was ended, not continued (prompt again with a valid token)", tokenID)
}

// recordedGovernor is ctx calling as the token holder the record names
// (unfinished_prompt_token_id), and whether that token is known revoked
// (this process holds the token store). Without a token on record ctx is
// as it was: the prompt was ungoverned before the restart too.
func (s *Service) recordedGovernor(ctx context.Context, rec *agentv1.SessionRecord) (context.Context, bool) {
	id := rec.GetUnfinishedPromptTokenId()
	if id == "" {
		return ctx, false
	}
	if s.tokens != nil && !s.tokens.Issued(id) {
		return ctx, true
	}
	p, ok := auth.ParsePrincipal(rec.GetUnfinishedPromptTokenPrincipal())
	if !ok {
		// The owner's name with the recorded token: the gateway governs by
		// the token id, which it checks is still issued.
		p, _ = auth.FromContext(ctx)
	}
	p.TokenID = id
	return auth.WithPrincipal(ctx, p), false
}

// loadRecorded resumes the session on record and returns it, with a context that
// acts for the session's creator (as its continued prompt does).
func (s *Service) loadRecorded(ctx context.Context, rec *agentv1.SessionRecord) (context.Context, *session, error) {
	if p, ok := auth.ParsePrincipal(rec.GetSession().GetPrincipal()); ok {
		ctx = auth.WithPrincipal(ctx, p)
	}
	id := rec.GetSession().GetSessionId()
	if _, err := s.ResumeSession(ctx, &agentv1.ResumeSessionRequest{SessionId: id}); err != nil {
		return ctx, nil, err
	}
	sess, err := s.lookup(ctx, id)
	return ctx, sess, err
}

// subagentRestarted is why a subagent's prompt ended at a restart.
const subagentRestarted = "the agent's process restarted while this subagent ran; its prompt was ended, not continued " +
	"(its parent's prompt goes on and may start it again)"

// endUnfinished closes out a subagent whose process died mid-prompt: the
// parent's prompt, continued from its checkpoint, runs its wait (or its
// spawn_agent) again, and finds the subagent ended. Continuing the
// subagent as well would run its task twice when the parent's turn that
// spawned it runs again. The session is loaded (on a cluster, under its
// lease: one replica does it), the calls it left running complete as
// INTERRUPTED, its prompt_completed says it was CANCELLED by the restart,
// and the session is closed; its record then names no unfinished prompt,
// so it is never done twice. A prompt that died before its prompt_started
// gets none.
func (s *Service) endUnfinished(ctx context.Context, rec *agentv1.SessionRecord) error {
	promptID := rec.GetUnfinishedPromptId()
	defer s.markResuming(rec.GetSession().GetSessionId(), promptID)()
	ctx, sess, err := s.loadRecorded(ctx, rec)
	if err != nil {
		return err
	}
	defer sess.end(context.WithoutCancel(ctx), agentv1.SessionEndReason_SESSION_END_REASON_ERROR,
		&agentv1.AgentError{Kind: agentv1.AgentErrorKind_AGENT_ERROR_KIND_INTERRUPTED, Message: subagentRestarted})
	r, err := s.resumption(ctx, sess, rec)
	switch {
	case errors.Is(err, errNoUnfinished):
		return nil // never announced: nothing to close out but the session
	case err != nil:
		// Loaded, it is this process's to close now (a retry would find
		// it loaded): its prompt still gets its end, its calls are unknown.
		s.logger.WarnContext(ctx, "end a subagent's unfinished prompt without its log", "session_id", sess.info.GetSessionId(), "error", err)
		r.Interrupted = nil
	}
	done, err := s.startPromptAt(ctx, sess, promptID, r.Turn, false) // counted when it started
	if err != nil {
		return err
	}
	s.closeOpenApprovals(ctx, sess, rec)
	s.runLoop(context.WithoutCancel(ctx), sess, promptID, done, func(ctx context.Context) (*agentv1.PromptReport, error) {
		return sess.agent.Abandon(ctx, promptID, r, subagentRestarted)
	})
	return nil
}

// resumption reads what the prompt's earlier incarnation logged after the
// record's checkpoint: its input (a checkpoint before the first turn),
// the calls it left running, and whether the turn that runs again had
// output.
func (s *Service) resumption(ctx context.Context, sess *session, rec *agentv1.SessionRecord) (loop.Resumption, error) {
	promptID := rec.GetUnfinishedPromptId()
	r := loop.Resumption{Turn: rec.GetUnfinishedPromptTurn()}
	from, to := rec.GetSession().GetLastSequence()+1, sess.log.Committed()
	var started *agentv1.PromptStarted
	var open []*agentv1.ToolCallStarted
	turn := int32(0)
	err := s.bus.Replay(ctx, sess.info.GetSessionId(), from, to, func(ev *agentv1.AgentEvent) error {
		if ev.GetPromptId() != promptID {
			return nil
		}
		switch e := ev.GetEvent().(type) {
		case *agentv1.AgentEvent_PromptStarted:
			started = e.PromptStarted
		case *agentv1.AgentEvent_UserInput:
			if e.UserInput.GetSource() == agentv1.UserInputSource_USER_INPUT_SOURCE_PROMPT {
				r.Input, r.InputEmitted = e.UserInput.GetText(), true
			}
		case *agentv1.AgentEvent_TurnStarted:
			turn = e.TurnStarted.GetTurn()
		case *agentv1.AgentEvent_TextDelta, *agentv1.AgentEvent_ReasoningDelta, *agentv1.AgentEvent_AssistantMessage:
			r.Output = r.Output || turn >= max(r.Turn, 1)
		case *agentv1.AgentEvent_ToolCallStarted:
			open = append(open, e.ToolCallStarted)
		case *agentv1.AgentEvent_ToolCallCompleted:
			for i, c := range open {
				if c.GetToolCallId() == e.ToolCallCompleted.GetToolCallId() {
					open = append(open[:i], open[i+1:]...)
					break
				}
			}
		}
		return nil
	})
	if err != nil {
		return r, fmt.Errorf("read the unfinished prompt's events: %w", err)
	}
	r.Interrupted = open
	if r.Turn > 0 {
		r.Input, r.InputEmitted = "", false // the history holds it
		return r, nil
	}
	if r.InputEmitted {
		return r, nil
	}
	if started == nil {
		// It died before announcing the prompt: nothing says what it was.
		return r, errNoUnfinished
	}
	r.Input = started.GetText() // "" for a continuation: from the history
	if started.GetContinuation() {
		r.Input = ""
	}
	return r, nil
}

// resumeWait bounds how long resumeOnStart waits for the gateway and the
// sandbox service, which in `fabro serve` answer only once the process's
// own server is up, after New.
const resumeWait = 2 * time.Minute

// resumeOnStart continues, in the background, every unfinished prompt the
// records name (a previous process died mid-prompt), once the services it
// needs answer. It ends with the service (s.stop).
func (s *Service) resumeOnStart() {
	ctx, cancel := context.WithCancel(context.Background())
	s.reaper.Add(1)
	go func() {
		defer s.reaper.Done()
		<-s.stop
		cancel()
	}()
	s.reaper.Add(1)
	go func() {
		defer s.reaper.Done()
		defer cancel()
		// Subagents first: a parent's continued prompt then finds them
		// ended when it waits for them again.
		var subagents, roots []string
		_ = s.scanRecords(ctx, func(rec *agentv1.SessionRecord) bool {
			if rec.GetUnfinishedPromptId() == "" || rec.GetSession().GetState() == agentv1.SessionState_SESSION_STATE_CLOSED {
				return true
			}
			if rec.GetSession().GetParentSessionId() != "" {
				subagents = append(subagents, rec.GetSession().GetSessionId())
			} else {
				roots = append(roots, rec.GetSession().GetSessionId())
			}
			return true
		})
		ids := append(subagents, roots...)
		if len(ids) == 0 {
			return
		}
		deadline := time.Now().Add(resumeWait)
		s.awaitDependencies(ctx, deadline)
		for _, id := range ids {
			s.resumeRetrying(ctx, id, deadline)
		}
	}()
}

// awaitDependencies waits until the gateway and the sandbox service answer
// (any answer but UNAVAILABLE), or the deadline.
func (s *Service) awaitDependencies(ctx context.Context, deadline time.Time) {
	probes := []func(context.Context) error{
		func(ctx context.Context) error {
			_, err := s.sandbox.ListDrivers(ctx, &sandboxv1.ListDriversRequest{})
			return err
		},
		func(ctx context.Context) error {
			_, err := s.llm.ListProviders(ctx, &llmv1.ListProvidersRequest{})
			return err
		},
	}
	for _, probe := range probes {
		for wait := 20 * time.Millisecond; ; wait = min(2*wait, time.Second) {
			pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			err := probe(pctx)
			cancel()
			if status.Code(err) != codes.Unavailable || time.Now().After(deadline) || !sleepCtx(ctx, wait) {
				break
			}
		}
	}
}

// resumeRetrying continues one session's prompt, again while the failure
// is one a retry can cure (UNAVAILABLE), until the deadline.
func (s *Service) resumeRetrying(ctx context.Context, id string, deadline time.Time) {
	start := time.Now()
	for wait := 100 * time.Millisecond; ; wait = min(2*wait, 2*time.Second) {
		err := s.continueUnfinished(ctx, id)
		switch {
		case err == nil:
			s.logger.InfoContext(ctx, "continued a prompt the previous process left unfinished", "session_id", id,
				"after", time.Since(start).Round(time.Millisecond))
			return
		case errors.Is(err, errNoUnfinished):
			return
		case status.Code(err) == codes.Unavailable && time.Now().Before(deadline) && sleepCtx(ctx, wait):
			continue
		}
		if reason := grpcerr.ReasonOf(err); reason != reasonSessionOwned && reason != reasonSessionLoaded {
			s.logger.WarnContext(ctx, "continue an unfinished prompt at start; the session stays SUSPENDED (resume it with --continue)",
				"session_id", id, "error", err)
		}
		return
	}
}

// sleepCtx waits d; false when ctx ended first.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
