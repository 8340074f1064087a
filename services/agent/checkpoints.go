package agent

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	agentv1 "github.com/fabro-sh/fabro-go/gen/fabro/agent/v1"
	llmv1 "github.com/fabro-sh/fabro-go/gen/fabro/llm/v1"
	sandboxv1 "github.com/fabro-sh/fabro-go/gen/fabro/sandbox/v1"
	"github.com/fabro-sh/fabro-go/platform/grpcerr"
	"github.com/fabro-sh/fabro-go/services/agent/internal/checkpoint"
)

const (
	reasonCheckpointNotFound    = "CHECKPOINT_NOT_FOUND"
	reasonCheckpointUserChanges = "CHECKPOINT_USER_CHANGES"
	reasonCheckpointUnavailable = "CHECKPOINTS_UNAVAILABLE"
)

// checkpointTimeout bounds one git script in the sandbox.
const checkpointTimeout = 2 * time.Minute

// ckState is a root session's checkpoints: its store and the session-wide
// turn counter (the loop counts turns per prompt).
type ckState struct {
	mu      sync.Mutex // serializes the store's scripts and guards the rest
	store   *checkpoint.Store
	started bool // the counter was read from the store
	turn    int  // the newest turn started
	pending bool // turn started and not yet recorded
	noGit   bool // the sandbox has no git: logged once, nothing recorded
}

// sandboxRunner runs the checkpoint engine's scripts in a session's
// sandbox, in its working directory, as its owner.
type sandboxRunner struct {
	svc       *Service
	sandboxID string
	owner     string
}

func (r sandboxRunner) Run(ctx context.Context, script string) ([]byte, []byte, int, error) {
	resp, err := r.svc.sandbox.Exec(actFor(ctx, r.owner), &sandboxv1.ExecRequest{SandboxId: r.sandboxID, Spec: &sandboxv1.ExecSpec{
		Command: script, Timeout: durationpb.New(checkpointTimeout), RetainedOutputLimitBytes: 1 << 20}})
	if err != nil {
		return nil, nil, 0, err
	}
	res := resp.GetResult()
	if res.GetTermination() != sandboxv1.Termination_TERMINATION_EXITED || res.ExitCode == nil {
		return nil, nil, 0, fmt.Errorf("checkpoint script ended %s", res.GetTermination())
	}
	return res.GetStdout(), res.GetStderr(), int(res.GetExitCode()), nil
}

// ckStateOf is the checkpoint state of a loaded session, created on first
// use; nil for a subagent, whose workspace is its root's (the root's
// checkpoints record what it changed).
func (s *Service) ckStateOf(sess *session) *ckState {
	if sess.info.GetParentSessionId() != "" {
		return nil
	}
	id := sess.info.GetSessionId()
	s.ckMu.Lock()
	defer s.ckMu.Unlock()
	if st, ok := s.ckStates[id]; ok {
		return st
	}
	if s.ckStates == nil {
		s.ckStates = map[string]*ckState{}
	}
	st := s.newCkState(sess.info)
	s.ckStates[id] = st
	return st
}

// newCkState is the checkpoint state of a session, loaded or on record.
func (s *Service) newCkState(info *agentv1.Session) *ckState {
	// Outside the workspace, in the sandbox's temporary directory, one
	// repository per session.
	dir := "/tmp/fabro-checkpoints/" + info.GetSessionId()
	return &ckState{store: checkpoint.New(sandboxRunner{svc: s, sandboxID: info.GetSandboxId(), owner: info.GetPrincipal()}, dir)}
}

// forgetCheckpoints drops a deleted session's state.
func (s *Service) forgetCheckpoints(id string) {
	s.ckMu.Lock()
	delete(s.ckStates, id)
	s.ckMu.Unlock()
}

// checkpointEvent is called by the session's emitter before it commits a
// loop event: a turn's start records the turn before it (and, for the
// session's first, the workspace as it was before), the prompt's end its
// last turn. A turn that changed nothing records nothing.
func (s *Service) checkpointEvent(sess *session, ev *agentv1.AgentEvent) {
	if s.noCheckpoints || (ev.GetTurnStarted() == nil && ev.GetPromptCompleted() == nil) {
		return
	}
	st := s.ckStateOf(sess)
	if st == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), checkpointTimeout)
	defer cancel()
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.noGit {
		return
	}
	if !st.started {
		cps, err := st.store.List(ctx)
		if err != nil {
			s.checkpointFailed(sess, st, err)
			return
		}
		st.started = true
		if len(cps) > 0 {
			st.turn = cps[len(cps)-1].Turn
		} else if ev.GetTurnStarted() != nil {
			// The baseline: the workspace before the session's first turn,
			// with the history before its prompt.
			h := sess.agent.History()
			n := len(h)
			if n > 0 && h[n-1].GetRole() == llmv1.Role_ROLE_USER {
				n--
			}
			if _, _, err := st.store.RecordNote(ctx, 0, "history "+strconv.Itoa(n)); err != nil {
				s.checkpointFailed(sess, st, err)
				return
			}
		}
	}
	if st.pending {
		st.pending = false
		n := len(sess.agent.History())
		cp, ok, err := st.store.RecordNote(ctx, st.turn, "history "+strconv.Itoa(n))
		if err != nil {
			s.checkpointFailed(sess, st, err)
			return
		}
		if ok {
			_, _ = sess.log.Emit(&agentv1.AgentEvent{PromptId: ev.GetPromptId(), Event: &agentv1.AgentEvent_CheckpointCreated{
				CheckpointCreated: &agentv1.CheckpointCreated{Checkpoint: cpProto(cp)}}})
		}
	}
	if ev.GetTurnStarted() != nil {
		st.turn++
		st.pending = true
	}
}

// checkpointFailed logs a failure to record; a sandbox without git is
// said once, with a warning event, and then left alone.
func (s *Service) checkpointFailed(sess *session, st *ckState, err error) {
	id := sess.info.GetSessionId()
	if errors.Is(err, checkpoint.ErrNoGit) {
		st.noGit = true
		s.logger.Warn("checkpoints unavailable: the sandbox has no git", "session_id", id, "sandbox_id", sess.info.GetSandboxId())
		_, _ = sess.log.Emit(&agentv1.AgentEvent{PromptId: sess.currentPrompt(), Event: &agentv1.AgentEvent_Warning{Warning: &agentv1.Warning{
			Message: "checkpoints are unavailable: the sandbox has no git, so this session's changes cannot be rewound"}}})
		return
	}
	s.logger.Warn("checkpoint not recorded", "session_id", id, "error", err)
}

func cpProto(c checkpoint.Checkpoint) *agentv1.Checkpoint {
	p := &agentv1.Checkpoint{Turn: int32(c.Turn), Commit: c.Commit, Files: c.Files, HistoryLength: -1}
	if n, err := strconv.Atoi(strings.TrimPrefix(c.Note, "history ")); err == nil && strings.HasPrefix(c.Note, "history ") {
		p.HistoryLength = int32(n)
	}
	return p
}

// checkpointSession is the session and checkpoint state a checkpoint RPC
// acts on: a loaded session's, or (loaded false) a closed or suspended
// one's, whose sandbox may still be there (a restore of its history then
// needs ResumeSession first).
func (s *Service) checkpointSession(ctx context.Context, id string) (*session, *ckState, error) {
	sess, rec, err := s.find(ctx, "session_id", id)
	if err != nil {
		return nil, nil, err
	}
	info := rec.GetSession()
	if sess != nil {
		info = sess.info
	}
	if info.GetParentSessionId() != "" {
		return nil, nil, domain.New(codes.FailedPrecondition, reasonCheckpointUnavailable,
			fmt.Sprintf("session %q is a subagent: its root session's checkpoints hold its changes", id), grpcerr.Meta("session_id", id))
	}
	if sess == nil {
		return nil, s.newCkState(info), nil
	}
	return sess, s.ckStateOf(sess), nil
}

func (s *Service) checkpointError(id string, err error) error {
	var uc *checkpoint.UserChangesError
	switch {
	case status.Code(err) == codes.NotFound && !errors.Is(err, checkpoint.ErrNotFound):
		// The sandbox is gone: a session that owned it deleted it when it
		// closed. Its checkpoints are where the sandbox's files were.
		return domain.New(codes.FailedPrecondition, reasonCheckpointUnavailable,
			fmt.Sprintf("session %q: its sandbox is gone; resume the session (fabro sessions resume %s) in a sandbox on the same directory first", id, id),
			grpcerr.Meta("session_id", id))
	case errors.Is(err, checkpoint.ErrNotFound):
		return domain.New(codes.NotFound, reasonCheckpointNotFound, fmt.Sprintf("session %q: %v", id, err), grpcerr.Meta("session_id", id))
	case errors.As(err, &uc):
		return domain.New(codes.FailedPrecondition, reasonCheckpointUserChanges, fmt.Sprintf("session %q: %v", id, err),
			grpcerr.Meta("session_id", id, "files", strings.Join(uc.Files, ",")))
	case errors.Is(err, checkpoint.ErrNoGit):
		return domain.New(codes.FailedPrecondition, reasonCheckpointUnavailable, fmt.Sprintf("session %q: %v", id, err), grpcerr.Meta("session_id", id))
	}
	return upstream("sandbox", "checkpoints of session "+strconv.Quote(id), err)
}

// ListCheckpoints implements agentv1.AgentServiceServer.
func (s *Service) ListCheckpoints(ctx context.Context, req *agentv1.ListCheckpointsRequest) (*agentv1.ListCheckpointsResponse, error) {
	_, st, err := s.checkpointSession(ctx, req.GetSessionId())
	if err != nil {
		return nil, err
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	cps, err := st.store.List(ctx)
	if err != nil {
		return nil, s.checkpointError(req.GetSessionId(), err)
	}
	out := &agentv1.ListCheckpointsResponse{}
	for _, c := range cps {
		out.Checkpoints = append(out.Checkpoints, cpProto(c))
	}
	return out, nil
}

// DiffCheckpoint implements agentv1.AgentServiceServer.
func (s *Service) DiffCheckpoint(ctx context.Context, req *agentv1.DiffCheckpointRequest) (*agentv1.DiffCheckpointResponse, error) {
	if req.Turn != nil && req.GetTurn() < 0 {
		return nil, domain.InvalidField("turn", "turn must not be negative")
	}
	_, st, err := s.checkpointSession(ctx, req.GetSessionId())
	if err != nil {
		return nil, err
	}
	turn := -1
	if req.Turn != nil {
		turn = int(req.GetTurn())
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	d, err := st.store.Diff(ctx, turn)
	if err != nil {
		return nil, s.checkpointError(req.GetSessionId(), err)
	}
	return &agentv1.DiffCheckpointResponse{Diff: d}, nil
}

// RestoreCheckpoint implements agentv1.AgentServiceServer.
func (s *Service) RestoreCheckpoint(ctx context.Context, req *agentv1.RestoreCheckpointRequest) (*agentv1.RestoreCheckpointResponse, error) {
	if req.GetTurn() < 0 {
		return nil, domain.InvalidField("turn", "turn must not be negative")
	}
	id := req.GetSessionId()
	sess, st, err := s.checkpointSession(ctx, id)
	if err != nil {
		return nil, err
	}
	if sess == nil {
		if req.GetConversation() {
			if _, err := s.loaded(ctx, "session_id", id); err != nil {
				return nil, err
			}
		}
		// Not loaded: no prompt can start before a ResumeSession, which
		// the record store serializes with nothing here; the files only.
		return s.restore(ctx, nil, st, req)
	}
	// The session is busy for the restore: no prompt starts meanwhile.
	done, err := sess.beginPrompt("", 0, true, nil)
	if err != nil {
		return nil, err
	}
	resp, err := s.restore(ctx, sess, st, req)
	sess.mu.Lock()
	sess.running = false
	sess.done = nil
	sess.info.PromptCount--
	sess.info.ActivePromptId = ""
	sess.mu.Unlock()
	close(done)
	if err == nil && req.GetConversation() {
		sess.writeRecord()
	}
	return resp, err
}

func (s *Service) restore(ctx context.Context, sess *session, st *ckState, req *agentv1.RestoreCheckpointRequest) (*agentv1.RestoreCheckpointResponse, error) {
	id := req.GetSessionId()
	st.mu.Lock()
	defer st.mu.Unlock()
	cps, err := st.store.List(ctx)
	if err != nil {
		return nil, s.checkpointError(id, err)
	}
	var target *agentv1.Checkpoint
	for _, c := range cps {
		if c.Turn == int(req.GetTurn()) {
			target = cpProto(c)
		}
	}
	if target == nil {
		return nil, s.checkpointError(id, fmt.Errorf("%w: turn %d", checkpoint.ErrNotFound, req.GetTurn()))
	}
	if req.GetConversation() && (target.GetHistoryLength() < 0 || int(target.GetHistoryLength()) > len(sess.agent.History())) { // sess is loaded with conversation
		return nil, domain.New(codes.FailedPrecondition, reasonCheckpointUnavailable,
			fmt.Sprintf("session %q: the history at turn %d is not known; rewind without conversation", id, req.GetTurn()), grpcerr.Meta("session_id", id))
	}
	files, err := st.store.Restore(ctx, int(req.GetTurn()), req.GetForce())
	if err != nil {
		return nil, s.checkpointError(id, err)
	}
	ev := &agentv1.AgentEvent{Event: &agentv1.AgentEvent_CheckpointRestored{CheckpointRestored: &agentv1.CheckpointRestored{
		Turn: req.GetTurn(), Files: files, Conversation: req.GetConversation(), Forced: req.GetForce()}}}
	if sess == nil {
		// Its log is not loaded: the event is not emitted (the files are
		// the only change; the next load sees them).
		return &agentv1.RestoreCheckpointResponse{Files: files, HistoryLength: -1}, nil
	}
	n := len(sess.agent.History())
	if req.GetConversation() {
		h, _ := sess.agent.Truncate(int(target.GetHistoryLength()))
		n = len(h)
	}
	sess.emit(ev)
	return &agentv1.RestoreCheckpointResponse{Files: files, HistoryLength: int32(n)}, nil
}
