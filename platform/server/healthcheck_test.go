package server

import (
	"context"
	"errors"
	"flag"
	"log/slog"
	"net"
	"testing"
	"time"

	"github.com/fabro-sh/fabro-go/platform/testkit"
)

// TestHealthCheckMode checks -healthcheck: 0 (nil) against a SERVING server
// named by its listen address (0.0.0.0 means this host), an error against
// a draining one and against a port where nothing listens.
func TestHealthCheckMode(t *testing.T) {
	build := func(context.Context, *slog.Logger, Config) ([]Service, func(), error) {
		t.Error("-healthcheck built the services")
		return nil, func() {}, nil
	}
	check := func(addr string) error {
		return runMain(t.Context(), "test", []string{"-healthcheck", "-grpc-addr", addr}, Config{}, func(*flag.FlagSet) {}, build)
	}
	h := start(t, Config{})
	_, port, _ := net.SplitHostPort(h.srv.GRPCAddr())
	if err := check("0.0.0.0:" + port); err != nil {
		t.Errorf("healthcheck of a serving server: %v", err)
	}

	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := l.Addr().String()
	l.Close()
	if err := check(closed); err == nil {
		t.Errorf("healthcheck of %s (nothing listening) passed", closed)
	}

	d := start(t, Config{DrainDelay: time.Minute})
	drain, stop := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { // NOT_SERVING for the drain delay, which stop ends
		defer close(done)
		_ = d.srv.Shutdown(drain)
	}()
	testkit.Eventually(t, 10*time.Second, func() error {
		if check(d.srv.GRPCAddr()) == nil {
			return errors.New("the health check still passes while draining")
		}
		return nil
	})
	stop()
	<-done
}
