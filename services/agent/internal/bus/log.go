package bus

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/types/known/timestamppb"

	agentv1 "github.com/fabro-sh/fabro-go/gen/fabro/agent/v1"
)

// Publisher stores events durably; *Bus is one. incarnation names the
// writer (Log.SetIncarnation) in the message's deduplication id.
type Publisher interface {
	Publish(ctx context.Context, ev *agentv1.AgentEvent, incarnation string) (jetstream.PubAckFuture, error)
}

// ErrLogClosed is returned by Emit after Close.
var ErrLogClosed = errors.New("event log closed")

// Log is one session's event stream: the single writer that stamps the
// envelope and the gap-free sequence, publishes in sequence order, and
// hands each event to live subscribers once JetStream has acknowledged it.
// An idle log holds no goroutine.
type Log struct {
	pub                         Publisher
	sessionID, parentID, rootID string
	now                         func() time.Time

	mu        sync.Mutex
	seq       uint64 // last stamped
	queue     []pending
	running   bool // a forwarder goroutine is draining queue
	err       error
	closed    bool
	committed uint64
	subs      map[*Sub]struct{}
	changed   chan struct{} // closed and replaced when committed moves or err is set
	onCommit  func(*agentv1.AgentEvent)
	onFail    func(error)
	traceCtx  context.Context // whose trace context the messages carry
	// incarnation names this writer of the session among every writer it
	// ever had (each load of the session, on any process): part of each
	// message's Nats-Msg-Id, so that JetStream's deduplication, which
	// spans processes, never drops an event as a copy of one another
	// incarnation stored under the same sequence.
	incarnation string

	retry retryState // recovery from NATS outages (retry.go)
}

// SetTraceContext makes the events emitted from now on carry ctx's trace
// context (the running prompt's), until ClearTraceContext.
func (l *Log) SetTraceContext(ctx context.Context) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.traceCtx = ctx
}

// ClearTraceContext ends SetTraceContext: the events emitted from now on
// carry no trace context.
func (l *Log) ClearTraceContext() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.traceCtx = nil
}

// traceContext is the context whose trace the next messages carry; the
// caller holds l.mu.
func (l *Log) traceContext() context.Context {
	if l.traceCtx == nil {
		return context.Background()
	}
	return l.traceCtx
}

// SetIncarnation names this writer in the messages' deduplication ids
// (Bus.Publish); set it before the first Emit.
func (l *Log) SetIncarnation(inc string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.incarnation = inc
}

// Observe sets functions called, under the log's lock and in sequence
// order, with every acknowledged event and with the log's failure. They
// must not block or call back into the log. Set them before the first
// Emit.
func (l *Log) Observe(commit func(*agentv1.AgentEvent), fail func(error)) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.onCommit, l.onFail = commit, fail
}

type pending struct {
	ev    *agentv1.AgentEvent
	f     jetstream.PubAckFuture // nil: not sent yet (an outage)
	size  int
	epoch uint64    // the connection's reconnect count when sent
	at    time.Time // when first published, for the publish latency
}

// NewLog starts a session's log after sequence last (0 for a new session).
func NewLog(pub Publisher, sessionID, parentID, rootID string, last uint64, now func() time.Time) *Log {
	if now == nil {
		now = time.Now
	}
	l := &Log{
		pub: pub, sessionID: sessionID, parentID: parentID, rootID: rootID, now: now,
		seq: last, committed: last, changed: make(chan struct{}),
	}
	l.retry.init(pub)
	return l
}

// Emit stamps ev (session ids, next sequence, time) and publishes it. It
// returns the sequence given, or the log's failure.
func (l *Log) Emit(ev *agentv1.AgentEvent) (uint64, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	size := l.awaitRoomLocked(ev)
	if l.err != nil {
		return 0, l.err
	}
	if l.closed {
		return 0, ErrLogClosed
	}
	l.seq++
	ev.SessionId, ev.ParentSessionId, ev.RootSessionId = l.sessionID, l.parentID, l.rootID
	ev.Sequence = l.seq
	ev.Time = timestamppb.New(l.now())
	f, err := l.publishLocked(ev)
	if err != nil {
		l.failLocked(err)
		return 0, l.err
	}
	l.queue = append(l.queue, pending{ev: ev, f: f, size: size, epoch: l.retry.epoch(), at: time.Now()})
	l.retry.bytes += size
	if !l.running {
		l.running = true
		go l.forward()
	}
	return ev.Sequence, nil
}

// forward awaits acks in order and delivers acknowledged events.
func (l *Log) forward() {
	for {
		l.mu.Lock()
		if len(l.queue) == 0 || l.err != nil {
			l.queue = nil
			l.running = false
			l.mu.Unlock()
			return
		}
		p := l.queue[0]
		l.mu.Unlock()

		err := errNotSent
		if p.f != nil {
			select {
			case <-p.f.Ok():
				err = nil
			case err = <-p.f.Err():
			}
		}

		l.mu.Lock()
		if err != nil && l.recoverLocked(err) {
			l.mu.Unlock()
			continue
		}
		l.retry.acked(p.size, err == nil)
		l.queue[0] = pending{}
		l.queue = l.queue[1:]
		if err != nil {
			l.failLocked(fmt.Errorf("event %d not stored: %w", p.ev.GetSequence(), err))
			l.mu.Unlock()
			continue
		}
		recordPublish(p.at)
		l.committed = p.ev.GetSequence()
		for s := range l.subs {
			s.Push(p.ev)
		}
		if l.onCommit != nil {
			l.onCommit(p.ev)
		}
		close(l.changed)
		l.changed = make(chan struct{})
		l.mu.Unlock()
	}
}

func (l *Log) failLocked(err error) {
	if l.err != nil {
		return
	}
	l.err = fmt.Errorf("%w: %w", ErrEventStream, err)
	for s := range l.subs {
		s.Fail(l.err)
	}
	if l.onFail != nil {
		l.onFail(l.err)
	}
	close(l.changed)
	l.changed = make(chan struct{})
}

// ErrEventStream wraps every failure of the durable log.
var ErrEventStream = errors.New("durable event log failed")

// Err is the log's failure, if any.
func (l *Log) Err() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.err
}

// Committed is the sequence of the last acknowledged event.
func (l *Log) Committed() uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.committed
}

// Last is the sequence of the last emitted event.
func (l *Log) Last() uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.seq
}

// Flush waits until every event emitted so far is acknowledged.
func (l *Log) Flush(ctx context.Context) error {
	for {
		l.mu.Lock()
		done, err, ch := l.committed >= l.seq, l.err, l.changed
		l.mu.Unlock()
		if err != nil {
			return err
		}
		if done {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// Close refuses further events; subscribers see the events already
// emitted, then io.EOF-like ErrLogClosed.
func (l *Log) Close() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.closed = true
	l.wakeLocked() // an Emit waiting for room returns ErrLogClosed
}

// Subscribe returns a subscriber that receives every event acknowledged
// from now on, and the sequence of the last event acknowledged before it.
func (l *Log) Subscribe() (*Sub, uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := &Sub{log: l}
	if l.err != nil {
		s.Fail(l.err)
	}
	if l.subs == nil {
		l.subs = map[*Sub]struct{}{}
	}
	l.subs[s] = struct{}{}
	return s, l.committed
}

// Sub is a live subscription with an unbounded queue, so a slow reader
// never blocks the session. Next reads it.
type Sub struct {
	Queue
	log *Log
}

// Close ends the subscription.
func (s *Sub) Close() {
	s.log.mu.Lock()
	delete(s.log.subs, s)
	s.log.mu.Unlock()
}
