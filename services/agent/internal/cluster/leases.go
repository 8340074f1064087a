package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// ErrHeld is an Acquire of a session another replica owns; the error is a
// *HeldError naming that owner.
var ErrHeld = errors.New("session owned by another replica")

// HeldError says who owns the session.
type HeldError struct{ Lease Lease }

func (e *HeldError) Error() string {
	return fmt.Sprintf("session %s is owned by replica %s at %s", e.Lease.SessionID, e.Lease.Owner, e.Lease.Addr)
}
func (e *HeldError) Unwrap() error { return ErrHeld }

// Lease is one replica's ownership of one session.
type Lease struct {
	SessionID string
	// Owner is the replica's id, unique per process.
	Owner string
	// Addr is the owner's advertised gRPC address, where other replicas
	// forward the session's calls.
	Addr     string
	Revision uint64
}

type leaseValue struct {
	Owner string `json:"owner"`
	Addr  string `json:"addr"`
}

// Leases is the ownership bucket. A lease lives TTL past its last write;
// the server removes an unrenewed one.
type Leases struct {
	kv    jetstream.KeyValue
	ttl   time.Duration
	renew time.Duration // how often a Keeper renews
}

// TTL is how long a lease outlives its owner's last renewal.
func (l *Leases) TTL() time.Duration { return l.ttl }

// Get returns the session's live lease; ErrNotFound when it has none.
func (l *Leases) Get(ctx context.Context, id string) (Lease, error) {
	e, err := l.kv.Get(ctx, id)
	if err != nil {
		return Lease{}, fmt.Errorf("cluster: lease %s: %w", id, kvErr(err))
	}
	return decodeLease(e)
}

func decodeLease(e jetstream.KeyValueEntry) (Lease, error) {
	var v leaseValue
	if err := json.Unmarshal(e.Value(), &v); err != nil {
		return Lease{}, fmt.Errorf("cluster: lease %s: %w", e.Key(), err)
	}
	return Lease{SessionID: e.Key(), Owner: v.Owner, Addr: v.Addr, Revision: e.Revision()}, nil
}

// Acquire takes the session for owner, or renews owner's own lease. When
// another replica holds it the error is a *HeldError: the current owner
// wins every conflict.
func (l *Leases) Acquire(ctx context.Context, id, owner, addr string) (Lease, error) {
	b, err := json.Marshal(leaseValue{Owner: owner, Addr: addr})
	if err != nil {
		return Lease{}, err
	}
	for {
		rev, err := l.kv.Create(ctx, id, b)
		if err == nil {
			return Lease{SessionID: id, Owner: owner, Addr: addr, Revision: rev}, nil
		}
		if !errors.Is(kvErr(err), ErrConflict) {
			return Lease{}, fmt.Errorf("cluster: lease %s: %w", id, kvErr(err))
		}
		cur, err := l.Get(ctx, id)
		if errors.Is(err, ErrNotFound) {
			continue // expired or released between the two calls
		}
		if err != nil {
			return Lease{}, err
		}
		if cur.Owner != owner {
			return Lease{}, &HeldError{Lease: cur}
		}
		cur.Addr = addr
		return l.Renew(ctx, cur)
	}
}

// Renew rewrites the lease, restarting its TTL. ErrConflict: it is no
// longer the lease stored (expired, or another replica's now).
func (l *Leases) Renew(ctx context.Context, lease Lease) (Lease, error) {
	b, err := json.Marshal(leaseValue{Owner: lease.Owner, Addr: lease.Addr})
	if err != nil {
		return Lease{}, err
	}
	rev, err := l.kv.Update(ctx, lease.SessionID, b, lease.Revision)
	if err != nil {
		return Lease{}, fmt.Errorf("cluster: renew lease %s: %w", lease.SessionID, kvErr(err))
	}
	lease.Revision = rev
	return lease, nil
}

// Release gives the lease up, if it is still the one stored.
func (l *Leases) Release(ctx context.Context, lease Lease) error {
	if err := l.kv.Delete(ctx, lease.SessionID, jetstream.LastRevision(lease.Revision)); err != nil {
		return fmt.Errorf("cluster: release lease %s: %w", lease.SessionID, kvErr(err))
	}
	return nil
}

// WatchFree sends the id of every session whose lease ends from now on
// (expired or released), until ctx ends; the channel is then closed.
func (l *Leases) WatchFree(ctx context.Context) (<-chan string, error) {
	w, err := l.kv.WatchAll(ctx, jetstream.UpdatesOnly())
	if err != nil {
		return nil, fmt.Errorf("cluster: watch leases: %w", err)
	}
	out := make(chan string, 64)
	go func() {
		defer close(out)
		defer func() { _ = w.Stop() }()
		for {
			select {
			case <-ctx.Done():
				return
			case e, ok := <-w.Updates():
				if !ok {
					return
				}
				if e == nil || e.Operation() == jetstream.KeyValuePut {
					continue
				}
				select {
				case out <- e.Key():
				case <-ctx.Done():
					return
				}
			}
		}
	}()
	return out, nil
}

// Keeper holds one replica's leases and renews them every renewal
// interval (a third of the TTL by default) from a goroutine of its own,
// all of a round's renewals at once, each bounded by the interval. A lease it cannot renew is lost: when another
// replica took it, or when it went a TTL unrenewed (the server may have
// removed it). It tells the replica through onLost, which must stop using
// the session at once.
type Keeper struct {
	leases      *Leases
	owner, addr string
	onLost      func(id string, err error)
	logger      *slog.Logger

	mu   sync.Mutex
	held map[string]*held

	stop chan struct{}
	done chan struct{}
}

type held struct {
	lease Lease
	// valid is until when the lease is surely ours (validity after the
	// send of its last successful write, which the server received later).
	valid time.Time
}

// Keep starts a Keeper for owner, reachable at addr. Close stops it.
func (l *Leases) Keep(owner, addr string, onLost func(id string, err error), logger *slog.Logger) *Keeper {
	k := &Keeper{leases: l, owner: owner, addr: addr, onLost: onLost, logger: logger,
		held: map[string]*held{}, stop: make(chan struct{}), done: make(chan struct{})}
	go k.run()
	return k
}

// Acquire takes the session's lease and keeps renewing it. The error is
// a *HeldError when another replica owns the session.
func (k *Keeper) Acquire(ctx context.Context, id string) (Lease, error) {
	sent := time.Now()
	lease, err := k.leases.Acquire(ctx, id, k.owner, k.addr)
	if err != nil {
		return Lease{}, err
	}
	k.mu.Lock()
	k.held[id] = &held{lease: lease, valid: sent.Add(k.validity())}
	k.mu.Unlock()
	return lease, nil
}

// Holds reports whether the replica surely owns the session now.
func (k *Keeper) Holds(id string) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	h, ok := k.held[id]
	return ok && time.Now().Before(h.valid)
}

// Release stops renewing the session's lease and gives it up.
func (k *Keeper) Release(ctx context.Context, id string) error {
	k.mu.Lock()
	h, ok := k.held[id]
	delete(k.held, id)
	k.mu.Unlock()
	if !ok {
		return nil
	}
	return k.leases.Release(ctx, h.lease)
}

// ReleaseAll gives up every lease the keeper holds.
func (k *Keeper) ReleaseAll(ctx context.Context) {
	k.mu.Lock()
	ids := make([]string, 0, len(k.held))
	for id := range k.held {
		ids = append(ids, id)
	}
	k.mu.Unlock()
	for _, id := range ids {
		_ = k.Release(ctx, id)
	}
}

// Close stops renewing; the leases then expire (Release first to hand
// sessions over at once).
func (k *Keeper) Close() {
	select {
	case <-k.stop:
	default:
		close(k.stop)
	}
	<-k.done
}

func (k *Keeper) run() {
	defer close(k.done)
	t := time.NewTicker(k.leases.renew)
	defer t.Stop()
	for {
		select {
		case <-k.stop:
			return
		case <-t.C:
			k.renewAll()
		}
	}
}

func (k *Keeper) renewAll() {
	type lostLease struct {
		id  string
		err error
	}
	var lost []lostLease
	now := time.Now()
	k.mu.Lock()
	todo := make(map[string]*held, len(k.held))
	for id, h := range k.held {
		if !now.Before(h.valid) {
			// Unrenewed too long: the server may remove it any moment.
			delete(k.held, id)
			lost = append(lost, lostLease{id, fmt.Errorf("lease not renewed within %s", k.leases.ttl)})
			continue
		}
		todo[id] = h
	}
	k.mu.Unlock()
	// The round's renewals go out together, so that one slow round trip
	// does not hold the others back (the replies come back pipelined on
	// the connection); the round has one interval, whatever the number of
	// leases.
	ctx, cancel := context.WithTimeout(context.Background(), k.leases.renew)
	defer cancel()
	var wg sync.WaitGroup
	var lostMu sync.Mutex
	sem := make(chan struct{}, maxConcurrentRenewals)
	for id, h := range todo {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			k.mu.Lock()
			lease := h.lease
			k.mu.Unlock()
			sent := time.Now()
			next, err := k.leases.Renew(ctx, lease)
			if errors.Is(err, ErrConflict) {
				// A renewal of an earlier round that timed out here may
				// have been stored: the lease is still ours if it names
				// this keeper (owner ids are unique per process).
				if cur, gerr := k.leases.Get(ctx, lease.SessionID); gerr == nil && cur.Owner == k.owner {
					next, err = k.leases.Renew(ctx, cur)
				}
			}
			k.mu.Lock()
			defer k.mu.Unlock()
			if cur, ok := k.held[id]; !ok || cur != h {
				return // released or re-acquired meanwhile
			}
			switch {
			case err == nil:
				h.lease, h.valid = next, sent.Add(k.validity())
			case errors.Is(err, ErrConflict):
				delete(k.held, id)
				lostMu.Lock()
				lost = append(lost, lostLease{id, err})
				lostMu.Unlock()
			default:
				k.logger.Warn("session lease not renewed; retrying", "session_id", id, "error", err)
			}
		})
	}
	wg.Wait()
	for _, l := range lost {
		k.logger.Warn("session lease lost", "session_id", l.id, "error", l.err)
		k.onLost(l.id, l.err)
	}
}

// validity is how long after sending a successful write the replica
// counts a lease as its own: the TTL less one renewal interval, so that a
// lost lease is noticed (and its session fenced) at the next round, no
// later than the TTL, before the server can hand it to another replica.
func (k *Keeper) validity() time.Duration { return k.leases.ttl - k.leases.renew }

// maxConcurrentRenewals bounds the renewals in flight at once.
const maxConcurrentRenewals = 64
