package bus

import (
	"context"
	"sync"

	agentv1 "github.com/fabro-sh/fabro-go/gen/fabro/agent/v1"
)

// Queue is an unbounded queue of events with one reader, so a slow reader
// never blocks the writer (a session). Its zero value is ready to use.
type Queue struct {
	mu     sync.Mutex
	items  []*agentv1.AgentEvent
	err    error
	notify chan struct{} // made on first use; holds at most one wake-up
}

// Push appends ev and wakes the reader.
func (q *Queue) Push(ev *agentv1.AgentEvent) {
	q.mu.Lock()
	q.items = append(q.items, ev)
	ch := q.wakeup()
	q.mu.Unlock()
	signal(ch)
}

// Fail ends the queue with err once the queued events are read.
func (q *Queue) Fail(err error) {
	q.mu.Lock()
	q.err = err
	ch := q.wakeup()
	q.mu.Unlock()
	signal(ch)
}

// Next returns the next event, waiting for it; the queue's failure once the
// queued events are read.
func (q *Queue) Next(ctx context.Context) (*agentv1.AgentEvent, error) {
	for {
		q.mu.Lock()
		if len(q.items) > 0 {
			ev := q.items[0]
			q.items[0] = nil
			q.items = q.items[1:]
			q.mu.Unlock()
			return ev, nil
		}
		err, ch := q.err, q.wakeup()
		q.mu.Unlock()
		if err != nil {
			return nil, err
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// wakeup returns the wake-up channel; q.mu must be held.
func (q *Queue) wakeup() chan struct{} {
	if q.notify == nil {
		q.notify = make(chan struct{}, 1)
	}
	return q.notify
}

func signal(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}
