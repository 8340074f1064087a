package agent

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"

	"github.com/fabro-sh/fabro-go/platform/grpcclient"
	"github.com/fabro-sh/fabro-go/platform/grpcerr"
	"github.com/fabro-sh/fabro-go/services/agent/internal/bus"
	"github.com/fabro-sh/fabro-go/services/agent/internal/cluster"
)

// ClusterConfig makes agent replicas share their sessions through NATS
// JetStream: records, ownership leases and task lists in key-value
// buckets next to the events stream. Any replica then serves any session:
// a call for a session another live replica owns is forwarded to it; a
// session whose owner died is taken over, its running prompt resumed from
// the record.
type ClusterConfig struct {
	// Enabled turns the sharing on (it needs NATSURL: every replica must
	// reach the same JetStream).
	Enabled bool
	// AdvertiseAddr is this replica's gRPC address as the other replicas
	// reach it (host:port); required with Enabled.
	AdvertiseAddr string
	// ReplicaID names this replica in leases and logs (default: host name
	// and a random suffix, unique per process).
	ReplicaID string
	// LeaseTTL is how long a session's ownership outlives its owner's last
	// renewal; the takeover of a dead owner's prompt starts then (default
	// cluster.DefaultLeaseTTL).
	LeaseTTL time.Duration
	// LeaseRenewal is how often the replica renews its leases: at most a
	// third of LeaseTTL (default: a third). The two are validated
	// together at start.
	LeaseRenewal time.Duration
	// NATSReplicas is how many NATS servers keep the events stream and the
	// buckets: 1 (default) or 3 for a three-node NATS cluster. It applies
	// with or without Enabled.
	NATSReplicas int
}

func (c *ClusterConfig) registerFlags(fs *flag.FlagSet) {
	fs.BoolVar(&c.Enabled, "cluster", c.Enabled, "share sessions with the other agent replicas on the same NATS (-nats-url): forward calls to a session's owner, take over a dead owner's sessions")
	fs.StringVar(&c.AdvertiseAddr, "cluster-advertise-addr", c.AdvertiseAddr, "this replica's gRPC address as the other replicas reach it (host:port); required with -cluster")
	fs.StringVar(&c.ReplicaID, "cluster-replica-id", c.ReplicaID, "this replica's name in ownership leases (default: host name and a random suffix)")
	fs.DurationVar(&c.LeaseTTL, "cluster-lease-ttl", c.LeaseTTL, "how long a session's ownership outlives its owner's last renewal (default 3s)")
	fs.DurationVar(&c.LeaseRenewal, "cluster-lease-renewal", c.LeaseRenewal, "how often the replica renews its leases, at most a third of -cluster-lease-ttl (default: a third)")
	fs.IntVar(&c.NATSReplicas, "nats-replicas", c.NATSReplicas, "NATS servers keeping the events stream and the session buckets (1, or 3 on a three-node NATS cluster)")
}

// replica is the service's part in a cluster of agent replicas.
type replica struct {
	svc    *Service
	store  *cluster.Store
	keeper *cluster.Keeper
	id     string
	client grpcclient.Options // how to reach the other replicas
	logger *slog.Logger

	leaseConn *nats.Conn // the renewals' own connection

	mu       sync.Mutex
	conns    map[string]*grpc.ClientConn // by address
	inflight map[string]bool             // sessions being taken over here

	// sweepEvery is how often the replica looks for sessions left with an
	// unfinished prompt and no lease (a takeover that failed everywhere).
	sweepEvery time.Duration
	// leaseOf reads a session's lease (the store's; tests replace it).
	leaseOf func(ctx context.Context, id string) (cluster.Lease, error)

	stop    context.CancelFunc
	done    chan struct{}  // the takeover watcher's end
	workers sync.WaitGroup // the sweeper and the takeovers
}

func newReplicaID() string {
	host, _ := os.Hostname()
	var b [4]byte
	_, _ = rand.Read(b[:])
	return host + "-" + hex.EncodeToString(b[:])
}

// startReplica opens the buckets on the service's NATS, starts renewing
// leases and watching for the sessions other replicas lose.
func (s *Service) startReplica(ctx context.Context, cfg Config) error {
	cc := cfg.Cluster
	if cfg.NATSURL == "" {
		return errors.New("agent: -cluster needs -nats-url: every replica must use the same NATS")
	}
	if cc.AdvertiseAddr == "" {
		return errors.New("agent: -cluster needs -cluster-advertise-addr, where the other replicas reach this one")
	}
	ccfg := cluster.Config{Replicas: cc.NATSReplicas, LeaseTTL: cc.LeaseTTL, LeaseRenewal: cc.LeaseRenewal, AwaitStartup: true}
	if err := ccfg.Validate(); err != nil {
		return fmt.Errorf("agent: -cluster-lease-ttl and -cluster-lease-renewal: %w", err)
	}
	// The renewals get a connection of their own: a replica busy
	// publishing events must not renew late and fence its own sessions.
	leaseConn, leaseJS, err := s.bus.Dial("fabro-agent-leases")
	if err != nil {
		return fmt.Errorf("agent: %w", err)
	}
	ccfg.LeaseJetStream = leaseJS
	store, err := cluster.Open(ctx, s.bus.JetStream(), ccfg)
	if err != nil {
		leaseConn.Close()
		return fmt.Errorf("agent: %w", err)
	}
	r := &replica{svc: s, store: store, id: cc.ReplicaID, logger: s.logger, conns: map[string]*grpc.ClientConn{}, done: make(chan struct{}),
		leaseConn: leaseConn, inflight: map[string]bool{}, sweepEvery: sweepInterval(store.Leases().TTL()), leaseOf: store.Leases().Get}
	if r.id == "" {
		r.id = newReplicaID()
	}
	r.client = cfg.Client
	r.client.TLSServerName = "" // each replica's own name
	if r.client.Token == nil {
		r.client.Token = grpcclient.TokenFileOrEnv(cfg.TokenFile, cfg.LookupEnv)
	}
	r.keeper = store.Leases().Keep(r.id, cc.AdvertiseAddr, s.fence, s.logger)
	wctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	free, err := store.Leases().WatchFree(wctx)
	if err != nil {
		cancel()
		r.keeper.Close()
		leaseConn.Close()
		return fmt.Errorf("agent: %w", err)
	}
	r.stop = cancel
	s.replica = r
	if cfg.Records == nil {
		s.records = store.Records()
	}
	go r.watch(wctx, free)
	r.workers.Go(func() { r.sweep(wctx) })
	s.logger.InfoContext(ctx, "agent replica joined the cluster", "replica_id", r.id, "advertise_addr", cc.AdvertiseAddr)
	return nil
}

// close releases this replica's leases (the sessions' records are
// written), so that the others take its sessions over at once, and stops.
func (r *replica) close() {
	r.stop()
	<-r.done
	r.workers.Wait()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	r.keeper.ReleaseAll(ctx)
	r.keeper.Close()
	r.leaseConn.Close()
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, c := range r.conns {
		_ = c.Close()
	}
}

// claim makes this replica the session's owner before it is loaded (on a
// cluster), and returns the sequence its events continue after: the
// stream's last one, which is past the record's when the previous
// incarnation (a replica, or this process before a kill) died between
// writing its record and its last events. The record is repaired from it
// when the loaded session writes its own.
func (s *Service) claim(ctx context.Context, sessionID string, recorded uint64) (uint64, error) {
	if s.replica == nil {
		last, err := s.bus.LastSequence(ctx, sessionID)
		if err != nil {
			return 0, domain.New(codes.Unavailable, reasonNATSUnavailable, err.Error(), grpcerr.RetryAfter(time.Second))
		}
		if last > recorded {
			s.logger.InfoContext(ctx, "the session's record lags its event log; continuing after the log's last event",
				"session_id", sessionID, "recorded_sequence", recorded, "last_sequence", last)
		}
		return max(last, recorded), nil
	}
	if _, err := s.replica.keeper.Acquire(ctx, sessionID); err != nil {
		var held *cluster.HeldError
		if errors.As(err, &held) {
			return 0, domain.New(codes.FailedPrecondition, reasonSessionOwned,
				fmt.Sprintf("session %q is served by agent replica %s", sessionID, held.Lease.Owner),
				grpcerr.Meta("session_id", sessionID, "owner", held.Lease.Owner, "owner_addr", held.Lease.Addr))
		}
		return 0, domain.New(codes.Unavailable, reasonNATSUnavailable, "session ownership: "+err.Error(), grpcerr.RetryAfter(time.Second))
	}
	last, err := s.bus.LastSequence(ctx, sessionID)
	if err != nil {
		s.release(ctx, sessionID)
		return 0, domain.New(codes.Unavailable, reasonNATSUnavailable, err.Error(), grpcerr.RetryAfter(time.Second))
	}
	// Which replica serves a session, for an operator reading the logs:
	// created, resumed, or taken over (a takeover also logs its own line).
	s.logger.InfoContext(ctx, "this replica serves the session", "session_id", sessionID, "replica_id", s.replica.id)
	return max(last, recorded), nil
}

// release gives a session's ownership up (it was closed, or its claim
// failed).
func (s *Service) release(ctx context.Context, sessionID string) {
	if s.replica == nil {
		return
	}
	if err := s.replica.keeper.Release(context.WithoutCancel(ctx), sessionID); err != nil && !errors.Is(err, cluster.ErrConflict) {
		s.logger.WarnContext(ctx, "release session lease", "session_id", sessionID, "error", err)
	}
}

// fence stops serving a session whose lease was lost (another replica may
// own it now): its log publishes nothing more, its prompt is aborted, and
// it leaves memory without writing its record, which is the new owner's.
func (s *Service) fence(id string, err error) {
	s.mu.Lock()
	sess := s.sessions[id]
	delete(s.sessions, id)
	if sess != nil {
		sess.markUnloaded()
	}
	s.mu.Unlock()
	if sess == nil {
		return
	}
	s.logger.Warn("session ownership lost; this replica stops serving it", "session_id", id, "error", err)
	if sess.log != nil {
		sess.log.Fence(err)
	}
	sess.mu.Lock()
	sess.fenced = true
	sess.mu.Unlock()
	sess.agentAbort("the session's ownership moved to another agent replica")
}

// isLoaded reports whether this replica serves the session now.
func (s *Service) isLoaded(id string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	sess, ok := s.sessions[id]
	return ok && sess.agent != nil // not a record listed as SUSPENDED
}

// owner is the address of the live replica that owns the session when it
// is another one; "" when this replica serves it (it is loaded here, or
// nobody owns it).
func (r *replica) owner(ctx context.Context, id string) string {
	if r.svc.isLoaded(id) {
		return ""
	}
	var l cluster.Lease
	err := bus.Retry(ctx, func(ctx context.Context) (err error) {
		l, err = r.store.Leases().Get(ctx, id)
		return err
	})
	if err != nil || l.Owner == r.id {
		return ""
	}
	return l.Addr
}

// conn is a (cached) connection to another replica.
func (r *replica) conn(addr string) (*grpc.ClientConn, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if c, ok := r.conns[addr]; ok {
		return c, nil
	}
	c, err := grpcclient.New(addr, r.client)
	if err != nil {
		return nil, err
	}
	r.conns[addr] = c
	return c, nil
}
