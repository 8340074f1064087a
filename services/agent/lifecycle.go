package agent

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"

	agentv1 "github.com/fabro-sh/fabro-go/gen/fabro/agent/v1"
	sandboxv1 "github.com/fabro-sh/fabro-go/gen/fabro/sandbox/v1"
	"github.com/fabro-sh/fabro-go/platform/grpcerr"
	"github.com/fabro-sh/fabro-go/platform/paging"
	"github.com/fabro-sh/fabro-go/services/agent/internal/bus"
)

// GetSession implements agentv1.AgentServiceServer.
func (s *Service) GetSession(ctx context.Context, req *agentv1.GetSessionRequest) (*agentv1.GetSessionResponse, error) {
	sess, rec, err := s.find(ctx, "session_id", req.GetSessionId())
	if err != nil {
		return nil, err
	}
	if sess != nil {
		return &agentv1.GetSessionResponse{Session: sess.snapshotInfo()}, nil
	}
	return &agentv1.GetSessionResponse{Session: rec.GetSession()}, nil
}

// GetHistory implements agentv1.AgentServiceServer.
func (s *Service) GetHistory(ctx context.Context, req *agentv1.GetHistoryRequest) (*agentv1.GetHistoryResponse, error) {
	sess, rec, err := s.find(ctx, "session_id", req.GetSessionId())
	if err != nil {
		return nil, err
	}
	if sess == nil { // not loaded: the record has the history
		return &agentv1.GetHistoryResponse{Messages: rec.GetMessages(), Sequence: rec.GetSession().GetLastSequence()}, nil
	}
	return &agentv1.GetHistoryResponse{Messages: sess.agent.History(), Sequence: sess.log.Committed()}, nil
}

// GetSnapshot implements agentv1.AgentServiceServer.
func (s *Service) GetSnapshot(ctx context.Context, req *agentv1.GetSnapshotRequest) (*agentv1.GetSnapshotResponse, error) {
	sess, rec, err := s.find(ctx, "session_id", req.GetSessionId())
	if err != nil {
		return nil, err
	}
	if sess == nil {
		st := rec.GetSession().GetState()
		reason := reasonSessionSuspended
		if st == agentv1.SessionState_SESSION_STATE_CLOSED {
			reason = reasonSessionClosed
		}
		return nil, domain.New(codes.FailedPrecondition, reason, fmt.Sprintf("session %q is %s: only its Session and history are on record; resume it first",
			req.GetSessionId(), strings.ToLower(strings.TrimPrefix(st.String(), "SESSION_STATE_"))), grpcerr.Meta("session_id", req.GetSessionId()))
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
	for _, id := range s.childIDs(info.GetSessionId()) {
		if c := s.loadedSession(id); c != nil && c.state() != agentv1.SessionState_SESSION_STATE_CLOSED {
			snap.OpenSubagentIds = append(snap.OpenSubagentIds, id)
		}
	}
	slices.Sort(snap.OpenSubagentIds)
	return &agentv1.GetSnapshotResponse{Snapshot: snap}, nil
}

// listBatch is how many ids ListSessions asks the record store for at a
// time.
const listBatch = 256

// ListSessions implements agentv1.AgentServiceServer. It pages through the
// store's ids (newest first) and reads the record of each candidate only,
// never every record.
func (s *Service) ListSessions(ctx context.Context, req *agentv1.ListSessionsRequest) (*agentv1.ListSessionsResponse, error) {
	size, err := paging.Size(req.GetPageSize())
	if err != nil {
		return nil, domain.InvalidField("page_size", err.Error())
	}
	states := make([]string, 0, len(req.GetStates()))
	for i, st := range req.GetStates() {
		if agentv1.SessionState_name[int32(st)] == "" || st == agentv1.SessionState_SESSION_STATE_UNSPECIFIED {
			return nil, domain.InvalidField(fmt.Sprintf("states[%d]", i), fmt.Sprintf("states[%d]: unknown session state %d", i, st))
		}
		states = append(states, st.String())
	}
	slices.Sort(states)
	parent := req.GetParentSessionId()
	if parent != "" {
		if err := checkID("parent_session_id", parent); err != nil {
			return nil, err
		}
	}
	filter := paging.Filter(strings.Join(states, ","), parent, strconv.FormatBool(req.GetIncludeSubagents()))
	cursor, err := paging.Decode(req.GetPageToken(), filter)
	if err != nil {
		return nil, domain.InvalidField("page_token", err.Error())
	}
	before := ""
	if cursor != nil {
		before = cursor[0]
		if checkID("page_token", before) != nil {
			return nil, domain.InvalidField("page_token", paging.ErrInvalidToken.Error()+": not a token this service issued")
		}
	}
	match := func(info *agentv1.Session) bool {
		if parent != "" {
			if info.GetParentSessionId() != parent {
				return false
			}
		} else if !req.GetIncludeSubagents() && info.GetParentSessionId() != "" {
			return false
		}
		return len(states) == 0 || slices.Contains(req.GetStates(), info.GetState())
	}
	resp := &agentv1.ListSessionsResponse{}
	for len(resp.Sessions) < size {
		ids, err := s.records.List(ctx, before, listBatch)
		if err != nil {
			return nil, s.recordError(ctx, "page_token", before, err)
		}
		for i, id := range ids {
			sess, rec, err := s.findAs(ctx, "session_id", id, false)
			if err != nil {
				continue // deleted meanwhile, unreadable (GetSession says why), or another principal's
			}
			info := rec.GetSession()
			if sess != nil {
				info = sess.snapshotInfo()
			}
			before = id
			if !match(info) {
				continue
			}
			resp.Sessions = append(resp.Sessions, info)
			if len(resp.Sessions) == size {
				if i < len(ids)-1 || len(ids) == listBatch {
					resp.NextPageToken = paging.Encode(filter, id)
				}
				return resp, nil
			}
		}
		if len(ids) < listBatch {
			break
		}
	}
	return resp, nil
}

// CloseSession implements agentv1.AgentServiceServer.
func (s *Service) CloseSession(ctx context.Context, req *agentv1.CloseSessionRequest) (*agentv1.CloseSessionResponse, error) {
	sess, rec, err := s.find(ctx, "session_id", req.GetSessionId())
	if err != nil {
		return nil, err
	}
	// An owned sandbox is deleted as its owner's.
	ctx = actFor(ctx, ownerOf(sess, rec))
	if sess == nil { // on record only: the record says CLOSED from now on
		if rec.GetSession().GetState() != agentv1.SessionState_SESSION_STATE_CLOSED {
			if err := s.closeRecords(ctx, rec); err != nil {
				return nil, err
			}
			rec.Session.State = agentv1.SessionState_SESSION_STATE_CLOSED
		}
		return &agentv1.CloseSessionResponse{Session: rec.GetSession()}, nil
	}
	s.closeChildren(ctx, req.GetSessionId())
	sess.end(ctx, agentv1.SessionEndReason_SESSION_END_REASON_CLOSED, nil)
	return &agentv1.CloseSessionResponse{Session: sess.snapshotInfo()}, nil
}

// closeRecords closes a session on record and its subagents on record.
func (s *Service) closeRecords(ctx context.Context, rec *agentv1.SessionRecord) error {
	if err := s.closeRecord(ctx, rec); err != nil {
		return err
	}
	for _, id := range s.childrenOf(ctx, rec.GetSession().GetSessionId()) {
		c, crec, err := s.find(ctx, "session_id", id)
		if err != nil || c != nil || crec.GetSession().GetState() == agentv1.SessionState_SESSION_STATE_CLOSED {
			continue
		}
		if err := s.closeRecords(ctx, crec); err != nil {
			return err
		}
	}
	return nil
}

// closeChildren closes a session's loaded subagents (with a 5 s grace
// each).
func (s *Service) closeChildren(ctx context.Context, parentID string) {
	parent := s.loadedSession(parentID)
	for _, id := range s.childIDs(parentID) {
		if c := s.loadedSession(id); c != nil {
			s.closeChild(ctx, parent, c)
		}
	}
}

// closeChild closes a subagent and its own subagents (with a 5 s grace
// each) and tells its parent; it reports false when it was not open.
func (s *Service) closeChild(ctx context.Context, parent, c *session) bool {
	s.closeChildren(ctx, c.info.GetSessionId())
	gctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	closed := c.end(gctx, agentv1.SessionEndReason_SESSION_END_REASON_CLOSED, nil)
	cancel()
	if closed && parent != nil && parent.log != nil {
		parent.emitLive(&agentv1.AgentEvent{PromptId: parent.currentPrompt(), Event: &agentv1.AgentEvent_SubAgentClosed{SubAgentClosed: &agentv1.SubAgentClosed{ChildSessionId: c.info.GetSessionId()}}})
	}
	return closed
}

// DeleteSession implements agentv1.AgentServiceServer.
func (s *Service) DeleteSession(ctx context.Context, req *agentv1.DeleteSessionRequest) (*agentv1.DeleteSessionResponse, error) {
	id := req.GetSessionId()
	sess, rec, err := s.find(ctx, "session_id", id)
	if err != nil {
		return nil, err
	}
	ctx = actFor(ctx, ownerOf(sess, rec)) // an owned sandbox is deleted as its owner's
	// The whole tree below it, found before anything is closed.
	tree := []string{id}
	for i := 0; i < len(tree); i++ {
		tree = append(tree, s.childrenOf(ctx, tree[i])...)
	}
	if sess != nil {
		s.closeChildren(ctx, id)
		sess.end(ctx, agentv1.SessionEndReason_SESSION_END_REASON_CLOSED, nil)
	}
	for i := len(tree) - 1; i >= 0; i-- { // children first: a failure leaves no orphan
		if c := s.loadedSession(tree[i]); c != nil {
			c.end(ctx, agentv1.SessionEndReason_SESSION_END_REASON_CLOSED, nil)
		}
		if err := s.bus.Purge(ctx, tree[i]); err != nil {
			s.logger.ErrorContext(ctx, "purge a deleted session's events", "session_id", tree[i], "error", err)
			return nil, domain.New(codes.Unavailable, reasonNATSUnavailable, fmt.Sprintf("delete session %q: its events could not be purged", tree[i]),
				grpcerr.Meta("service", "nats", "session_id", tree[i]), grpcerr.RetryAfter(time.Second))
		}
		if err := s.records.Delete(ctx, tree[i]); err != nil {
			return nil, s.recordError(ctx, "session_id", tree[i], err)
		}
		s.forget(tree[i])
	}
	return &agentv1.DeleteSessionResponse{}, nil
}

// forget drops a deleted session from the tree index.
func (s *Service) forget(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.tree, id)
	for p, kids := range s.tree {
		if i := slices.Index(kids, id); i >= 0 {
			s.tree[p] = slices.Delete(kids, i, i+1)
		}
	}
}

// ResumeSession implements agentv1.AgentServiceServer.
func (s *Service) ResumeSession(ctx context.Context, req *agentv1.ResumeSessionRequest) (*agentv1.ResumeSessionResponse, error) {
	if err := checkID("session_id", req.GetSessionId()); err != nil {
		return nil, err
	}
	if err := validateOptions(req.GetOptions()); err != nil {
		return nil, err
	}
	// Before the record is read: the retention does not purge it under us.
	release, err := s.holdOpen(req.GetSessionId())
	if err != nil {
		return nil, err
	}
	defer release()
	sess, rec, err := s.find(ctx, "session_id", req.GetSessionId())
	if err != nil {
		return nil, err
	}
	if sess != nil && sess.awaitUnload(ctx) { // closing now: resume from its record
		if sess, rec, err = s.find(ctx, "session_id", req.GetSessionId()); err != nil {
			return nil, err
		}
	}
	if sess != nil {
		return nil, domain.New(codes.FailedPrecondition, reasonSessionLoaded, fmt.Sprintf("session %q is already loaded (%s)", req.GetSessionId(), sess.state()),
			grpcerr.Meta("session_id", req.GetSessionId()))
	}
	old := rec.GetSession()
	principal := old.GetPrincipal()
	if principal == "" {
		principal = principalOf(ctx)
	}
	ctx = actFor(ctx, principal) // its sandbox is its owner's
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
			return nil, domain.New(codes.FailedPrecondition, reasonSandboxGone, fmt.Sprintf("the sandbox of session %q is gone; give a replacement", req.GetSessionId()),
				grpcerr.Meta("session_id", req.GetSessionId(), "sandbox_id", sbID))
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
		Depth: old.GetDepth(), CreateTime: old.GetCreateTime(), PromptCount: old.GetPromptCount(), Principal: principal,
	}
	sess, err = s.newSession(ctx, info, route, old.GetPermissionLevel(), sb, owned || created, rec.GetRequestedModel(), opts,
		rec.GetMessages(), old.GetLastSequence(), true, spawnInfo{}, s.resumeExt(old, rec))
	if err != nil {
		if created {
			_, _ = s.sandbox.DeleteSandbox(context.WithoutCancel(ctx), &sandboxv1.DeleteSandboxRequest{SandboxId: sb.GetSandboxId()})
		}
		return nil, err
	}
	for _, l := range rec.GetTodoLists() {
		sess.todos.Restore(l) // the plan, or the tree's tasks when not loaded already
	}
	if old.GetState() != agentv1.SessionState_SESSION_STATE_CLOSED {
		if err := s.endInterrupted(ctx, sess, rec); err != nil {
			s.logger.WarnContext(ctx, "end a prompt the previous process left unfinished", "session_id", old.GetSessionId(), "error", err)
		}
	}
	return &agentv1.ResumeSessionResponse{Session: sess.snapshotInfo()}, nil
}

// watchFilter is what a StreamEvents call sends: with prompt_id, what the
// Prompt stream of that prompt sends, ending after its prompt_completed.
type watchFilter struct {
	sessionID, promptID string
	// over: the watched prompt is not running; the stream ends with the
	// events stored.
	over bool
}

// promptOver settles whether a watched prompt of a loaded session still
// runs. When it does not (it ended, or never ran here), every event it
// had was emitted; they are awaited so that the replay, up to the
// committed sequence it returns, ends with them, and the stream then ends
// (f.over) instead of waiting for an end it already passed.
func (s *Service) promptOver(ctx context.Context, sess *session, f *watchFilter, committed uint64) (uint64, error) {
	s.mu.Lock()
	resuming := s.resuming[sess.info.GetSessionId()] == f.promptID
	s.mu.Unlock()
	if f.promptID == "" || resuming || sess.currentPrompt() == f.promptID {
		return committed, nil
	}
	f.over = true
	fctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := sess.log.Flush(fctx); err != nil && ctx.Err() == nil && sess.log.Err() != nil {
		return 0, eventLogStatus(err)
	}
	return max(committed, sess.log.Committed()), nil
}

// onRecord is where a watch of a session on record only (not loaded)
// ends: the log's last event, which a record written before its process
// died lags. A follower of a prompt the record names unfinished, which a
// restart or a takeover continues, is told to retry (UNAVAILABLE) until
// the session is loaded again.
func (s *Service) onRecord(ctx context.Context, rec *agentv1.SessionRecord, f *watchFilter, follow bool) (uint64, error) {
	id := rec.GetSession().GetSessionId()
	last, err := s.bus.LastSequence(ctx, id)
	if err != nil {
		return 0, domain.New(codes.Unavailable, reasonNATSUnavailable, err.Error(), grpcerr.RetryAfter(time.Second))
	}
	if follow && f.promptID != "" && f.promptID == rec.GetUnfinishedPromptId() && rec.GetSession().GetState() != agentv1.SessionState_SESSION_STATE_CLOSED &&
		(s.resumesUnfinished || s.replica != nil) {
		return 0, domain.New(codes.Unavailable, reasonPromptResuming, fmt.Sprintf("prompt %q of session %q is being continued after its process stopped; retry", f.promptID, id),
			grpcerr.Meta("session_id", id, "prompt_id", f.promptID), grpcerr.RetryAfter(time.Second))
	}
	f.over = f.promptID != ""
	return max(last, rec.GetSession().GetLastSequence()), nil
}

func (f watchFilter) pass(ev *agentv1.AgentEvent) bool {
	return f.promptID == "" || promptEvent(ev, f.sessionID, f.promptID)
}

// done reports whether a stream whose last event ended it sends no more.
// A replay goes past a session_ended (a resumed session goes on), not past
// the watched prompt's prompt_completed.
func (f watchFilter) done(ended bool) bool { return ended && f.promptID != "" }

// last reports whether ev ends the stream (when it is the newest).
func (f watchFilter) last(ev *agentv1.AgentEvent) bool {
	if ev.GetSessionId() != f.sessionID {
		return false
	}
	if f.promptID != "" {
		return ev.GetPromptId() == f.promptID && ev.GetPromptCompleted() != nil
	}
	return ev.GetSessionEnded() != nil
}

func outOfRange(from, next uint64) error {
	msg := fmt.Sprintf("from_sequence %d is past the next sequence %d", from, next)
	return domain.New(codes.OutOfRange, reasonSequenceAhead, msg,
		grpcerr.Meta("field", "from_sequence", "next_sequence", strconv.FormatUint(next, 10)), grpcerr.Field("from_sequence", msg))
}

// StreamEvents implements agentv1.AgentServiceServer.
func (s *Service) StreamEvents(req *agentv1.StreamEventsRequest, stream grpc.ServerStreamingServer[agentv1.StreamEventsResponse]) error {
	ctx := stream.Context()
	if p := req.GetPromptId(); p != "" {
		if err := checkID("prompt_id", p); err != nil {
			return err
		}
	}
	sess, rec, err := s.find(ctx, "session_id", req.GetSessionId())
	if err != nil {
		return err
	}
	f := watchFilter{sessionID: req.GetSessionId(), promptID: req.GetPromptId()}
	// The replay holds a place of the caller's (replays.go) until the live
	// part, which reads no consumer.
	release, err := s.replays.acquire(ctx)
	if err != nil {
		return err
	}
	defer release()
	if req.GetIncludeSubagents() {
		return s.streamTree(ctx, sess, rec, req, &f, stream, release)
	}
	var sub *bus.Sub
	var committed, next uint64
	if sess != nil {
		sub, committed = sess.log.Subscribe()
		defer sub.Close()
		if committed, err = s.promptOver(ctx, sess, &f, committed); err != nil {
			return err
		}
		next = max(sess.log.Last(), committed) + 1
	} else {
		if committed, err = s.onRecord(ctx, rec, &f, req.GetFollow()); err != nil {
			return err
		}
		next = committed + 1
	}
	from := max(req.GetFromSequence(), 1)
	if from > next {
		return outOfRange(from, next)
	}
	ended := false
	send := func(ev *agentv1.AgentEvent) error {
		if f.done(ended) || !f.pass(ev) {
			return nil
		}
		ended = f.last(ev)
		return stream.Send(&agentv1.StreamEventsResponse{Event: ev})
	}
	if from <= committed {
		err := s.bus.Replay(ctx, req.GetSessionId(), from, committed, send)
		if err != nil {
			return replayStatus(err)
		}
	}
	release()
	if !req.GetFollow() || f.over || f.promptID != "" && ended || sub == nil {
		return nil
	}
	ended = false // a session_ended replayed: the session was resumed since
	for {
		ev, err := sub.Next(ctx)
		if err != nil {
			return eventLogStatus(err)
		}
		if ev.GetSequence() <= committed || ev.GetSequence() < from {
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

// streamTree is StreamEvents with include_subagents: the session's events
// from from_sequence and its descendants' events committed since, in
// commit order, then (with follow) live ones until the end.
func (s *Service) streamTree(ctx context.Context, sess *session, rec *agentv1.SessionRecord, req *agentv1.StreamEventsRequest, f *watchFilter,
	stream grpc.ServerStreamingServer[agentv1.StreamEventsResponse], releaseReplay func()) error {
	id := req.GetSessionId()
	var desc []string
	for queue := []string{id}; len(queue) > 0; queue = queue[1:] {
		kids := s.childrenOf(ctx, queue[0])
		desc = append(desc, kids...)
		queue = append(queue, kids...)
	}
	sub := s.hub.subscribe(id, desc...) // before the replay: nothing falls between
	defer sub.Close()
	var committed, next uint64
	var err error
	if sess != nil {
		if committed, err = s.promptOver(ctx, sess, f, sess.snapshotInfo().GetLastSequence()); err != nil {
			return err
		}
		next = max(sess.log.Last(), committed) + 1
	} else {
		if committed, err = s.onRecord(ctx, rec, f, req.GetFollow()); err != nil {
			return err
		}
		next = committed + 1
	}
	from := max(req.GetFromSequence(), 1)
	if from > next {
		return outOfRange(from, next)
	}
	sent := map[string]uint64{}
	started, ended := from <= 1, false
	send := func(ev *agentv1.AgentEvent) error {
		sent[ev.GetSessionId()] = ev.GetSequence()
		if f.done(ended) || !f.pass(ev) {
			return nil
		}
		if ev.GetSessionId() == id {
			ended = f.last(ev)
		}
		return stream.Send(&agentv1.StreamEventsResponse{Event: ev})
	}
	err = s.bus.ReplayMany(ctx, append([]string{id}, desc...), func(ev *agentv1.AgentEvent) error {
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
		return replayStatus(err)
	}
	releaseReplay()
	if !req.GetFollow() || f.over || f.promptID != "" && ended || sess == nil {
		return nil
	}
	ended = false // a session_ended replayed: the session was resumed since
	for {
		ev, err := sub.Next(ctx)
		if err != nil {
			return eventLogStatus(err)
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
