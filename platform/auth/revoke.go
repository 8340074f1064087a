package auth

import (
	"context"
	"errors"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
)

// DefaultRecheck is how often an open stream re-checks its credential when
// the Interceptor sets no Recheck: the bound on how long a token revoked in
// another process (a split deployment sharing the store file) keeps a stream.
const DefaultRecheck = 3 * time.Second

// Notifier is a Verifier that says when its tokens may have changed: the
// channel Changed returns is closed at the next change (a revocation in
// this process, or a reload of a store file changed elsewhere), so open
// streams re-check at once rather than at their next tick.
type Notifier interface {
	Changed() <-chan struct{}
}

// errRevoked is the cause of a stream context cut because its credential
// stopped verifying; the stream then ends with errStreamRevoked.
var errRevoked = errors.New("auth: the stream's credential was revoked")

var errStreamRevoked = refusal(codes.Unauthenticated, "the credential this stream was opened with is no longer valid (revoked): the stream ends", "UNAUTHENTICATED")

// Watch is the stream interceptor that ends a stream when the token it was
// opened with stops verifying: it re-checks every Recheck and at once on
// every change its Verifier reports (Notifier), and cancels the stream's
// context; Stream then ends it with UNAUTHENTICATED. It must run outermost,
// so that every context an inner interceptor or the handler derives from
// the stream's has its cancellation.
func (a *Interceptor) Watch(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	tok, ok := a.streamToken(ss.Context(), info.FullMethod)
	if !ok {
		return handler(srv, ss) // an open method, or refused by Stream
	}
	// The change channel is taken before Stream, inside, checks the token:
	// a revocation after that check closes it, and one before is refused
	// there, so a revocation racing the stream's start reaches it at once.
	changed := changes(asNotifier(a.Verifier))
	ctx, cancel := context.WithCancelCause(ss.Context())
	defer cancel(nil) // ends the watch
	go a.watch(ctx, tok, cancel, changed)
	return handler(srv, &watchedStream{ServerStream: ss, ctx: ctx})
}

// WatchToken is Watch for a call that is not a gRPC stream (an HTTP
// response streamed by hand, such as the gateway's compatible endpoints):
// the context it returns is cancelled once tok stops verifying, with a
// cause that says the token was revoked; stop ends the watch. It checks tok once after
// subscribing to the changes, so a revocation between the caller's own
// check and this call is not left to the next periodic re-check.
func (a *Interceptor) WatchToken(ctx context.Context, tok string) (_ context.Context, stop context.CancelFunc) {
	changed := changes(asNotifier(a.Verifier))
	ctx, cancel := context.WithCancelCause(ctx)
	if _, err := a.Verifier.Verify(tok); errors.Is(err, ErrInvalidToken) {
		cancel(errRevoked)
		return ctx, func() { cancel(nil) }
	}
	go a.watch(ctx, tok, cancel, changed)
	return ctx, func() { cancel(nil) }
}

// streamToken is the bearer token of a call to method that needs one.
func (a *Interceptor) streamToken(ctx context.Context, method string) (string, bool) {
	if g, known := a.table()[method]; known && g&Open != 0 {
		return "", false
	}
	vals := mdValues(ctx, "authorization")
	if len(vals) != 1 {
		return "", false
	}
	return ParseBearer(vals[0])
}

// watch re-verifies tok until ctx ends, and cancels the stream once tok
// is refused. A store that cannot be read does not end streams: that is
// the operator's fault, not the caller's, and new calls are refused anyway.
// changed was taken before tok's last check.
func (a *Interceptor) watch(ctx context.Context, tok string, cancel context.CancelCauseFunc, changed <-chan struct{}) {
	every := a.Recheck
	if every <= 0 {
		every = DefaultRecheck
	}
	t := time.NewTicker(every)
	defer t.Stop()
	n := asNotifier(a.Verifier)
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-changed:
		}
		changed = changes(n) // taken before the check: a change after it closes this one
		if _, err := a.Verifier.Verify(tok); errors.Is(err, ErrInvalidToken) {
			cancel(errRevoked)
			return
		}
	}
}

func changes(n Notifier) <-chan struct{} {
	if n == nil {
		return nil // never ready: the ticker alone
	}
	return n.Changed()
}

// revoked reports whether ctx was cut by Watch.
func revoked(ctx context.Context) bool { return errors.Is(context.Cause(ctx), errRevoked) }

// watchedStream is a stream with the watched context.
type watchedStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s *watchedStream) Context() context.Context { return s.ctx }

// Changed implements Notifier: the channel is closed when the store's
// snapshot is next replaced (a write here, or a reload of a file changed
// by another process, which Verify notices).
func (s *Store) Changed() <-chan struct{} {
	s.chMu.Lock()
	defer s.chMu.Unlock()
	if s.changed == nil {
		s.changed = make(chan struct{})
	}
	return s.changed
}

// publish installs snap as the current snapshot and wakes Changed's
// waiters when the file is another, or became readable or unreadable. A
// store that stays unreadable is reloaded on every Verify: waking the
// watchers each time would have them spin, each re-check waking the rest.
func (s *Store) publish(snap *snapshot) {
	old := s.cur.Swap(snap)
	if old != nil && old.ident == snap.ident && (old.err == nil) == (snap.err == nil) {
		return
	}
	s.chMu.Lock()
	if s.changed != nil {
		close(s.changed)
		s.changed = nil
	}
	s.chMu.Unlock()
}

// Changed implements Notifier: the store's changes (the in-memory tokens
// are never revoked).
func (e *Ephemeral) Changed() <-chan struct{} { return changes(asNotifier(e.Store)) }

func asNotifier(v Verifier) Notifier {
	n, _ := v.(Notifier)
	return n
}
