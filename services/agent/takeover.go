package agent

import (
	"context"
	"errors"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	agentv1 "github.com/fabro-sh/fabro-go/gen/fabro/agent/v1"
	"github.com/fabro-sh/fabro-go/platform/grpcerr"
	"github.com/fabro-sh/fabro-go/services/agent/internal/cluster"
	"github.com/fabro-sh/fabro-go/services/agent/internal/records"
)

// A session whose owner is gone must find a new one, whatever failed
// first. Two paths lead there: the lease watcher (WatchFree) hears of
// each expiry once, at once; the sweep, every sweepEvery, finds what the
// watcher's takeovers could not finish (every replica's failed, or the
// expiry came while this replica was cut off) by listing the records
// with an unfinished prompt and no lease. A takeover retries what a retry
// can cure for takeoverPersistence, then leaves the session to the next
// sweep. So a session is taken over within the lease TTL plus, at
// worst, takeoverPersistence and one sweep interval.

// takeoverPersistence is how long one takeover retries a failure a retry
// can cure (the records bucket or the stream unreachable, a dependency
// restarting) before it leaves the session to the sweep.
const takeoverPersistence = 30 * time.Second

// sweepInterval is how often a replica sweeps for ownerless prompts: a
// few lease TTLs, at least every 5 s and at most every 30 s.
func sweepInterval(ttl time.Duration) time.Duration {
	return min(max(5*ttl, 5*time.Second), 30*time.Second)
}

// watch takes over the sessions whose lease ends (expired: their owner
// died or was cut off) when their record says a prompt was running; an
// idle one is resumed by whoever calls it next.
func (r *replica) watch(ctx context.Context, free <-chan string) {
	defer close(r.done)
	for id := range free {
		r.spawnTakeOver(ctx, id)
	}
}

// spawnTakeOver starts a takeover of the session unless one runs here
// already (the watcher and the sweep may both find it).
func (r *replica) spawnTakeOver(ctx context.Context, id string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.inflight[id] || ctx.Err() != nil {
		return
	}
	r.inflight[id] = true
	r.workers.Go(func() {
		defer func() {
			r.mu.Lock()
			delete(r.inflight, id)
			r.mu.Unlock()
		}()
		r.takeOver(ctx, id)
	})
}

// takeOver resumes a freed session that was running a prompt, and
// continues the prompt, as a restart does (restart.go). Every replica
// tries; the lease makes one the winner, and the others see
// FAILED_PRECONDITION. A failure a retry can cure is retried, with
// backoff, for takeoverPersistence.
func (r *replica) takeOver(ctx context.Context, id string) {
	s := r.svc
	start := time.Now()
	for wait := 100 * time.Millisecond; ; wait = min(2*wait, 2*time.Second) {
		if s.isLoaded(id) {
			return
		}
		err := s.continueUnfinished(ctx, id)
		if err == nil {
			r.logger.InfoContext(ctx, "took over a running session", "session_id", id, "after", time.Since(start).Round(time.Millisecond))
			return
		}
		if settled(err) {
			return
		}
		if time.Since(start) >= takeoverPersistence || !sleepCtx(ctx, wait) {
			if ctx.Err() == nil {
				r.logger.WarnContext(ctx, "take over a session; the next sweep tries again", "session_id", id, "error", err,
					"after", time.Since(start).Round(time.Millisecond))
			}
			return
		}
		r.logger.DebugContext(ctx, "take over a session; retrying", "session_id", id, "error", err)
	}
}

// settled reports a takeover's failure that no retry changes: nothing to
// continue, no such session, another replica won (or this one serves
// it), or a refusal of the request itself.
func settled(err error) bool {
	switch {
	case errors.Is(err, errNoUnfinished), errors.Is(err, records.ErrNotFound), errors.Is(err, records.ErrCorrupt):
		return true
	}
	switch grpcerr.ReasonOf(err) {
	case reasonSessionOwned, reasonSessionLoaded:
		return true
	}
	st, ok := status.FromError(err)
	if !ok {
		return false // the store's or the stream's own error: retry
	}
	switch st.Code() {
	case codes.NotFound, codes.InvalidArgument, codes.PermissionDenied, codes.FailedPrecondition, codes.Unimplemented:
		return true
	}
	return false
}

// sweep looks, every sweepEvery until ctx ends, for sessions with an
// unfinished prompt and no lease, and takes them over.
func (r *replica) sweep(ctx context.Context) {
	t := time.NewTicker(r.sweepEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		for _, id := range r.ownerless(ctx) {
			r.spawnTakeOver(ctx, id)
		}
	}
}

// ownerless lists the sessions on record with an unfinished prompt that
// no replica holds a lease on (nor serves here): a root's prompt is
// continued, a subagent's ended (endUnfinished).
func (r *replica) ownerless(ctx context.Context) []string {
	var ids []string
	err := r.svc.scanRecords(ctx, func(rec *agentv1.SessionRecord) bool {
		id := rec.GetSession().GetSessionId()
		if rec.GetUnfinishedPromptId() == "" || rec.GetSession().GetState() == agentv1.SessionState_SESSION_STATE_CLOSED || r.svc.isLoaded(id) {
			return true
		}
		if _, err := r.leaseOf(ctx, id); errors.Is(err, cluster.ErrNotFound) {
			ids = append(ids, id)
		}
		return ctx.Err() == nil
	})
	if err != nil && ctx.Err() == nil {
		r.logger.WarnContext(ctx, "sweep for sessions without an owner", "error", err)
	}
	return ids
}
