// Command fakeprovider serves the five LLM provider wire protocols from a
// script, for offline demos and load tests: point the gateway's providers
// at it with the catalog overlay it prints (-print-overlay).
//
//	fakeprovider -addr 127.0.0.1:7790                # endless demo replies
//	fakeprovider -addr 127.0.0.1:7790 -script t.json # turns in order, then the demo
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/fabro-sh/fabro-go/services/llmgateway/fakeprovider"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "fakeprovider:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("fakeprovider", flag.ContinueOnError)
	addr := fs.String("addr", "127.0.0.1:7790", "listen address")
	script := fs.String("script", "", "JSON file with a list of turns, answered in order; then the demo reply")
	printOverlay := fs.Bool("print-overlay", false, "print a gateway catalog overlay pointing every provider here, then serve")
	check := fs.Bool("healthcheck", false, "ask the running fake provider at -addr for an HTTP answer and exit 0 when it gives one (container healthchecks)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *check {
		return healthcheck(ctx, *addr)
	}
	var turns []fakeprovider.Turn
	if *script != "" {
		var err error
		if turns, err = fakeprovider.LoadScript(*script); err != nil {
			return err
		}
	}
	s := fakeprovider.New()
	queue := turns
	s.Script(func(r fakeprovider.Request) fakeprovider.Turn {
		// Script replaces the queue, so the scripted turns are consumed here.
		if len(queue) > 0 {
			t := queue[0]
			queue = queue[1:]
			return t
		}
		return fakeprovider.Demo(r)
	})
	l, err := fakeprovider.Listen(*addr, s)
	if err != nil {
		return err
	}
	logger := slog.New(slog.NewTextHandler(os.Stderr, nil))
	logger.Info("fakeprovider serving", "url", l.URL, "scripted_turns", len(turns))
	if *printOverlay {
		os.Stdout.Write(append(fakeprovider.CatalogOverlay(l.URL), '\n'))
	}
	<-ctx.Done()
	shut, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return l.Shutdown(shut)
}

// healthcheck GETs / of the fake provider listening at addr (an unspecified
// host means this host): any answer but a server error is healthy.
func healthcheck(ctx context.Context, addr string) error {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return err
	}
	if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
		host = "127.0.0.1"
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+net.JoinHostPort(host, port)+"/", nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("healthcheck: %w", err)
	}
	resp.Body.Close()
	if resp.StatusCode >= 500 {
		return fmt.Errorf("healthcheck: %s", resp.Status)
	}
	return nil
}
