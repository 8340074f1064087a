package agent

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"

	agentv1 "github.com/fabro-sh/fabro-go/gen/fabro/agent/v1"
	llmv1 "github.com/fabro-sh/fabro-go/gen/fabro/llm/v1"
	"github.com/fabro-sh/fabro-go/platform/grpcerr"
	"github.com/fabro-sh/fabro-go/platform/logging"
)

// preparePrompt checks a Prompt or StartPrompt request and returns its
// open session.
func (s *Service) preparePrompt(ctx context.Context, id, text string, cont bool) (*session, error) {
	if err := checkID("session_id", id); err != nil {
		return nil, err
	}
	if cont && text != "" {
		return nil, domain.InvalidField("text", "text must be empty with continue_unfinished")
	}
	if !cont && strings.TrimSpace(text) == "" {
		return nil, domain.InvalidField("text", "text is required")
	}
	sess, err := s.lookup(ctx, id)
	if err != nil {
		return nil, err
	}
	if cont {
		h := sess.agent.History()
		if len(h) == 0 || h[len(h)-1].GetRole() == llmv1.Role_ROLE_ASSISTANT && !hasToolCalls(h[len(h)-1]) {
			return nil, domain.New(codes.FailedPrecondition, reasonNothingUnfinished, "the session has no unfinished prompt", grpcerr.Meta("session_id", id))
		}
	}
	return sess, nil
}

// runContext is the context a prompt runs under: the caller's values
// (trace, principal), but not its cancellation unless the caller asked
// for cancel-on-disconnect. The prompt belongs to the service.
func runContext(ctx context.Context, cancelOnDisconnect bool) context.Context {
	if cancelOnDisconnect {
		return ctx
	}
	return context.WithoutCancel(ctx)
}

// Prompt implements agentv1.AgentServiceServer.
func (s *Service) Prompt(req *agentv1.PromptRequest, stream grpc.ServerStreamingServer[agentv1.PromptResponse]) error {
	ctx := stream.Context()
	sess, err := s.preparePrompt(ctx, req.GetSessionId(), req.GetText(), req.GetContinueUnfinished())
	if err != nil {
		return err
	}
	promptID := newID("p_")
	done, err := s.startPrompt(ctx, sess, promptID, req.GetContinueUnfinished())
	if err != nil {
		return err
	}
	// The session's own events of this prompt, and its subagents' events
	// without their deltas; subscribed before the prompt starts.
	sub := s.hub.subscribe(sess.info.GetSessionId(), s.descendants(sess.info.GetSessionId())...)
	defer sub.Close()
	go s.runPrompt(runContext(actFor(ctx, sess.info.GetPrincipal()), req.GetCancelOnDisconnect()), sess, promptID, req.GetText(), req.GetContinueUnfinished(), done)
	for {
		ev, err := sub.Next(ctx)
		if err != nil {
			return eventLogStatus(err)
		}
		if !promptEvent(ev, req.GetSessionId(), promptID) {
			continue
		}
		if err := stream.Send(&agentv1.PromptResponse{Event: ev}); err != nil {
			return err
		}
		if ev.GetSessionId() == req.GetSessionId() && ev.GetPromptCompleted() != nil {
			return nil
		}
	}
}

// promptEvent reports whether a Prompt stream of promptID on sessionID
// carries ev: the session's events of the prompt, and its subagents'
// events without their deltas.
func promptEvent(ev *agentv1.AgentEvent, sessionID, promptID string) bool {
	if ev.GetSessionId() == sessionID {
		return ev.GetPromptId() == promptID
	}
	return !isDelta(ev)
}

// StartPrompt implements agentv1.AgentServiceServer.
func (s *Service) StartPrompt(ctx context.Context, req *agentv1.StartPromptRequest) (*agentv1.StartPromptResponse, error) {
	sess, err := s.preparePrompt(ctx, req.GetSessionId(), req.GetText(), req.GetContinueUnfinished())
	if err != nil {
		return nil, err
	}
	promptID := newID("p_")
	done, err := s.startPrompt(ctx, sess, promptID, req.GetContinueUnfinished())
	if err != nil {
		return nil, err
	}
	// Every event of the prompt gets a later sequence than any assigned
	// before it starts.
	from := sess.log.Last() + 1
	go s.runPrompt(context.WithoutCancel(actFor(ctx, sess.info.GetPrincipal())), sess, promptID, req.GetText(), req.GetContinueUnfinished(), done)
	return &agentv1.StartPromptResponse{PromptId: promptID, FromSequence: from}, nil
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
// already runs, UNAVAILABLE while the service shuts down. A continuation
// (cont) goes on with the unfinished prompt, already counted.
func (s *Service) startPrompt(ctx context.Context, sess *session, promptID string, cont bool) (chan struct{}, error) {
	return s.startPromptAt(ctx, sess, promptID, 0, !cont)
}

// startPromptAt is startPrompt for a prompt that continues at a turn
// (restart.go): the record's checkpoint says so from the start.
// ctx's caller, when it holds a token, governs the prompt's model calls
// (governance.go).
func (s *Service) startPromptAt(ctx context.Context, sess *session, promptID string, turn int32, counted bool) (chan struct{}, error) {
	s.mu.Lock()
	closed := s.closed
	if !closed {
		s.prompts.Add(1)
	}
	s.mu.Unlock()
	if closed {
		return nil, domain.New(codes.Unavailable, reasonShuttingDown, "the agent service is shutting down", grpcerr.RetryAfter(time.Second))
	}
	done, err := sess.beginPrompt(promptID, turn, counted, tokenHolder(ctx))
	if err != nil {
		s.prompts.Done()
		return nil, err
	}
	sess.writeRecord() // unfinished_prompt_id: a restart now finds it
	return done, nil
}

// runPrompt runs the loop; a sandbox that disappeared or a failed event
// log ends the session. A sandbox service that could not be reached (for
// longer than the connection waits for a restart) fails the prompt only.
func (s *Service) runPrompt(ctx context.Context, sess *session, promptID, text string, cont bool, done chan struct{}) {
	s.runLoop(ctx, sess, promptID, done, func(ctx context.Context) (*agentv1.PromptReport, error) {
		return sess.agent.Prompt(ctx, promptID, text, cont)
	})
}

// runLoop runs a prompt's loop (run) and what follows its end.
func (s *Service) runLoop(ctx context.Context, sess *session, promptID string, done chan struct{}, run func(context.Context) (*agentv1.PromptReport, error)) {
	defer s.prompts.Done()
	// Every turn acts for the session's owner, whoever started it (a
	// subagent, a resumed prompt after a restart or a takeover).
	ctx = actFor(ctx, sess.info.GetPrincipal())
	ctx = logging.With(ctx, slog.String("session_id", sess.info.GetSessionId()), slog.String("prompt_id", promptID))
	sess.log.SetTraceContext(ctx)
	report, _ := run(ctx)
	sess.log.ClearTraceContext()
	sess.finishPrompt(report)
	// The parent hears of the end before a wait on done returns, so its
	// sub_agent_completed comes before anything the parent does next.
	s.notifyParent(sess, report)
	close(done)
	sess.writeRecord()
	switch {
	case sess.log.Err() != nil:
		s.logger.ErrorContext(ctx, "the session's event log failed; the session ends", "error", sess.log.Err())
		sess.end(context.WithoutCancel(ctx), agentv1.SessionEndReason_SESSION_END_REASON_ERROR,
			&agentv1.AgentError{Kind: agentv1.AgentErrorKind_AGENT_ERROR_KIND_EVENT_STREAM, Message: sess.log.Err().Error()})
	case report.GetError().GetKind() == agentv1.AgentErrorKind_AGENT_ERROR_KIND_SANDBOX_UNAVAILABLE && s.sandboxGone(ctx, sess.info.GetSandboxId()):
		aerr := proto.CloneOf(report.GetError())
		aerr.SandboxId = sess.info.GetSandboxId()
		sess.end(context.WithoutCancel(ctx), agentv1.SessionEndReason_SESSION_END_REASON_ERROR, aerr)
	}
}

// Steer implements agentv1.AgentServiceServer.
func (s *Service) Steer(ctx context.Context, req *agentv1.SteerRequest) (*agentv1.SteerResponse, error) {
	if err := checkID("session_id", req.GetSessionId()); err != nil {
		return nil, err
	}
	if strings.TrimSpace(req.GetText()) == "" {
		return nil, domain.InvalidField("text", "text is required")
	}
	if m := req.GetMode(); agentv1.SteerMode_name[int32(m)] == "" {
		return nil, domain.InvalidField("mode", fmt.Sprintf("mode: unknown value %d", m))
	}
	sess, err := s.lookup(ctx, req.GetSessionId())
	if err != nil {
		return nil, err
	}
	id := newID("st_")
	sess.drive(ctx)
	depth, evicted := sess.agent.Steer(id, req.GetText(), req.GetMode() == agentv1.SteerMode_STEER_MODE_NOW, req.GetActor())
	return &agentv1.SteerResponse{SteeringId: id, QueueDepth: int32(depth), EvictedOldest: evicted}, nil
}

// FollowUp implements agentv1.AgentServiceServer.
func (s *Service) FollowUp(ctx context.Context, req *agentv1.FollowUpRequest) (*agentv1.FollowUpResponse, error) {
	if err := checkID("session_id", req.GetSessionId()); err != nil {
		return nil, err
	}
	if strings.TrimSpace(req.GetText()) == "" {
		return nil, domain.InvalidField("text", "text is required")
	}
	sess, err := s.lookup(ctx, req.GetSessionId())
	if err != nil {
		return nil, err
	}
	id := newID("f_")
	// Governed from now on by the caller's token: its text goes to the
	// model in the prompt's next turn.
	restore := sess.drive(ctx)
	depth, err := sess.agent.FollowUp(id, req.GetText())
	if err != nil {
		restore()
		return nil, domain.New(codes.FailedPrecondition, reasonNoPrompt,
			fmt.Sprintf("session %q has no running prompt; send a Prompt instead", req.GetSessionId()), grpcerr.Meta("session_id", req.GetSessionId()))
	}
	return &agentv1.FollowUpResponse{FollowUpId: id, QueueDepth: int32(depth)}, nil
}

// Interrupt implements agentv1.AgentServiceServer.
func (s *Service) Interrupt(ctx context.Context, req *agentv1.InterruptRequest) (*agentv1.InterruptResponse, error) {
	sess, err := s.lookup(ctx, req.GetSessionId())
	if err != nil {
		return nil, err
	}
	ok, gen := sess.agent.Interrupt()
	return &agentv1.InterruptResponse{Interrupted: ok, Generation: gen}, nil
}

// Abort implements agentv1.AgentServiceServer.
func (s *Service) Abort(ctx context.Context, req *agentv1.AbortRequest) (*agentv1.AbortResponse, error) {
	sess, err := s.lookup(ctx, req.GetSessionId())
	if err != nil {
		return nil, err
	}
	ok, id := sess.agent.Abort(req.GetReason())
	return &agentv1.AbortResponse{Aborted: ok, PromptId: id}, nil
}
