// Command router is the front door of the compose stack: one gRPC address
// and one REST address meaning what `fabro serve`'s mean, forwarding each
// gRPC call by service name and each REST request by path prefix to the
// container that serves it (platform/router).
//
//	router -grpc-route fabro.vault.v1.VaultService,fabro.auth.v1.TokenService=vault:7704 \
//	       -http-route /v1/secrets,/v1/tokens=http://vault:7784 ...
//	router -healthcheck   # exit 0 when every backend is SERVING
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"google.golang.org/grpc"

	"github.com/fabro-sh/fabro-go/platform/envflag"
	"github.com/fabro-sh/fabro-go/platform/logging"
	"github.com/fabro-sh/fabro-go/platform/router"
	"github.com/fabro-sh/fabro-go/platform/server"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:])
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "router:", err)
		os.Exit(1)
	}
}

// routes is a repeatable flag of "a,b=target" values; one value may hold
// several, separated by ";" (one environment variable).
type routes []struct {
	keys   []string
	target string
}

func (r *routes) String() string { return "" }

func (r *routes) Set(v string) error {
	for _, one := range strings.Split(v, ";") {
		one = strings.TrimSpace(one)
		if one == "" {
			continue
		}
		keys, target, ok := strings.Cut(one, "=")
		if !ok || keys == "" || target == "" {
			return fmt.Errorf("route %q: want NAME[,NAME...]=TARGET", one)
		}
		*r = append(*r, struct {
			keys   []string
			target string
		}{strings.Split(keys, ","), target})
	}
	return nil
}

func run(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("router", flag.ContinueOnError)
	var (
		grpcRoutes, httpRoutes routes
		logCfg                 logging.Config
	)
	grpcAddr := fs.String("grpc-addr", "127.0.0.1:7700", "gRPC listen address")
	httpAddr := fs.String("http-addr", "127.0.0.1:7780", "REST listen address; empty: none")
	insecure := fs.Bool("insecure", false, "allow listening on a non-loopback address (plaintext; the services behind authenticate every call)")
	check := fs.Bool("healthcheck", false, "ask the running router at -grpc-addr for its health and exit 0 when every backend is SERVING")
	fs.Var(&grpcRoutes, "grpc-route", "SERVICE[,SERVICE...]=HOST:PORT: gRPC services (full names) and the backend serving them; repeatable, or ;-separated")
	fs.Var(&httpRoutes, "http-route", "PREFIX[,PREFIX...]=http://HOST:PORT: REST path prefixes and the backend serving them; repeatable, or ;-separated")
	logCfg.RegisterFlags(fs)
	if err := envflag.Parse(fs, args, "FABRO", nil); err != nil {
		return err
	}
	if *check {
		return server.HealthCheck(ctx, *grpcAddr, false)
	}
	logger, err := logCfg.New(os.Stderr)
	if err != nil {
		return err
	}
	for _, a := range []string{*grpcAddr, *httpAddr} {
		if a != "" && !*insecure && !loopback(a) {
			return fmt.Errorf("listening on %s needs -insecure (FABRO_INSECURE): the router speaks plaintext", a)
		}
	}
	var gr []router.GRPCRoute
	for _, r := range grpcRoutes {
		gr = append(gr, router.GRPCRoute{Services: r.keys, Addr: r.target})
	}
	var hr []router.HTTPRoute
	for _, r := range httpRoutes {
		u, err := url.Parse(r.target)
		if err != nil {
			return fmt.Errorf("-http-route %s: %w", r.target, err)
		}
		hr = append(hr, router.HTTPRoute{Prefixes: r.keys, Backend: u})
	}
	rt, err := router.New(gr, logger)
	if err != nil {
		return err
	}
	defer rt.Close()
	gs := grpc.NewServer(rt.ServerOptions()...)
	rt.Register(gs)
	gl, err := net.Listen("tcp", *grpcAddr)
	if err != nil {
		return err
	}
	errc := make(chan error, 2)
	go func() { errc <- gs.Serve(gl) }() // ends with GracefulStop below
	var hs *http.Server
	if *httpAddr != "" {
		h, err := rt.HTTPHandler(hr)
		if err != nil {
			gs.Stop()
			return err
		}
		hl, err := net.Listen("tcp", *httpAddr)
		if err != nil {
			gs.Stop()
			return err
		}
		hs = &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
		go func() { errc <- hs.Serve(hl) }() // ends with Shutdown below
	}
	logger.InfoContext(ctx, "router serving", "grpc_addr", gl.Addr().String(), "http_addr", *httpAddr,
		"grpc_routes", len(gr), "http_routes", len(hr))
	select {
	case <-ctx.Done():
	case err := <-errc:
		logger.ErrorContext(ctx, "router listener failed", "error", err)
	}
	// Drain: in-flight calls (agent streams among them) get 10 s.
	drain, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if hs != nil {
		_ = hs.Shutdown(drain)
	}
	done := make(chan struct{})
	go func() { gs.GracefulStop(); close(done) }() // ends when calls finish, or by Stop
	select {
	case <-done:
	case <-drain.Done():
		gs.Stop()
		<-done
	}
	if ctx.Err() == nil {
		return errors.New("a listener failed")
	}
	return nil
}

func loopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
