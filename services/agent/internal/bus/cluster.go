package bus

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// ErrFenced ends the log of a session whose ownership passed to another
// agent replica: its unacknowledged events are dropped, never republished,
// so they cannot collide with the new owner's events of the same sequence.
var ErrFenced = errors.New("session owned by another replica")

// Fence ends the log with err (wrapping ErrFenced): it publishes nothing
// more, not even the events it holds for a republish.
func (l *Log) Fence(err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.failLocked(fmt.Errorf("%w: %w", ErrFenced, err))
}

// LastSequence is the greatest sequence of the session's events in the
// stream, 0 when none: where a replica taking the session over continues,
// whatever the record it reads says. It is not always the stream's last
// message of the session: after a cluster's leader failover, events held
// through it are republished after later ones that were stored. Those
// land within an outage limit (plus acks) of each other, so the session's
// messages of that span before its last one are read.
func (b *Bus) LastSequence(ctx context.Context, sessionID string) (uint64, error) {
	var (
		last, lastMsg uint64 // the greatest event sequence; the stream sequence of the last message
		from          time.Time
	)
	err := Retry(ctx, func(ctx context.Context) error {
		stream, err := b.js.Stream(ctx, StreamName)
		if err != nil {
			return err
		}
		m, err := stream.GetLastMsgForSubject(ctx, SessionFilter(sessionID))
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			return nil
		}
		if err != nil {
			return err
		}
		if last, err = msgSequence(sessionID, m.Header); err != nil {
			return err
		}
		lastMsg, from = m.Sequence, m.Time.Add(-b.wcfg.OutageLimit-2*b.wcfg.AckTimeout)
		return nil
	})
	if err == nil && lastMsg > 0 {
		cons := &replayConsumer{js: b.js, filters: []string{SessionFilter(sessionID)}, startTime: &from}
		for cons.last < lastMsg {
			msg, rerr := cons.next(ctx)
			if rerr != nil {
				err = rerr
				break
			}
			seq, rerr := msgSequence(sessionID, msg.Headers())
			if rerr != nil {
				err = rerr
				break
			}
			last = max(last, seq)
		}
	}
	if err != nil {
		return 0, fmt.Errorf("bus: last sequence of %s: %w", sessionID, err)
	}
	return last, nil
}

// msgSequence is the event sequence a message's id names.
func msgSequence(sessionID string, h nats.Header) (uint64, error) {
	id := h.Get(HeaderEventMsgID) // a chunk names its event
	if id == "" {
		id = h.Get(jetstream.MsgIDHeader)
	}
	n, ok := strings.CutPrefix(id, sessionID+":")
	n, _, _ = strings.Cut(n, "@") // a deduplication id names its incarnation
	n, _, _ = strings.Cut(n, "#") // and its chunk
	seq, err := strconv.ParseUint(n, 10, 64)
	if !ok || err != nil {
		return 0, fmt.Errorf("message id %q", id)
	}
	return seq, nil
}

// next is cons.Next that rides out "no responders": on a NATS cluster a
// consumer's pull request can reach a node before the route carries the
// consumer's interest (the ordered consumer recreates its consumer at
// will), and the consumer keeps its position for the next request.
func next(ctx context.Context, cons jetstream.Consumer) (jetstream.Msg, error) {
	for wait := 10 * time.Millisecond; ; wait = min(2*wait, 500*time.Millisecond) {
		msg, err := cons.Next(jetstream.FetchContext(ctx))
		if !errors.Is(err, nats.ErrNoResponders) {
			return msg, err
		}
		select {
		case <-ctx.Done():
			return nil, err
		case <-time.After(wait):
		}
	}
}

// JetStreamStartupWait bounds how long AwaitJetStream retries.
const JetStreamStartupWait = 90 * time.Second

// AwaitJetStream runs setup (creating a stream or bucket) and, when wait
// is set (an external NATS, which may be starting with this process: a
// cluster's first meta leader election takes seconds), again on failure
// until it succeeds or JetStreamStartupWait passes.
func AwaitJetStream(ctx context.Context, wait bool, setup func() error) error {
	deadline := time.Now().Add(JetStreamStartupWait)
	for delay := 250 * time.Millisecond; ; delay = min(2*delay, 2*time.Second) {
		err := setup()
		if err == nil || !wait || time.Now().After(deadline) || ctx.Err() != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(delay):
		}
	}
}

// replayStall is how long a replay waits for a message it knows is
// stored before it recreates its consumer.
var replayStall = 5 * time.Second

// replayConsumer reads stored messages of some subjects in order. When a
// message is late (on a cluster the node serving its consumer may have
// died, and a pull request then waits for nothing) it recreates the
// ordered consumer just after the last message it read.
type replayConsumer struct {
	js        jetstream.JetStream
	filters   []string
	cons      jetstream.Consumer
	last      uint64     // stream sequence of the last message read
	startTime *time.Time // where a consumer starts before the first message (nil: the start)
	restarts  int
}

func (r *replayConsumer) next(ctx context.Context) (jetstream.Msg, error) {
	for {
		if r.cons == nil {
			cfg := jetstream.OrderedConsumerConfig{FilterSubjects: r.filters, DeliverPolicy: jetstream.DeliverAllPolicy}
			switch {
			case r.last > 0:
				cfg.DeliverPolicy, cfg.OptStartSeq = jetstream.DeliverByStartSequencePolicy, r.last+1
			case r.startTime != nil:
				cfg.DeliverPolicy, cfg.OptStartTime = jetstream.DeliverByStartTimePolicy, r.startTime
			}
			var cons jetstream.Consumer
			err := Retry(ctx, func(ctx context.Context) (err error) {
				cons, err = r.js.OrderedConsumer(ctx, StreamName, cfg)
				return err
			})
			if err != nil {
				return nil, err
			}
			r.cons = cons
		}
		sctx, cancel := context.WithTimeout(ctx, replayStall)
		msg, err := next(sctx, r.cons)
		cancel()
		if err == nil {
			if md, err := msg.Metadata(); err == nil {
				r.last = md.Sequence.Stream
			}
			return msg, nil
		}
		if ctx.Err() != nil || r.restarts >= 10 {
			return nil, err
		}
		r.restarts++
		r.cons = nil
	}
}

// RequestTimeout bounds one JetStream API request of Retry.
var RequestTimeout = 2 * time.Second

// Retry runs a JetStream API request with a short timeout each, again
// while it times out or finds no responder and ctx lasts. On a cluster a
// request sent while a stream or the meta group elects a leader (a node
// died) gets no answer at all; waiting for the caller's whole deadline
// would stall every read for nothing.
func Retry(ctx context.Context, req func(ctx context.Context) error) error {
	for wait := 50 * time.Millisecond; ; wait = min(2*wait, time.Second) {
		rctx, cancel := context.WithTimeout(ctx, RequestTimeout)
		err := req(rctx)
		cancel()
		if err == nil || ctx.Err() != nil || !(errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout) || errors.Is(err, nats.ErrNoResponders)) {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(wait):
		}
	}
}
