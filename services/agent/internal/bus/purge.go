package bus

import (
	"context"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"
)

// Purge removes every stored event of one session (its subjects), for
// DeleteSession.
func (b *Bus) Purge(ctx context.Context, sessionID string) error {
	stream, err := b.js.Stream(ctx, StreamName)
	if err != nil {
		return fmt.Errorf("bus: purge %s: %w", sessionID, err)
	}
	if err := stream.Purge(ctx, jetstream.WithPurgeSubject(SessionFilter(sessionID))); err != nil {
		return fmt.Errorf("bus: purge %s: %w", sessionID, err)
	}
	return nil
}

// StoredEvents counts the messages the stream holds for one session.
func (b *Bus) StoredEvents(ctx context.Context, sessionID string) (uint64, error) {
	stream, err := b.js.Stream(ctx, StreamName)
	if err != nil {
		return 0, fmt.Errorf("bus: %w", err)
	}
	info, err := stream.Info(ctx, jetstream.WithSubjectFilter(SessionFilter(sessionID)))
	if err != nil {
		return 0, fmt.Errorf("bus: %w", err)
	}
	var n uint64
	for _, c := range info.State.Subjects {
		n += c
	}
	return n, nil
}
