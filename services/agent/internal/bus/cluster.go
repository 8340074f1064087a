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

// LastSequence is the sequence of the last event of the session the
// stream holds, 0 when none: where a replica taking the session over
// continues, whatever the record it reads says.
func (b *Bus) LastSequence(ctx context.Context, sessionID string) (uint64, error) {
	stream, err := b.js.Stream(ctx, StreamName)
	if err != nil {
		return 0, fmt.Errorf("bus: last sequence of %s: %w", sessionID, err)
	}
	m, err := stream.GetLastMsgForSubject(ctx, SessionFilter(sessionID))
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("bus: last sequence of %s: %w", sessionID, err)
	}
	id := m.Header.Get(HeaderEventMsgID) // a chunk names its event
	if id == "" {
		id = m.Header.Get(jetstream.MsgIDHeader)
	}
	n, ok := strings.CutPrefix(id, sessionID+":")
	seq, err := strconv.ParseUint(n, 10, 64)
	if !ok || err != nil {
		return 0, fmt.Errorf("bus: last sequence of %s: message id %q", sessionID, id)
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
