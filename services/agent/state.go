package agent

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/timestamppb"

	agentv1 "github.com/fabro-sh/fabro-go/gen/fabro/agent/v1"
	"github.com/fabro-sh/fabro-go/platform/auth"
	"github.com/fabro-sh/fabro-go/platform/grpcerr"
	"github.com/fabro-sh/fabro-go/services/agent/internal/records"
)

// Session state has one owner. The Service's registry (this file) decides
// which sessions are loaded: s.sessions holds the open ones only; a closed
// or suspended session exists only as its record, read when it is touched.
// A loaded session's lifecycle changes only through the session methods
// below (beginPrompt, finishPrompt, markClosed) and every change is
// persisted by writeRecord; handlers never set a session's fields.

// maxIDLen bounds the ids a request may name (ours are far shorter).
const maxIDLen = 128

// checkID validates an id a request names: required, and letters, digits,
// '_' and '-' only (one NATS subject token, one file name).
func checkID(field, id string) error {
	if id == "" {
		return domain.InvalidField(field, field+" is required")
	}
	if len(id) > maxIDLen {
		return domain.InvalidField(field, fmt.Sprintf("%s is longer than %d characters", field, maxIDLen))
	}
	for _, c := range id {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			return domain.InvalidField(field, field+" may hold only letters, digits, '_' and '-'")
		}
	}
	return nil
}

func sessionNotFound(field, id string) error {
	return domain.New(codes.NotFound, reasonSessionNotFound, fmt.Sprintf("no session %q", id), grpcerr.Meta("session_id", id, "field", field))
}

// Loaded reports whether a session is open in this process's memory;
// closed and suspended sessions are only on record.
func (s *Service) Loaded(sessionID string) bool { return s.loadedSession(sessionID) != nil }

// loadedSession is the loaded session of that id, or nil.
func (s *Service) loadedSession(id string) *session {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.sessions[id]
}

// findAny returns the loaded session of that id, or else its record with
// the state a reader sees (SUSPENDED unless it was closed), whoever owns
// it: requests go through find (tenancy.go). field names the request
// field for errors.
func (s *Service) findAny(ctx context.Context, field, id string) (*session, *agentv1.SessionRecord, error) {
	if err := checkID(field, id); err != nil {
		return nil, nil, err
	}
	if sess := s.loadedSession(id); sess != nil {
		return sess, nil, nil
	}
	rec, _, err := s.records.Get(ctx, id)
	if err != nil {
		return nil, nil, s.recordError(ctx, field, id, err)
	}
	// It may have been loaded meanwhile: the loaded one is the truth.
	if sess := s.loadedSession(id); sess != nil {
		return sess, nil, nil
	}
	info := rec.GetSession()
	if info.GetState() != agentv1.SessionState_SESSION_STATE_CLOSED {
		info.State = agentv1.SessionState_SESSION_STATE_SUSPENDED
	}
	info.ActivePromptId = ""
	return nil, rec, nil
}

func (s *Service) recordError(ctx context.Context, field, id string, err error) error {
	switch {
	case errors.Is(err, records.ErrNotFound):
		return sessionNotFound(field, id)
	case errors.Is(err, records.ErrCorrupt):
		s.logger.WarnContext(ctx, "session record", "session_id", id, "error", err)
		// Its owner cannot be read, so only a caller who reaches every
		// session (an admin, a service, no authentication) learns more
		// than the NOT_FOUND of an unknown id.
		if auth.Reaches(ctx, "") == auth.Unreachable {
			return sessionNotFound(field, id)
		}
		return domain.New(codes.DataLoss, reasonRecordCorrupt, fmt.Sprintf("session %q: its record cannot be read: %v", id, err), grpcerr.Meta("session_id", id))
	}
	s.logger.ErrorContext(ctx, "session record store", "session_id", id, "error", err)
	return domain.New(codes.Unavailable, reasonRecordsUnavailable, fmt.Sprintf("session %q: the record store failed", id),
		grpcerr.Meta("session_id", id), grpcerr.RetryAfter(time.Second))
}

// loaded is find for the calls that need an open session:
// FAILED_PRECONDITION for a closed or suspended one.
func (s *Service) loaded(ctx context.Context, field, id string) (*session, error) {
	sess, rec, err := s.find(ctx, field, id)
	if err != nil {
		return nil, err
	}
	st := rec.GetSession().GetState()
	if sess != nil {
		st = sess.state()
	}
	switch st {
	case agentv1.SessionState_SESSION_STATE_CLOSED:
		return nil, domain.New(codes.FailedPrecondition, reasonSessionClosed, fmt.Sprintf("session %q is closed; resume it first", id), grpcerr.Meta("session_id", id))
	case agentv1.SessionState_SESSION_STATE_SUSPENDED:
		return nil, domain.New(codes.FailedPrecondition, reasonSessionSuspended, fmt.Sprintf("session %q is suspended; resume it first", id), grpcerr.Meta("session_id", id))
	}
	return sess, nil
}

// register makes a built session the loaded one of its id, under the
// per-principal cap for a root session; UNAVAILABLE once the service is
// shutting down.
func (s *Service) register(sess *session) error {
	info := sess.info
	id := info.GetSessionId()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return domain.New(codes.Unavailable, reasonShuttingDown, "the agent service is shutting down", grpcerr.RetryAfter(time.Second))
	}
	if n := s.limits.MaxPerPrincipal; n > 0 && info.GetParentSessionId() == "" {
		open := 0
		for _, o := range s.sessions {
			if o.info.GetParentSessionId() == "" && o.info.GetPrincipal() == info.GetPrincipal() {
				open++
			}
		}
		if open >= n {
			return domain.New(codes.ResourceExhausted, reasonSessionLimit,
				fmt.Sprintf("%s already has %d open sessions, the most allowed; close one, or wait for idle ones to expire", principalName(info.GetPrincipal()), n),
				grpcerr.Meta("principal", info.GetPrincipal(), "limit", fmt.Sprint(n)))
		}
	}
	s.order++
	sess.order = s.order
	s.sessions[id] = sess
	if p := info.GetParentSessionId(); p != "" && !slices.Contains(s.tree[p], id) {
		s.tree[p] = append(s.tree[p], id)
	}
	return nil
}

func principalName(p string) string {
	if p == "" {
		return "the anonymous caller"
	}
	return p
}

// principalOf names the caller for the per-principal cap ("" without
// authentication).
func principalOf(ctx context.Context) string {
	if p, ok := auth.FromContext(ctx); ok {
		return p.String()
	}
	return ""
}

// reserveInTree takes a place among a session tree's open sessions for a
// subagent being built (its session registers only after its sandbox,
// settings and tools are ready): parallel spawns then cannot all pass the
// max_open_sessions check before any of them registers. false when the
// tree is full; release gives the place up once the subagent is
// registered or has failed.
func (s *Service) reserveInTree(root string, limit int) (release func(), ok bool) {
	s.spawnMu.Lock()
	defer s.spawnMu.Unlock()
	if s.openInTree(root)+s.treeReserved[root] >= limit {
		return nil, false
	}
	if s.treeReserved == nil {
		s.treeReserved = map[string]int{}
	}
	s.treeReserved[root]++
	var once sync.Once
	return func() {
		once.Do(func() {
			s.spawnMu.Lock()
			defer s.spawnMu.Unlock()
			if s.treeReserved[root]--; s.treeReserved[root] <= 0 {
				delete(s.treeReserved, root)
			}
		})
	}, true
}

// unload forgets a closed session: its record holds it from now on.
func (s *Service) unload(sess *session) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.sessions[sess.info.GetSessionId()] == sess {
		delete(s.sessions, sess.info.GetSessionId())
		sess.markUnloaded()
		defer s.forgetCheckpoints(sess.info.GetSessionId()) // after s.mu
	}
}

// markUnloaded closes sess.unloaded; the caller has just removed sess from
// s.sessions under s.mu, which happens once.
func (sess *session) markUnloaded() {
	if sess.unloaded != nil {
		close(sess.unloaded)
	}
}

// awaitUnload waits for a closed session that is still leaving memory
// (between its session_ended and its record) to be gone, so that a
// resume racing its close sees the record rather than a refusal. It
// reports false when sess is not closing or ctx ends first.
func (sess *session) awaitUnload(ctx context.Context) bool {
	if sess.unloaded == nil || sess.state() != agentv1.SessionState_SESSION_STATE_CLOSED {
		return false
	}
	select {
	case <-sess.unloaded:
		return true
	case <-ctx.Done():
		return false
	}
}

// beginPrompt marks the session running promptID from the checkpoint of
// turn (0: a new prompt); FAILED_PRECONDITION when a prompt already runs
// or the session is not open. A prompt that continues an unfinished one
// (after a restart, or --continue) is not counted again: counted false.
// gov is the token holder who governs its model calls (governance.go).
func (sess *session) beginPrompt(promptID string, turn int32, counted bool, gov *auth.Principal) (chan struct{}, error) {
	sess.mu.Lock()
	defer sess.mu.Unlock()
	id := sess.info.GetSessionId()
	if sess.running {
		return nil, domain.New(codes.FailedPrecondition, reasonPromptRunning,
			fmt.Sprintf("session %q is already running a prompt; queue it with FollowUp", id), grpcerr.Meta("session_id", id))
	}
	if sess.info.GetState() != agentv1.SessionState_SESSION_STATE_IDLE {
		return nil, domain.New(codes.FailedPrecondition, reasonSessionClosed, fmt.Sprintf("session %q is closed", id), grpcerr.Meta("session_id", id))
	}
	sess.running = true
	sess.promptID = promptID
	sess.checkpointTurn = turn
	sess.governor = gov
	sess.done = make(chan struct{})
	if counted {
		sess.info.PromptCount++
	}
	sess.info.ActivePromptId = promptID
	return sess.done, nil
}

// finishPrompt records the end of the running prompt.
func (sess *session) finishPrompt(report *agentv1.PromptReport) {
	sess.mu.Lock()
	sess.lastReport = report
	sess.running = false
	sess.promptID = ""
	sess.governor = nil
	sess.done = nil
	sess.info.ActivePromptId = ""
	sess.info.UpdateTime = timestamppb.Now()
	sess.mu.Unlock()
}

// markClosed moves an open session to CLOSED and returns the running
// prompt's done channel (nil when idle); false when it was closed already.
func (sess *session) markClosed() (chan struct{}, bool) {
	sess.mu.Lock()
	defer sess.mu.Unlock()
	if sess.info.GetState() == agentv1.SessionState_SESSION_STATE_CLOSED {
		return nil, false
	}
	sess.info.State = agentv1.SessionState_SESSION_STATE_CLOSED
	return sess.done, true
}

// idleSince reports when an idle session's last event was committed;
// false when it is not idle.
func (sess *session) idleSince() (time.Time, bool) {
	sess.mu.Lock()
	defer sess.mu.Unlock()
	if sess.running || sess.info.GetState() != agentv1.SessionState_SESSION_STATE_IDLE {
		return time.Time{}, false
	}
	return sess.info.GetUpdateTime().AsTime(), true
}

// closeRecord closes a session that is not loaded: its record says
// CLOSED from now on (a suspended session closed stays closed after a
// restart).
// The write names the revision it read; on a conflict (another writer
// got there first) it is done again from a fresh read, and after a few
// conflicts answered ABORTED, never written over the other's change.
func (s *Service) closeRecord(ctx context.Context, rec *agentv1.SessionRecord) error {
	id := rec.GetSession().GetSessionId()
	for range 4 {
		rec, rev, err := s.records.Get(ctx, id)
		if err != nil {
			return s.recordError(ctx, "session_id", id, err)
		}
		if rec.GetSession().GetState() == agentv1.SessionState_SESSION_STATE_CLOSED {
			return nil
		}
		rec.Session.State = agentv1.SessionState_SESSION_STATE_CLOSED
		rec.Session.ActivePromptId = ""
		rec.UnfinishedPromptId = ""
		rec.UnfinishedPromptTurn = 0
		rec.WriteTime = timestamppb.Now()
		_, err = s.records.Put(ctx, rec, rev)
		if err == nil {
			return nil
		}
		if !errors.Is(err, records.ErrConflict) {
			return s.recordError(ctx, "session_id", id, err)
		}
	}
	return domain.New(codes.Aborted, reasonRecordConflict, fmt.Sprintf("session %q: its record kept changing while it was closed; retry", id),
		grpcerr.Meta("session_id", id))
}

// childrenOf lists a session's direct children, oldest first: those this
// process saw, or, for a session it never loaded, those on record.
func (s *Service) childrenOf(ctx context.Context, id string) []string {
	s.mu.Lock()
	kids, known := s.tree[id]
	s.mu.Unlock()
	if known {
		return append([]string(nil), kids...)
	}
	var out []string
	_ = s.scanRecords(ctx, func(rec *agentv1.SessionRecord) bool {
		if rec.GetSession().GetParentSessionId() == id {
			out = append(out, rec.GetSession().GetSessionId())
		}
		return true
	})
	// Ids sort by creation time; the scan is newest first.
	slices.Reverse(out)
	return out
}

// scanRecords calls fn with every readable record, newest first, until it
// returns false.
func (s *Service) scanRecords(ctx context.Context, fn func(*agentv1.SessionRecord) bool) error {
	before := ""
	for {
		ids, err := s.records.List(ctx, before, 256)
		if err != nil {
			return err
		}
		for _, id := range ids {
			rec, _, err := s.records.Get(ctx, id)
			if err != nil {
				continue
			}
			if !fn(rec) {
				return nil
			}
		}
		if len(ids) < 256 {
			return nil
		}
		before = ids[len(ids)-1]
	}
}

// startReaper closes root sessions idle longer than the idle TTL.
func (s *Service) startReaper() {
	ttl := s.limits.IdleTTL
	if ttl <= 0 {
		return
	}
	every := min(max(ttl/4, 10*time.Millisecond), time.Minute)
	s.reaper.Add(1)
	go func() {
		defer s.reaper.Done()
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-s.stop:
				return
			case <-t.C:
				s.reapIdle(ttl)
			}
		}
	}()
}

// reapIdle closes each root session whose whole tree is idle and whose
// newest event is older than ttl.
func (s *Service) reapIdle(ttl time.Duration) {
	s.mu.Lock()
	roots := map[string]time.Time{} // root id -> newest activity in its tree
	busy := map[string]bool{}
	for _, sess := range s.sessions {
		root := sess.info.GetRootSessionId()
		at, idle := sess.idleSince()
		if !idle {
			busy[root] = true
			continue
		}
		if at.After(roots[root]) {
			roots[root] = at
		}
	}
	var expired []*session
	for id, at := range roots {
		if r := s.sessions[id]; r != nil && !busy[id] && time.Since(at) >= ttl {
			expired = append(expired, r)
		}
	}
	s.mu.Unlock()
	for _, r := range expired {
		ctx := context.Background()
		s.logger.Info("closing an idle session", "session_id", r.info.GetSessionId(), "idle_ttl", ttl)
		s.closeChildren(ctx, r.info.GetSessionId())
		r.end(ctx, agentv1.SessionEndReason_SESSION_END_REASON_IDLE_EXPIRED, nil)
	}
}
