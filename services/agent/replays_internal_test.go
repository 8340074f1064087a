package agent

import (
	"context"
	"sync"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/fabro-sh/fabro-go/platform/auth"
	"github.com/fabro-sh/fabro-go/platform/grpcerr"
)

// TestReplayLimiterPerPrincipal: 100 concurrent replays of one principal
// under a cap of 5 get 5 places and 95 RESOURCE_EXHAUSTED REPLAY_LIMIT,
// while another principal's replay is served; a released place serves the
// next.
func TestReplayLimiterPerPrincipal(t *testing.T) {
	as := func(v string) context.Context {
		p, ok := auth.ParsePrincipal(v)
		if !ok {
			t.Fatalf("principal %q", v)
		}
		return auth.WithPrincipal(context.Background(), p)
	}
	l := newReplayLimiter(5)
	alice, bob := as("user:alice"), as("user:bob")
	var (
		mu       sync.Mutex
		held     []func()
		refused  int
		wg       sync.WaitGroup
		start    = make(chan struct{})
		badCodes []error
	)
	for range 100 {
		wg.Go(func() {
			<-start
			release, err := l.acquire(alice)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				held = append(held, release)
			case status.Code(err) == codes.ResourceExhausted && grpcerr.ReasonOf(err) == reasonReplayLimit:
				refused++
			default:
				badCodes = append(badCodes, err)
			}
		})
	}
	close(start)
	wg.Wait()
	if len(held) != 5 || refused != 95 || len(badCodes) > 0 {
		t.Fatalf("%d served, %d refused, other errors %v; want 5 and 95", len(held), refused, badCodes)
	}
	release, err := l.acquire(bob)
	if err != nil {
		t.Fatalf("another principal's replay: %v", err)
	}
	release()
	held[0]()
	held[0]() // twice is once
	if _, err := l.acquire(alice); err != nil {
		t.Fatalf("after a release: %v", err)
	}
	if _, err := l.acquire(alice); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("past the cap again: %v", err)
	}
	if _, err := newReplayLimiter(-1).acquire(alice); err != nil {
		t.Fatalf("no cap: %v", err)
	}
}
