package bus

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"

	agentv1 "github.com/fabro-sh/fabro-go/gen/fabro/agent/v1"
)

// errNotSent marks an event held back during an outage.
var errNotSent = errors.New("not sent: NATS unreachable")

// retryState is the part of a Log that rides out NATS outages: the
// unacknowledged events stay in the log's queue, in order; after a failed
// or timed-out ack the forwarder publishes the whole queue again, in
// order, with the same message ids, and JetStream drops what it already
// has. It is guarded by the Log's mutex.
type retryState struct {
	cfg      WriterConfig
	lim      limits // nil for a Publisher without them
	logger   *slog.Logger
	bytes    int       // encoded size of the queued events
	since    time.Time // start of the current outage; zero when none
	attempts int
}

func (r *retryState) init(pub Publisher) {
	r.cfg = WriterConfig{}.withDefaults()
	r.logger = slog.New(slog.DiscardHandler)
	if lim, ok := pub.(limits); ok {
		r.lim, r.cfg = lim, lim.writerLimits()
		if lg := lim.log(); lg != nil {
			r.logger = lg
		}
	}
}

func (r *retryState) epoch() uint64 {
	if r.lim == nil {
		return 0
	}
	return r.lim.epoch()
}

func (r *retryState) connected() bool { return r.lim == nil || r.lim.connected() }

// acked records the head of the queue leaving it.
func (r *retryState) acked(size int, ok bool) {
	r.bytes -= size
	if ok {
		r.since, r.attempts = time.Time{}, 0
	}
}

// awaitRoomLocked is the backpressure: it waits while the queue is at its
// bound (the session pauses), and returns ev's encoded size.
func (l *Log) awaitRoomLocked(ev *agentv1.AgentEvent) int {
	size := proto.Size(ev)
	for l.err == nil && !l.closed && len(l.queue) > 0 &&
		(len(l.queue) >= l.retry.cfg.BufferEvents || l.retry.bytes+size > l.retry.cfg.BufferBytes) {
		ch := l.changed
		l.mu.Unlock()
		<-ch
		l.mu.Lock()
	}
	return size
}

func (l *Log) wakeLocked() {
	close(l.changed)
	l.changed = make(chan struct{})
}

// publishLocked sends ev unless earlier events await a republish (they
// must be stored first); a nil future means the forwarder sends it.
func (l *Log) publishLocked(ev *agentv1.AgentEvent) (jetstream.PubAckFuture, error) {
	if n := len(l.queue); n > 0 && (l.queue[n-1].f == nil || l.queue[0].epoch != l.retry.epoch()) {
		return nil, nil
	}
	f, err := l.pub.Publish(l.traceContext(), ev, l.incarnation)
	if err != nil {
		if errors.Is(err, ErrMarshal) {
			return nil, err
		}
		return nil, nil
	}
	return f, nil
}

// recoverLocked handles the failed ack of the queue's head: it waits for
// the connection and publishes the queue again, in order, or ends the log
// with ErrNATSUnavailable once the outage is longer than the limit. It
// returns false for a failure that is not NATS's (never retried). It
// unlocks l.mu while it waits.
func (l *Log) recoverLocked(cause error) bool {
	if errors.Is(cause, ErrMarshal) {
		return false
	}
	r := &l.retry
	now := time.Now()
	if r.since.IsZero() {
		r.since = now
		r.logger.Warn("session events not acknowledged by NATS; holding them and retrying",
			"session_id", l.sessionID, "sequence", l.queue[0].ev.GetSequence(), "queued", len(l.queue), "error", cause)
	}
	if out := now.Sub(r.since); out > r.cfg.OutageLimit {
		err := fmt.Errorf("%w: no event acknowledged for %s (limit %s); event %d not stored: %w",
			ErrNATSUnavailable, out.Round(time.Second), r.cfg.OutageLimit, l.queue[0].ev.GetSequence(), cause)
		r.logger.Error("session ends: NATS unavailable too long", "session_id", l.sessionID, "error", err)
		l.failLocked(err)
		return true
	}
	for i := range l.queue {
		l.queue[i].f = nil // held: Emit queues behind them
	}
	r.attempts++
	wait := min(100*time.Millisecond<<min(r.attempts, 5), 2*time.Second)
	deadline := r.since.Add(r.cfg.OutageLimit)
	l.mu.Unlock()
	time.Sleep(wait)
	for !r.connected() && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
	}
	l.mu.Lock()
	if l.err != nil {
		return true
	}
	ep := r.epoch()
	for i := range l.queue {
		f, err := l.pub.Publish(l.traceContext(), l.queue[i].ev, l.incarnation)
		if err != nil {
			break // the rest stay held for the next round
		}
		l.queue[i].f, l.queue[i].epoch = f, ep
	}
	return true
}
