package agent

import (
	"context"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/metric"

	agentv1 "github.com/fabro-sh/fabro-go/gen/fabro/agent/v1"
)

// startRetention runs expireClosed every so often while the service
// lives, when a retention is configured.
func (s *Service) startRetention() {
	keep := s.limits.ClosedRetention
	if keep <= 0 {
		return
	}
	expired, _ := otel.Meter("github.com/fabro-sh/fabro-go/services/agent").Int64Counter("fabro.agent.sessions.expired",
		metric.WithUnit("{session}"), metric.WithDescription("closed sessions whose events and record were purged by the retention"))
	every := min(max(keep/4, 10*time.Millisecond), 10*time.Minute)
	s.reaper.Add(1)
	go func() {
		defer s.reaper.Done()
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		go func() { <-s.stop; cancel() }()
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-s.stop:
				return
			case <-t.C:
				if n := s.expireClosed(ctx, time.Now(), keep); n > 0 && expired != nil {
					expired.Add(ctx, int64(n))
				}
			}
		}
	}()
}

// expireClosed purges every closed root session last updated keep or more
// before now, with its whole tree (children first, as DeleteSession), and
// returns how many sessions went. A session loaded here, or a tree with a
// session not closed, is kept; what fails is tried again next time.
func (s *Service) expireClosed(ctx context.Context, now time.Time, keep time.Duration) int {
	var roots []string
	_ = s.scanRecords(ctx, func(rec *agentv1.SessionRecord) bool {
		sess := rec.GetSession()
		if sess.GetParentSessionId() == "" && expired(sess, now, keep) {
			roots = append(roots, sess.GetSessionId())
		}
		return ctx.Err() == nil
	})
	n := 0
	for _, root := range roots {
		tree := []string{root}
		for i := 0; i < len(tree); i++ {
			tree = append(tree, s.childrenOf(ctx, tree[i])...)
		}
		unhold, ok := s.holdPurge(tree)
		if !ok {
			continue // being resumed: kept
		}
		// Read again under the hold: a session resumed (and closed again)
		// since the scan is no longer expired.
		if !s.treeClosed(ctx, tree) || !s.stillExpired(ctx, root, now, keep) {
			unhold()
			continue
		}
		n += s.purgeTree(ctx, tree)
		unhold()
	}
	if n > 0 {
		s.logger.InfoContext(ctx, "retention: closed sessions purged", "sessions", n, "retention", keep)
	}
	return n
}

// purgeTree purges a tree's events and records, children first, and
// returns how many sessions went.
func (s *Service) purgeTree(ctx context.Context, tree []string) int {
	n := 0
	for i := len(tree) - 1; i >= 0; i-- {
		id := tree[i]
		if err := s.bus.Purge(ctx, id); err != nil {
			s.logger.WarnContext(ctx, "retention: purge a closed session's events", "session_id", id, "error", err)
			break
		}
		if err := s.records.Delete(ctx, id); err != nil {
			s.logger.WarnContext(ctx, "retention: delete a closed session's record", "session_id", id, "error", err)
			break
		}
		s.forget(id)
		n++
	}
	return n
}

// holdPurge marks a tree as being purged, so that a ResumeSession of any
// of it is NOT_FOUND until unhold; false (nothing held) when one of it is
// loaded or a ResumeSession of it is under way. A resume and a purge of a
// session therefore never overlap: the purge cannot delete what a resume
// has read, nor a resume bring back what a purge deleted.
func (s *Service) holdPurge(tree []string) (unhold func(), ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, id := range tree {
		if s.sessions[id] != nil || s.opening[id] > 0 || s.purging[id] {
			return nil, false
		}
	}
	if s.purging == nil {
		s.purging = map[string]bool{}
	}
	for _, id := range tree {
		s.purging[id] = true
	}
	return func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		for _, id := range tree {
			delete(s.purging, id)
		}
	}, true
}

// holdOpen keeps the retention off a session while a ResumeSession of it
// runs; NOT_FOUND when the retention is purging it (it is as good as gone).
func (s *Service) holdOpen(id string) (release func(), err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.purging[id] {
		return nil, sessionNotFound("session_id", id)
	}
	if s.opening == nil {
		s.opening = map[string]int{}
	}
	s.opening[id]++
	return func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.opening[id]--; s.opening[id] <= 0 {
			delete(s.opening, id)
		}
	}, nil
}

// stillExpired reads the root's record again: expired as the scan found it.
func (s *Service) stillExpired(ctx context.Context, root string, now time.Time, keep time.Duration) bool {
	rec, _, err := s.records.Get(ctx, root)
	return err == nil && expired(rec.GetSession(), now, keep)
}

// expired: closed, and last updated keep or more before now.
func expired(sess *agentv1.Session, now time.Time, keep time.Duration) bool {
	if sess.GetState() != agentv1.SessionState_SESSION_STATE_CLOSED || sess.GetUpdateTime() == nil {
		return false
	}
	return !now.Before(sess.GetUpdateTime().AsTime().Add(keep))
}

// treeClosed: no session of the tree is loaded, and every record is of a
// closed session (a subagent still suspended keeps its tree).
func (s *Service) treeClosed(ctx context.Context, tree []string) bool {
	for _, id := range tree {
		if s.loadedSession(id) != nil {
			return false
		}
		rec, _, err := s.records.Get(ctx, id)
		if err != nil || rec.GetSession().GetState() != agentv1.SessionState_SESSION_STATE_CLOSED {
			return false
		}
	}
	return true
}
