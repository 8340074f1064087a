// Package cluster keeps the agent's session state in NATS JetStream, so
// that any replica can serve any session: session records and the shared
// task lists of session trees in key-value buckets (compare-and-set on the
// revision), and the ownership of each session under a lease that its
// owner renews. JetStream's own replication (R1 or R3) is the only one.
package cluster

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/fabro-sh/fabro-go/services/agent/internal/bus"
	"github.com/fabro-sh/fabro-go/services/agent/internal/records"
)

// Names of the buckets.
const (
	RecordsBucket = "FABRO_AGENT_SESSIONS"
	LargeBucket   = "FABRO_AGENT_SESSIONS_LARGE" // object store of records too big for one message
	LeasesBucket  = "FABRO_AGENT_LEASES"
	TasksBucket   = "FABRO_AGENT_TASKS"
)

// DefaultLeaseTTL is how long a lease outlives its owner's last renewal;
// the owner renews it every third of that.
const DefaultLeaseTTL = 3 * time.Second

// Errors of the stores: those of records.Store, for every bucket.
var (
	// ErrNotFound is a key with no value (never written, or deleted).
	ErrNotFound = records.ErrNotFound
	// ErrConflict is a compare-and-set that lost: the stored revision is
	// not the one the caller read.
	ErrConflict = records.ErrConflict
)

// Config says how the buckets are kept.
type Config struct {
	// Replicas is how many servers of a NATS cluster keep each bucket (1
	// when zero).
	Replicas int
	// LeaseTTL is the leases' lifetime without renewal (DefaultLeaseTTL
	// when zero).
	LeaseTTL time.Duration
	// LeaseRenewal is how often an owner renews its leases (a third of
	// the TTL when zero). An owner counts a lease its own until TTL less
	// one renewal after its last write, so at least two renewals must fit
	// in that: it is at most a third of the TTL ([Config.Validate]).
	LeaseRenewal time.Duration
	// LeaseJetStream, when set, carries the lease renewals, apart from the
	// events and records (a connection of its own: a replica busy
	// publishing does not delay its renewals past the TTL and fence its
	// own sessions).
	LeaseJetStream jetstream.JetStream
	// AwaitStartup retries the buckets' creation while the NATS servers
	// start (bus.AwaitJetStream): an external NATS.
	AwaitStartup bool
	// MaxValue is the largest record kept inline in the records bucket;
	// a bigger one goes to the object store (default: the server's max
	// payload less room for headers).
	MaxValue int
}

// MinLeaseTTL is the shortest lease TTL: the server's age limit and the
// renewal round trips need some room.
const MinLeaseTTL = 300 * time.Millisecond

// Validate checks the lease timing: TTL and renewal go together.
func (c Config) Validate() error {
	ttl, renew := c.leaseTiming()
	if ttl < MinLeaseTTL {
		return fmt.Errorf("cluster: lease TTL %s is under the minimum %s", ttl, MinLeaseTTL)
	}
	if renew <= 0 || renew > ttl/3 {
		return fmt.Errorf("cluster: lease renewal every %s does not fit the TTL %s: renew at most every third of it (%s)", renew, ttl, ttl/3)
	}
	return nil
}

// leaseTiming is the TTL and the renewal interval, defaults applied.
func (c Config) leaseTiming() (ttl, renew time.Duration) {
	ttl = c.LeaseTTL
	if ttl <= 0 {
		ttl = DefaultLeaseTTL
	}
	renew = c.LeaseRenewal
	if renew == 0 {
		renew = ttl / 3
	}
	return ttl, renew
}

// Store is the session state of one NATS JetStream.
type Store struct {
	recs   *Records
	leases *Leases
	tasks  *TaskLists
}

// Open creates or updates the buckets.
func Open(ctx context.Context, js jetstream.JetStream, cfg Config) (*Store, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	r := max(cfg.Replicas, 1)
	ttl, renew := cfg.leaseTiming()
	kv := func(c jetstream.KeyValueConfig) (jetstream.KeyValue, error) {
		c.Replicas, c.Storage = r, jetstream.FileStorage
		var b jetstream.KeyValue
		err := bus.AwaitJetStream(ctx, cfg.AwaitStartup, func() (err error) {
			b, err = js.CreateOrUpdateKeyValue(ctx, c)
			return err
		})
		if err != nil {
			return nil, fmt.Errorf("cluster: bucket %s: %w", c.Bucket, err)
		}
		return b, nil
	}
	recs, err := kv(jetstream.KeyValueConfig{Bucket: RecordsBucket, Description: "fabro agent session records"})
	if err != nil {
		return nil, err
	}
	var large jetstream.ObjectStore
	err = bus.AwaitJetStream(ctx, cfg.AwaitStartup, func() (err error) {
		large, err = js.CreateOrUpdateObjectStore(ctx, jetstream.ObjectStoreConfig{
			Bucket: LargeBucket, Description: "fabro agent session records over one message", Replicas: r, Storage: jetstream.FileStorage})
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("cluster: object store %s: %w", LargeBucket, err)
	}
	// A lease is a key whose age limit is the TTL: the server removes an
	// unrenewed one and leaves a marker, which is how watchers learn that
	// an owner is gone, with no clock of ours involved.
	leases, err := kv(jetstream.KeyValueConfig{Bucket: LeasesBucket, Description: "fabro agent session ownership leases",
		TTL: ttl, LimitMarkerTTL: max(ttl, time.Second)})
	if err != nil {
		return nil, err
	}
	if cfg.LeaseJetStream != nil {
		if leases, err = cfg.LeaseJetStream.KeyValue(ctx, LeasesBucket); err != nil {
			return nil, fmt.Errorf("cluster: bucket %s on the lease connection: %w", LeasesBucket, err)
		}
	}
	tasks, err := kv(jetstream.KeyValueConfig{Bucket: TasksBucket, Description: "fabro agent task lists of session trees"})
	if err != nil {
		return nil, err
	}
	maxValue := cfg.MaxValue
	if maxValue <= 0 {
		maxValue = int(js.Conn().MaxPayload()) - 4<<10
	}
	return &Store{
		recs:   &Records{kv: recs, large: large, maxValue: maxValue},
		leases: &Leases{kv: leases, ttl: ttl, renew: renew},
		tasks:  &TaskLists{kv: tasks},
	}, nil
}

// Records is the session records bucket.
func (s *Store) Records() *Records { return s.recs }

// Leases is the ownership leases bucket.
func (s *Store) Leases() *Leases { return s.leases }

// TaskLists is the task lists bucket.
func (s *Store) TaskLists() *TaskLists { return s.tasks }

// kvErr maps the client's errors to the package's.
func kvErr(err error) error {
	switch {
	case errors.Is(err, jetstream.ErrKeyNotFound), errors.Is(err, jetstream.ErrKeyDeleted):
		return fmt.Errorf("%w: %w", ErrNotFound, err)
	case errors.Is(err, jetstream.ErrKeyExists), errors.Is(err, jetstream.ErrKeyRevisionMismatch):
		return fmt.Errorf("%w: %w", ErrConflict, err)
	}
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) && (apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence ||
		apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant) {
		return fmt.Errorf("%w: %w", ErrConflict, err)
	}
	return err
}

func isNotFound(err error) bool { return errors.Is(err, ErrNotFound) }
func isConflict(err error) bool { return errors.Is(err, ErrConflict) }
