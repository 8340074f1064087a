// Package bus carries agent events on NATS JetStream: the subject scheme of
// the agent contract, an embedded nats-server (or a connection to an
// external one), the durable stream with deduplication by Nats-Msg-Id, and
// replay of one session's events.
package bus

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"strconv"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/metric"
	"google.golang.org/protobuf/proto"

	agentv1 "github.com/fabro-sh/fabro-go/gen/fabro/agent/v1"
	"github.com/fabro-sh/fabro-go/platform/listen"
)

// Names of the JetStream stream and its subjects.
const (
	StreamName    = "FABRO_AGENT_EVENTS"
	SubjectPrefix = "fabro.agent.v1.sessions."
	// AllSubjects is what the stream captures.
	AllSubjects = SubjectPrefix + ">"
	// DuplicateWindow is how long JetStream remembers message ids. It is
	// longer than any publish retry horizon of the service.
	DuplicateWindow = 10 * time.Minute
	// MaxPendingAcks bounds asynchronous publishes awaiting their ack.
	MaxPendingAcks = 4096
)

// Subject is the NATS subject of one event type of one session.
func Subject(sessionID, eventType string) string {
	return SubjectPrefix + sessionID + ".events." + eventType
}

// SessionFilter matches every event of one session.
func SessionFilter(sessionID string) string {
	return SubjectPrefix + sessionID + ".events.>"
}

// MsgID is the id of an event, its Fabro-Event-Msg-Id:
// "<session_id>:<sequence>".
func MsgID(sessionID string, seq uint64) string {
	return sessionID + ":" + strconv.FormatUint(seq, 10)
}

// DedupID is the Nats-Msg-Id of an event written by one incarnation of its
// session's writer: "<session_id>:<sequence>@<incarnation>" (the event's
// id alone when incarnation is empty). A writer's republishes of its own
// events share it, so JetStream stores each once; another incarnation's
// event of the same sequence never matches it.
func DedupID(msgID, incarnation string) string {
	if incarnation == "" {
		return msgID
	}
	return msgID + "@" + incarnation
}

var eventOneof = (&agentv1.AgentEvent{}).ProtoReflect().Descriptor().Oneofs().ByName("event")

// EventType is the snake_case name of the event oneof field set in ev, the
// last token of its subject; "" when none is set.
func EventType(ev *agentv1.AgentEvent) string {
	fd := ev.ProtoReflect().WhichOneof(eventOneof)
	if fd == nil {
		return ""
	}
	return string(fd.Name())
}

// EventTypes lists every event type of the contract, in field order.
func EventTypes() []string {
	fields := eventOneof.Fields()
	out := make([]string, 0, fields.Len())
	for i := range fields.Len() {
		out = append(out, string(fields.Get(i).Name()))
	}
	return out
}

// Config says which NATS server to use.
type Config struct {
	// URL of an external NATS server with JetStream; empty runs nats-server
	// embedded in this process.
	URL string
	// Listen is the embedded server's client address (host:port, port -1
	// for a random one) so other processes can subscribe; empty accepts
	// in-process connections only.
	Listen string
	// StoreDir holds the embedded server's JetStream files.
	StoreDir string
	// SubscriberKeyFile keeps the embedded server's subscriber credential,
	// an nkey seed, created (0600) when absent. Empty: no client but the
	// agent itself can connect.
	SubscriberKeyFile string
	// ListenTLSCertFile and ListenTLSKeyFile make the embedded listener
	// serve TLS; with ListenTLSClientCAFile it also requires client
	// certificates signed by that CA.
	ListenTLSCertFile, ListenTLSKeyFile, ListenTLSClientCAFile string
	// Insecure lets the embedded server listen on an address that is not
	// loopback without TLS (with a warning); without it Open refuses.
	Insecure bool

	// Credentials for an external server: a JWT creds file, an nkey seed
	// file, or a user and password (at most one of them).
	CredsFile, NKeyFile, User, Password string
	// TLSCAFile verifies an external server's certificate; TLSCertFile and
	// TLSKeyFile are this client's certificate for servers that ask one.
	TLSCAFile, TLSCertFile, TLSKeyFile string
	// Writer bounds how event writers ride out NATS outages and what the
	// stream retains; zero fields take the defaults (writer.go).
	Writer WriterConfig
	// Replicas is how many servers of a NATS cluster keep the events
	// stream (1 when zero; 3 for a three-node cluster).
	Replicas int
	// MemoryStorage keeps the events stream in memory (with an embedded
	// server in a fresh StoreDir, nothing is recovered at start).
	MemoryStorage bool
}

// Bus is a NATS connection with the agent events stream.
type Bus struct {
	ns  *server.Server // nil with an external server
	nc  *nats.Conn
	js  jetstream.JetStream
	url string

	backlog metric.Registration // the backlog gauge's callback
	wcfg    WriterConfig
	logger  *slog.Logger
	inproc  *inProcess // the embedded server the connection dials, swappable by tests
	sopts   *server.Options
	auth    *authenticator // the embedded server's; nil with an external one

	dialURL  string        // what Dial connects to,
	dialOpts []nats.Option // and how
}

// Open starts the embedded server or connects to the external one, and
// creates (or updates) the events stream.
func Open(ctx context.Context, cfg Config, logger *slog.Logger) (_ *Bus, err error) {
	b := &Bus{url: cfg.URL, wcfg: cfg.Writer.withDefaults(), logger: logger}
	defer func() {
		if err != nil {
			b.Close()
		}
	}()
	opts := []nats.Option{nats.Name("fabro-agent"), nats.MaxReconnects(-1), nats.RetryOnFailedConnect(true)}
	opts = append(opts, b.writerOptions()...)
	if cfg.URL != "" {
		ext, err := externalOptions(cfg)
		if err != nil {
			return nil, err
		}
		opts = append(opts, ext...)
	} else {
		if cfg.StoreDir == "" {
			return nil, errors.New("bus: an embedded server needs a store directory")
		}
		sopts := &server.Options{
			ServerName: "fabro-agent",
			JetStream:  true,
			StoreDir:   cfg.StoreDir,
			NoSigs:     true,
			NoLog:      true,
			DontListen: cfg.Listen == "",
		}
		if cfg.Listen != "" {
			host, port, err := net.SplitHostPort(cfg.Listen)
			if err != nil {
				return nil, fmt.Errorf("bus: listen address %q: %w", cfg.Listen, err)
			}
			p, err := strconv.Atoi(port)
			if err != nil {
				return nil, fmt.Errorf("bus: listen port %q: %w", port, err)
			}
			sopts.Host, sopts.Port = host, p
		}
		self, auth, err := embeddedAuth(sopts, cfg.SubscriberKeyFile)
		if err != nil {
			return nil, err
		}
		opts, b.auth = append(opts, self), auth
		if err := embeddedTLS(sopts, cfg); err != nil {
			return nil, err
		}
		if err := checkExposure(ctx, logger, cfg, sopts.Host); err != nil {
			return nil, err
		}
		if sopts.Port > 0 {
			// nats-server reports a port in use only as never becoming
			// ready: name the port, its holder and the flag first.
			l, err := net.Listen("tcp", net.JoinHostPort(sopts.Host, strconv.Itoa(sopts.Port)))
			if err != nil {
				return nil, fmt.Errorf("bus: %w", listen.Error("NATS", cfg.Listen, "--nats-listen", err))
			}
			l.Close()
		}
		ns, err := server.NewServer(sopts)
		if err != nil {
			return nil, fmt.Errorf("bus: embedded nats-server: %w", err)
		}
		b.ns = ns
		ns.Start()
		if !ns.ReadyForConnections(10 * time.Second) {
			return nil, errors.New("bus: embedded nats-server did not become ready")
		}
		if cfg.Listen != "" {
			b.url = ns.ClientURL()
		}
		b.sopts, b.inproc = sopts, &inProcess{ns: ns}
		opts = append(opts, nats.InProcessServer(b.inproc))
		logger.InfoContext(ctx, "embedded nats-server started", "nats_url", b.url, "store_dir", cfg.StoreDir,
			"subscriber_nkey_file", cfg.SubscriberKeyFile)
	}
	url := cfg.URL
	if url == "" {
		// Unused but for its scheme: the in-process option wins, and a
		// tls:// URL would ask for TLS on the in-process pipe too.
		url = nats.DefaultURL
	}
	if b.nc, err = nats.Connect(url, opts...); err != nil {
		return nil, fmt.Errorf("bus: connect to nats: %w", err)
	}
	b.dialURL, b.dialOpts = url, slices.Clip(opts)
	if b.js, err = jetstream.New(b.nc, jetstream.WithPublishAsyncMaxPending(MaxPendingAcks), jetstream.WithPublishAsyncTimeout(b.wcfg.AckTimeout)); err != nil {
		return nil, fmt.Errorf("bus: jetstream: %w", err)
	}
	storage := jetstream.FileStorage
	if cfg.MemoryStorage {
		storage = jetstream.MemoryStorage
	}
	if err := AwaitJetStream(ctx, cfg.URL != "", func() error {
		_, err := b.js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{
			Name:        StreamName,
			Description: "fabro agent session events",
			Subjects:    []string{AllSubjects},
			Storage:     storage,
			Retention:   jetstream.LimitsPolicy,
			Duplicates:  b.wcfg.duplicates(),
			AllowDirect: true,
			MaxAge:      b.wcfg.MaxAge,
			MaxBytes:    b.wcfg.MaxBytes,
			Replicas:    max(cfg.Replicas, 1),
			// A subscriber may create consumers but not delete them: every
			// consumer, durable ones too, goes once idle this long.
			ConsumerLimits: jetstream.StreamConsumerLimits{InactiveThreshold: consumerIdleLimit},
		})
		return err
	}); err != nil {
		return nil, fmt.Errorf("bus: create stream %s: %w", StreamName, err)
	}
	if b.backlog, err = observeBacklog(b.js); err != nil {
		return nil, fmt.Errorf("bus: metrics: %w", err)
	}
	return b, nil
}

// consumerIdleLimit is how long a consumer of the events stream may sit
// idle before the server removes it.
var consumerIdleLimit = time.Hour

// Dial opens another connection to the bus's NATS, with the bus's
// credentials, for traffic that must not queue behind the events (the
// cluster's lease renewals). The caller closes it, before the bus.
func (b *Bus) Dial(name string) (*nats.Conn, jetstream.JetStream, error) {
	nc, err := nats.Connect(b.dialURL, append(b.dialOpts, nats.Name(name))...)
	if err != nil {
		return nil, nil, fmt.Errorf("bus: connect to nats (%s): %w", name, err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, nil, fmt.Errorf("bus: jetstream (%s): %w", name, err)
	}
	return nc, js, nil
}

// JetStream is the bus's JetStream context, for the session state kept
// in key-value buckets next to the events stream.
func (b *Bus) JetStream() jetstream.JetStream { return b.js }

// ClientURL is where other processes connect: the external URL, or the
// embedded server's listen URL; "" for an in-process-only server.
func (b *Bus) ClientURL() string { return b.url }

// Publish sends ev asynchronously to its subject with its message id.
// Publishes are stored in call order; the future reports the ack.
// Every message carries the envelope headers (encoding.go) and ctx's trace
// context (traceparent). The JSON copy, when someone may read it, goes out
// on the JSON subject tree right after.
func (b *Bus) Publish(ctx context.Context, ev *agentv1.AgentEvent, incarnation string) (jetstream.PubAckFuture, error) {
	data, err := proto.Marshal(ev)
	if err != nil {
		return nil, fmt.Errorf("bus: marshal event: %w: %w", ErrMarshal, err)
	}
	typ, id := EventType(ev), MsgID(ev.GetSessionId(), ev.GetSequence())
	msgs := chunkMsgs(ctx, Subject(ev.GetSessionId(), typ), ContentTypeProtobuf, typ, id, DedupID(id, incarnation), data, b.chunkLimit())
	f, err := b.publishAll(msgs)
	if err != nil {
		return nil, err
	}
	if err := b.publishJSON(ctx, ev, typ, id); err != nil {
		return nil, err
	}
	return f, nil
}

// Replay calls fn with the stored events of one session whose sequence is
// at least from, in order, up to and including sequence to.
func (b *Bus) Replay(ctx context.Context, sessionID string, from, to uint64, fn func(*agentv1.AgentEvent) error) error {
	if from > to {
		return nil
	}
	if err := b.checkRetained(ctx, sessionID, from); err != nil {
		return err
	}
	var asm reassembler
	cons := &replayConsumer{js: b.js, filters: []string{SessionFilter(sessionID)}}
	defer cons.close(ctx)
	// The events are handed on in sequence order, whatever their order in
	// the stream: when a cluster's stream leader fails over, the writer's
	// republished events can land after later ones it had in flight.
	next, oldest := from, uint64(0)
	held := map[uint64]*agentv1.AgentEvent{}
	for {
		msg, err := cons.next(ctx)
		if err != nil {
			return fmt.Errorf("bus: replay %s: %w", sessionID, err)
		}
		left := uint64(1)
		if md, err := msg.Metadata(); err == nil {
			left = md.NumPending
		}
		ev, err := asm.add(msg)
		if err != nil {
			return fmt.Errorf("bus: replay %s: %w", sessionID, err)
		}
		if ev != nil {
			seq := ev.GetSequence()
			if oldest == 0 || seq < oldest {
				oldest = seq
			}
			if seq >= next {
				held[seq] = ev
			}
			for e, ok := held[next]; ok; e, ok = held[next] {
				delete(held, next)
				if err := fn(e); err != nil {
					return err
				}
				if next >= to {
					return nil
				}
				next++
			}
		}
		// Everything stored was read (or far more than any reordering)
		// and the next event is not among it: the stream no longer
		// retains it.
		if left == 0 || len(held) > maxReorder {
			if next == from && oldest > from {
				return &ExpiredError{From: from, Oldest: oldest}
			}
			return fmt.Errorf("bus: replay %s: event %d is not in the stream", sessionID, next)
		}
	}
}

// maxReorder bounds the events a replay holds back waiting for an
// earlier one: more than the writer can have in flight.
const maxReorder = 2 * MaxPendingAcks

// ReplayMany calls fn with the stored events of the given sessions, in the
// order they were stored, up to the last one stored when it was called.
func (b *Bus) ReplayMany(ctx context.Context, sessionIDs []string, fn func(*agentv1.AgentEvent) error) error {
	if len(sessionIDs) == 0 {
		return nil
	}
	filters := make([]string, len(sessionIDs))
	for i, id := range sessionIDs {
		filters[i] = SessionFilter(id)
	}
	var (
		stream jetstream.Stream
		cons   jetstream.Consumer
		info   *jetstream.ConsumerInfo
	)
	if err := Retry(ctx, func(ctx context.Context) (err error) {
		if stream, err = b.js.Stream(ctx, StreamName); err != nil {
			return err
		}
		cons, err = stream.CreateConsumer(ctx, jetstream.ConsumerConfig{
			FilterSubjects:    filters,
			DeliverPolicy:     jetstream.DeliverAllPolicy,
			AckPolicy:         jetstream.AckNonePolicy,
			InactiveThreshold: time.Minute,
			MemoryStorage:     true,
		})
		return err
	}); err != nil {
		return fmt.Errorf("bus: replay: %w", err)
	}
	defer func() { _ = stream.DeleteConsumer(context.WithoutCancel(ctx), cons.CachedInfo().Name) }()
	if err := Retry(ctx, func(ctx context.Context) (err error) {
		info, err = cons.Info(ctx)
		return err
	}); err != nil {
		return fmt.Errorf("bus: replay: %w", err)
	}
	var asm reassembler
	for n := info.NumPending; n > 0; n-- {
		msg, err := next(ctx, cons)
		if err != nil {
			return fmt.Errorf("bus: replay: %w", err)
		}
		ev, err := asm.add(msg)
		if err != nil {
			return fmt.Errorf("bus: replay: %w", err)
		}
		if ev == nil {
			continue // a chunk of an event not yet whole
		}
		if err := fn(ev); err != nil {
			return err
		}
	}
	return nil
}

// Close drains the connection and stops the embedded server.
func (b *Bus) Close() error {
	if b.backlog != nil {
		_ = b.backlog.Unregister()
	}
	var err error
	if b.nc != nil {
		if b.js != nil {
			select {
			case <-b.js.PublishAsyncComplete():
			case <-time.After(5 * time.Second):
			}
		}
		err = b.nc.Drain()
		b.nc.Close()
	}
	if b.ns != nil {
		b.ns.Shutdown()
		b.ns.WaitForShutdown()
	}
	return err
}
