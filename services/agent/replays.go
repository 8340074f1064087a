package agent

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/fabro-sh/fabro-go/platform/grpcerr"
)

// replayLimiter caps the replays of the events stream each principal runs
// at once: a replay holds a JetStream consumer while it reads, and the
// stream's consumers are shared by every session, so one caller's storm
// of reattaching clients must not take them all.
type replayLimiter struct {
	limit int // <= 0: no cap

	mu   sync.Mutex
	open map[string]int // principal -> replays running
}

func newReplayLimiter(limit int) *replayLimiter {
	if limit == 0 {
		limit = DefaultMaxReplaysPerPrincipal
	}
	return &replayLimiter{limit: limit, open: map[string]int{}}
}

// acquire takes a replay place for the caller of ctx; RESOURCE_EXHAUSTED
// REPLAY_LIMIT when it has them all. release gives it back.
func (l *replayLimiter) acquire(ctx context.Context) (release func(), err error) {
	if l.limit <= 0 {
		return func() {}, nil
	}
	p := principalOf(ctx)
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.open[p] >= l.limit {
		return nil, domain.New(codes.ResourceExhausted, reasonReplayLimit,
			fmt.Sprintf("%s already runs %d event replays, the most allowed at once; retry when one ends", principalName(p), l.limit),
			grpcerr.Meta("principal", p, "limit", strconv.Itoa(l.limit)), grpcerr.RetryAfter(time.Second))
	}
	l.open[p]++
	var once sync.Once
	return func() {
		once.Do(func() {
			l.mu.Lock()
			defer l.mu.Unlock()
			if l.open[p]--; l.open[p] <= 0 {
				delete(l.open, p)
			}
		})
	}, nil
}
