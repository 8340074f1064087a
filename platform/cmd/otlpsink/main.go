// Command otlpsink is a small OpenTelemetry collector stand-in for local
// use and compose: it receives traces and metrics over OTLP/gRPC and
// OTLP/HTTP, prints one line per span, keeps the last spans in memory and
// serves them back by trace:
//
//	otlpsink -grpc-addr :4317 -http-addr :4318
//	curl -s localhost:4318/api/traces            # trace ids, root span, span count
//	curl -s localhost:4318/api/traces/<trace_id> # the spans of one trace
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/fabro-sh/fabro-go/platform/telemetry/otlpsink"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "otlpsink:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("otlpsink", flag.ContinueOnError)
	grpcAddr := fs.String("grpc-addr", "127.0.0.1:4317", "OTLP/gRPC listen address")
	httpAddr := fs.String("http-addr", "127.0.0.1:4318", "OTLP/HTTP and query API listen address")
	maxSpans := fs.Int("max-spans", 100000, "spans kept in memory (the oldest go first)")
	quiet := fs.Bool("quiet", false, "do not print each span")
	check := fs.Bool("healthcheck", false, "ask the running sink's query API at -http-addr and exit 0 when it answers (container healthchecks)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *check {
		return healthcheck(ctx, *httpAddr)
	}
	logger := slog.New(slog.NewTextHandler(os.Stderr, nil))
	var onSpan func(otlpsink.Span)
	if !*quiet {
		enc := json.NewEncoder(os.Stdout)
		onSpan = func(s otlpsink.Span) {
			_ = enc.Encode(struct {
				Service, Name, TraceID, SpanID, Parent string
				DurationMS                             float64
				Error                                  string `json:",omitempty"`
			}{s.Service, s.Name, s.TraceID, s.SpanID, s.ParentSpanID, float64(s.Duration.Microseconds()) / 1000, s.StatusError})
		}
	}
	l, err := otlpsink.Listen(otlpsink.New(*maxSpans, onSpan), *grpcAddr, *httpAddr)
	if err != nil {
		return err
	}
	defer l.Close()
	logger.Info("otlpsink serving", "grpc_addr", l.GRPCAddr, "http_addr", l.HTTPAddr)
	<-ctx.Done()
	return nil
}

// healthcheck GETs the query API of the sink listening at addr (an
// unspecified host means this host).
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
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+net.JoinHostPort(host, port)+"/api/traces", nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("healthcheck: %w", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("healthcheck: %s", resp.Status)
	}
	return nil
}
