// Package records keeps the agent's durable SessionRecords behind a small
// interface: one implementation per place a deployment keeps them (files
// under the data directory here; a JetStream key-value bucket for a
// cluster). The agent reads a record when a session is touched, never all
// of them at start.
package records

import (
	"context"
	"errors"
	"fmt"

	"google.golang.org/protobuf/proto"

	agentv1 "github.com/fabro-sh/fabro-go/gen/fabro/agent/v1"
)

// FormatVersion is the SessionRecord layout this service writes; a record
// of a newer one is refused as corrupt.
const FormatVersion = 1

// Revision identifies one stored version of a record. Zero means "no
// record": Put with expected 0 creates a record that must not exist yet.
type Revision uint64

// Any is the expected revision of a Put that overwrites whatever is stored.
const Any Revision = ^Revision(0)

var (
	// ErrNotFound: no record of that session id.
	ErrNotFound = errors.New("records: no record of that session")
	// ErrConflict: Put's expected revision is not the stored one (another
	// writer got there first).
	ErrConflict = errors.New("records: the record changed since it was read")
	// ErrCorrupt: the stored bytes are not a record of a known version.
	ErrCorrupt = errors.New("records: corrupt session record")
)

// Store keeps SessionRecords keyed by session id. Implementations are safe
// for concurrent use.
type Store interface {
	// Get returns the record of a session and its revision; an error
	// wrapping ErrNotFound or ErrCorrupt when there is no usable one.
	Get(ctx context.Context, sessionID string) (*agentv1.SessionRecord, Revision, error)
	// Put stores rec under rec.Session.SessionId when the stored revision is
	// expected (0: none may exist; Any: no check), and returns the new
	// revision; an error wrapping ErrConflict otherwise.
	Put(ctx context.Context, rec *agentv1.SessionRecord, expected Revision) (Revision, error)
	// Delete removes a session's record; removing a missing one succeeds.
	Delete(ctx context.Context, sessionID string) error
	// List returns at most limit session ids in descending order, each less
	// than before ("" starts at the greatest). Session ids begin with their
	// creation time, so this is newest first. Fewer than limit ids means
	// there are no more.
	List(ctx context.Context, before string, limit int) ([]string, error)
}

// Encode is a record's stored form (binary protobuf).
func Encode(rec *agentv1.SessionRecord) ([]byte, error) {
	return proto.Marshal(rec)
}

// Decode reads a record's stored form; the error wraps ErrCorrupt.
func Decode(b []byte) (*agentv1.SessionRecord, error) {
	rec := &agentv1.SessionRecord{}
	if err := proto.Unmarshal(b, rec); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrCorrupt, err)
	}
	if v := rec.GetFormatVersion(); v < 1 || v > FormatVersion {
		return nil, fmt.Errorf("%w: format version %d", ErrCorrupt, v)
	}
	if rec.GetSession().GetSessionId() == "" {
		return nil, fmt.Errorf("%w: no session id", ErrCorrupt)
	}
	return rec, nil
}
