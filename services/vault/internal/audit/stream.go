package audit

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// Names of the audit stream of the JetStream mode.
const (
	StreamName = "FABRO_VAULT_AUDIT"
	Subject    = "fabro.vault.v1.audit"
)

// Recorder is where audit entries go: the append-only file, or the
// JetStream stream every replica of the vault appends to.
type Recorder interface {
	Record(Entry) error
	Close() error
}

var (
	_ Recorder = (*Log)(nil)
	_ Recorder = (*Stream)(nil)
)

// Stream appends entries to the audit stream, one message each, and
// waits for the server's acknowledgement, so an entry recorded is stored.
type Stream struct {
	js  jetstream.JetStream
	now func() time.Time
}

// OpenStream creates (or updates) the audit stream, kept by replicas
// servers. Entries are never removed by the vault: retention is the
// operator's (limits set on the stream).
func OpenStream(ctx context.Context, js jetstream.JetStream, replicas int) (*Stream, error) {
	_, err := js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{
		Name: StreamName, Description: "fabro vault audit log", Subjects: []string{Subject},
		Replicas: max(replicas, 1), Storage: jetstream.FileStorage,
		DenyDelete: true, DenyPurge: true,
	})
	if err != nil {
		return nil, fmt.Errorf("open audit stream %s: %w", StreamName, err)
	}
	return &Stream{js: js, now: time.Now}, nil
}

// Record implements Recorder.
func (s *Stream) Record(e Entry) error {
	e.Time = s.now().UTC()
	b, err := json.Marshal(e)
	if err != nil {
		return fmt.Errorf("encode audit entry: %w", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := s.js.Publish(ctx, Subject, b); err != nil {
		return fmt.Errorf("write audit stream: %w", err)
	}
	return nil
}

// Close implements Recorder; the connection is its owner's.
func (s *Stream) Close() error { return nil }
