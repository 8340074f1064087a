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
