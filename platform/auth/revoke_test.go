package auth_test

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/fabro-sh/fabro-go/platform/auth"
)

const followMethod = "/test.Watch/Follow"

// followDesc is a server stream that sends one message per tick of its
// client (a message received), like a follow StreamEvents, and otherwise
// waits for its context: the shape of every long-lived fabro stream.
var followDesc = grpc.ServiceDesc{
	ServiceName: "test.Watch",
	HandlerType: (*any)(nil),
	Streams: []grpc.StreamDesc{{StreamName: "Follow", ServerStreams: true, Handler: func(_ any, ss grpc.ServerStream) error {
		var in wrapperspb.Int64Value
		if err := ss.RecvMsg(&in); err != nil {
			return err
		}
		for i := range in.GetValue() {
			if err := ss.SendMsg(wrapperspb.Int64(i)); err != nil {
				return err
			}
		}
		<-ss.Context().Done()
		if in.GetValue() < 0 {
			return nil // a handler that ends quietly on cancellation
		}
		return status.FromContextError(ss.Context().Err()).Err()
	}}},
}

// serveFollow serves followDesc behind Watch and Stream over bufconn.
func serveFollow(t testing.TB, v auth.Verifier, recheck time.Duration, watch bool) *grpc.ClientConn {
	t.Helper()
	ic := &auth.Interceptor{Verifier: v, Logger: slog.New(slog.DiscardHandler), Recheck: recheck,
		Table: map[string]auth.Grant{followMethod: auth.People}}
	chain := []grpc.StreamServerInterceptor{ic.Stream}
	if watch {
		chain = append([]grpc.StreamServerInterceptor{ic.Watch}, chain...)
	}
	srv := grpc.NewServer(grpc.ChainStreamInterceptor(chain...))
	srv.RegisterService(&followDesc, nil)
	lis := bufconn.Listen(1 << 20)
	go srv.Serve(lis)
	t.Cleanup(srv.Stop)
	conn, err := grpc.NewClient("passthrough:///bufconn", grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// follow opens a Follow stream with token asking for n messages.
func follow(t testing.TB, conn *grpc.ClientConn, token string, n int64) grpc.ClientStream {
	t.Helper()
	// A bound, so a stream that is never cut fails the test, not hangs it.
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	t.Cleanup(cancel)
	ctx = metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+token)
	cs, err := conn.NewStream(ctx, &followDesc.Streams[0], followMethod)
	if err != nil {
		t.Fatal(err)
	}
	if err := cs.SendMsg(wrapperspb.Int64(n)); err != nil {
		t.Fatal(err)
	}
	if err := cs.CloseSend(); err != nil {
		t.Fatal(err)
	}
	return cs
}

// TestRevocationEndsStreams checks that an open stream ends UNAUTHENTICATED
// when its token is revoked: at once through the store of this process
// (the recheck is an hour, so only the push can do it), within the recheck
// through another process's store on the same file, and with a handler
// that ends quietly on cancellation; and that another token's stream goes
// on.
func TestRevocationEndsStreams(t *testing.T) {
	tests := []struct {
		name    string
		recheck time.Duration
		n       int64 // messages before waiting; negative: the handler ends quietly
		other   bool  // revoke through a second Store on the same file
	}{
		{"pushed", time.Hour, 1, false},
		{"pushed, quiet handler", time.Hour, -1, false},
		{"another process, periodic", 20 * time.Millisecond, 1, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "tokens.json")
			store := auth.OpenStore(path)
			alice, e, err := store.Issue("alice", auth.RoleUser)
			if err != nil {
				t.Fatal(err)
			}
			bob, _, _ := store.Issue("bob", auth.RoleUser)
			conn := serveFollow(t, auth.NewEphemeral(store), tt.recheck, true)
			cs, kept := follow(t, conn, alice, tt.n), follow(t, conn, bob, 1)
			var m wrapperspb.Int64Value
			if tt.n > 0 {
				if err := cs.RecvMsg(&m); err != nil {
					t.Fatalf("first message: %v", err)
				}
			}
			if err := kept.RecvMsg(&m); err != nil {
				t.Fatalf("bob's first message: %v", err)
			}
			revoker := store
			if tt.other {
				revoker = auth.OpenStore(path)
			}
			if err := revoker.Revoke(e.ID); err != nil {
				t.Fatal(err)
			}
			err = cs.RecvMsg(&m)
			if st := status.Convert(err); st.Code() != codes.Unauthenticated {
				t.Fatalf("after revocation: %v, want UNAUTHENTICATED", err)
			}
			// bob's stream is still open: nothing ends it within several
			// re-checks (a non-event, so a bounded wait).
			done := make(chan error, 1)
			go func() { done <- kept.RecvMsg(&m) }()
			select {
			case err := <-done:
				t.Fatalf("bob's stream ended with alice's revocation: %v", err)
			case <-time.After(100 * time.Millisecond):
			}
		})
	}
}

// BenchmarkWatchedStream is a follow watcher's throughput with the
// re-checks, at the default period and every millisecond (three thousand
// times as often, so their cost shows), beside the same stream unwatched:
// go test -bench WatchedStream ./auth/. Each op is one message received.
func BenchmarkWatchedStream(b *testing.B) {
	store := auth.OpenStore(filepath.Join(b.TempDir(), "tokens.json"))
	tok, _, err := store.Issue("alice", auth.RoleUser)
	if err != nil {
		b.Fatal(err)
	}
	for _, c := range []struct {
		name    string
		recheck time.Duration // 0: unwatched
	}{{"unwatched", 0}, {"watched-default", auth.DefaultRecheck}, {"watched-1ms", time.Millisecond}} {
		b.Run(c.name, func(b *testing.B) {
			conn := serveFollow(b, store, c.recheck, c.recheck > 0)
			cs := follow(b, conn, tok, int64(b.N))
			var m wrapperspb.Int64Value
			b.ResetTimer()
			for range b.N {
				if err := cs.RecvMsg(&m); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// TestChangedQuietWhileUnreadable: a store that cannot be read is reloaded
// on every Verify, which must not wake the watchers each time (they would
// spin, each re-check waking the others): once when it breaks, then not
// until it changes again.
func TestChangedQuietWhileUnreadable(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "auth", "tokens.json")
	store := auth.OpenStore(path)
	tok, _, err := store.Issue("alice", auth.RoleUser)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := store.Verify(tok); err != nil {
		t.Fatal(err)
	}
	// The store's directory becomes a file: stat fails with ENOTDIR.
	if err := os.Rename(filepath.Join(dir, "auth"), filepath.Join(dir, "gone")); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "auth"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	broke := store.Changed()
	if _, err := store.Verify(tok); err == nil || errors.Is(err, auth.ErrInvalidToken) {
		t.Fatalf("Verify of an unreadable store: %v", err)
	}
	select {
	case <-broke:
	default:
		t.Fatal("the store breaking did not wake the watchers")
	}
	quiet := store.Changed()
	for range 3 {
		_, _ = store.Verify(tok)
	}
	select {
	case <-quiet:
		t.Fatal("an unreadable store woke the watchers with nothing changed")
	default:
	}
}

// TestRevocationRacingStreamStart revokes a token while its stream opens,
// many times over: every stream must end UNAUTHENTICATED, refused at its
// start or cut at once. The recheck is an hour, so a revocation that falls
// between the stream's check and its watch's subscription, left to the
// next periodic re-check, fails the test (the stream runs to its bound).
func TestRevocationRacingStreamStart(t *testing.T) {
	store := auth.OpenStore(filepath.Join(t.TempDir(), "tokens.json"))
	conn := serveFollow(t, auth.NewEphemeral(store), time.Hour, true)
	for i := range 150 {
		tok, e, err := store.Issue("alice", auth.RoleUser)
		if err != nil {
			t.Fatal(err)
		}
		revoked := make(chan error, 1)
		go func() { revoked <- store.Revoke(e.ID) }()
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		ctx = metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+tok)
		cs, err := conn.NewStream(ctx, &followDesc.Streams[0], followMethod)
		if err == nil {
			err = cs.SendMsg(wrapperspb.Int64(1))
		}
		for err == nil {
			var m wrapperspb.Int64Value
			err = cs.RecvMsg(&m)
		}
		cancel()
		if rerr := <-revoked; rerr != nil {
			t.Fatal(rerr)
		}
		if st := status.Convert(err); st.Code() != codes.Unauthenticated {
			t.Fatalf("iteration %d: the stream ended %v, want UNAUTHENTICATED", i, err)
		}
	}
}

// revokingVerifier revokes its token right after the first check that
// passes it: the revocation then falls between a stream's check and
// anything after, the window a watch must not miss.
type revokingVerifier struct {
	*auth.Store
	id   string
	once sync.Once
}

func (v *revokingVerifier) Verify(tok string) (auth.Principal, error) {
	p, err := v.Store.Verify(tok)
	if err == nil {
		v.once.Do(func() { _ = v.Store.Revoke(v.id) })
	}
	return p, err
}

// TestRevocationJustAfterStreamCheck: a revocation right after the
// stream's credential check (before its watch could have subscribed,
// were it to subscribe late) ends the stream at once; the recheck is an
// hour.
func TestRevocationJustAfterStreamCheck(t *testing.T) {
	store := auth.OpenStore(filepath.Join(t.TempDir(), "tokens.json"))
	tok, e, err := store.Issue("alice", auth.RoleUser)
	if err != nil {
		t.Fatal(err)
	}
	conn := serveFollow(t, &revokingVerifier{Store: store, id: e.ID}, time.Hour, true)
	cs := follow(t, conn, tok, 1)
	var m wrapperspb.Int64Value
	for err == nil {
		err = cs.RecvMsg(&m)
	}
	if st := status.Convert(err); st.Code() != codes.Unauthenticated {
		t.Fatalf("the stream ended %v, want UNAUTHENTICATED", err)
	}
}

// TestWatchTokenRevokedBeforeWatch: a token revoked between the caller's
// own check and WatchToken is cut at once, not at the next re-check.
func TestWatchTokenRevokedBeforeWatch(t *testing.T) {
	store := auth.OpenStore(filepath.Join(t.TempDir(), "tokens.json"))
	tok, e, err := store.Issue("alice", auth.RoleUser)
	if err != nil {
		t.Fatal(err)
	}
	ic := &auth.Interceptor{Verifier: store, Logger: slog.New(slog.DiscardHandler), Recheck: time.Hour}
	if err := store.Revoke(e.ID); err != nil {
		t.Fatal(err)
	}
	ctx, stop := ic.WatchToken(t.Context(), tok)
	defer stop()
	select {
	case <-ctx.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("a token revoked before its watch started was not cut")
	}
	if c := context.Cause(ctx); c == nil || !strings.Contains(c.Error(), "revoked") {
		t.Fatalf("cut, but not as revoked: %v", c)
	}
}
