package bus

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Defaults of WriterConfig.
const (
	DefaultAckTimeout   = 5 * time.Second
	DefaultOutageLimit  = 3 * time.Minute
	DefaultMaxAge       = 7 * 24 * time.Hour
	DefaultBufferEvents = 4096
	DefaultBufferBytes  = 256 << 20
	// DefaultMaxBytes bounds the events stream's storage when no size is
	// configured: the oldest events go first, whatever their age.
	DefaultMaxBytes = 1 << 30
)

// WriterConfig says how a session's event writer rides out NATS outages,
// and what the events stream retains.
type WriterConfig struct {
	// AckTimeout is how long a publish waits for its ack before it is
	// published again (same message id).
	AckTimeout time.Duration
	// OutageLimit is how long a writer keeps retrying with no ack before
	// the session ends with ErrNATSUnavailable.
	OutageLimit time.Duration
	// BufferEvents and BufferBytes bound a session's unacknowledged events;
	// at the bound Emit waits (backpressure). One event of any size is
	// always accepted into an empty buffer.
	BufferEvents int
	BufferBytes  int
	// MaxAge and MaxBytes are the stream's retention; 0 takes the default
	// (DefaultMaxAge, DefaultMaxBytes), negative keeps events forever (of
	// any total size).
	MaxAge   time.Duration
	MaxBytes int64
	// NoJSON turns off the JSON copy of each event on the JSON subject tree
	// (encoding.go).
	NoJSON bool
	// ChunkSize, when set, overrides the largest single message (tests).
	ChunkSize int
}

func (c WriterConfig) withDefaults() WriterConfig {
	if c.AckTimeout <= 0 {
		c.AckTimeout = DefaultAckTimeout
	}
	if c.OutageLimit <= 0 {
		c.OutageLimit = DefaultOutageLimit
	}
	if c.BufferEvents <= 0 {
		c.BufferEvents = DefaultBufferEvents
	}
	if c.BufferBytes <= 0 {
		c.BufferBytes = DefaultBufferBytes
	}
	switch {
	case c.MaxAge == 0:
		c.MaxAge = DefaultMaxAge
	case c.MaxAge < 0:
		c.MaxAge = 0 // JetStream's "forever"
	}
	switch {
	case c.MaxBytes == 0:
		c.MaxBytes = DefaultMaxBytes
	case c.MaxBytes < 0:
		c.MaxBytes = -1 // JetStream's "unlimited"
	}
	return c
}

// duplicates is the stream's duplicate window: longer than any retry
// horizon, but JetStream wants it no longer than the max age.
func (c WriterConfig) duplicates() time.Duration {
	d := max(DuplicateWindow, 2*c.OutageLimit)
	if c.MaxAge > 0 {
		d = min(d, c.MaxAge)
	}
	return d
}

// writerOptions are the connection options the writer's recovery relies
// on. With no reconnect buffer a publish during an outage fails at once
// instead of being sent after reconnecting ahead of the events the
// writer republishes, which would break the stream's order.
func (b *Bus) writerOptions() []nats.Option {
	return []nats.Option{
		nats.ReconnectBufSize(-1),
		nats.ReconnectWait(250 * time.Millisecond),
		nats.ReconnectJitter(100*time.Millisecond, time.Second),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			if err != nil { // nil: our own Close
				b.logger.Warn("nats connection lost; session events wait for it", "error", err)
			}
		}),
		nats.ReconnectHandler(func(nc *nats.Conn) {
			b.logger.Info("nats connection back", "nats_url", nc.ConnectedUrlRedacted())
		}),
	}
}

// connected reports whether the connection is up.
func (b *Bus) connected() bool { return b.nc.IsConnected() }

// limits is what a Log asks of its Publisher, when it has them.
type limits interface {
	writerLimits() WriterConfig
	connected() bool
	epoch() uint64
	log() *slog.Logger
}

func (b *Bus) writerLimits() WriterConfig { return b.wcfg }
func (b *Bus) epoch() uint64              { return b.nc.Stats().Reconnects }
func (b *Bus) log() *slog.Logger          { return b.logger }

// Errors of the writer.
var (
	// ErrNATSUnavailable ends a session whose events NATS did not
	// acknowledge for longer than the outage limit.
	ErrNATSUnavailable = errors.New("NATS JetStream unavailable")
	// ErrMarshal is an event that cannot be encoded (a bug, never retried).
	ErrMarshal = errors.New("cannot encode event")
)

// inProcess dials the current embedded server, so a restarted one
// (tests) is reached by the same connection's reconnects.
type inProcess struct {
	mu sync.Mutex
	ns *server.Server
}

func (p *inProcess) InProcessConn() (net.Conn, error) {
	return p.server().InProcessConn()
}

func (p *inProcess) server() *server.Server {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.ns
}

// ExpiredError is a replay from a sequence the stream no longer retains.
type ExpiredError struct {
	From   uint64 // requested
	Oldest uint64 // oldest retained; 0 when none is
}

func (e *ExpiredError) Error() string {
	if e.Oldest == 0 {
		return fmt.Sprintf("events from sequence %d are past the stream's retention; none is retained", e.From)
	}
	return fmt.Sprintf("events from sequence %d are past the stream's retention; the oldest retained is %d", e.From, e.Oldest)
}

// checkRetained fails with *ExpiredError when the stream holds no event
// of the session at all (a replay would otherwise wait for one).
func (b *Bus) checkRetained(ctx context.Context, sessionID string, from uint64) error {
	if err := Retry(ctx, func(ctx context.Context) error {
		stream, err := b.js.Stream(ctx, StreamName)
		if err != nil {
			return err
		}
		_, err = stream.GetLastMsgForSubject(ctx, SessionFilter(sessionID))
		return err
	}); err != nil {
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			return &ExpiredError{From: from}
		}
		return fmt.Errorf("bus: replay %s: %w", sessionID, err)
	}
	return nil
}
