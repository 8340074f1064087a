// Command agent runs the agent service on its own: coding-agent sessions
// over gRPC and REST, with events on NATS JetStream.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/fabro-sh/fabro-go/platform/envflag"
	"github.com/fabro-sh/fabro-go/platform/logging"
	"github.com/fabro-sh/fabro-go/platform/server"
	"github.com/fabro-sh/fabro-go/services/agent"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:])
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "agent:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("agent", flag.ContinueOnError)
	var (
		srvCfg server.Config
		logCfg logging.Config
		cfg    agent.Config
	)
	srvCfg.RegisterFlags(fs, server.Config{GRPCAddr: "127.0.0.1:7703", HTTPAddr: "127.0.0.1:7783"})
	logCfg.RegisterFlags(fs)
	cfg.RegisterFlags(fs)
	fs.StringVar(&cfg.DataDir, "data-dir", "", "directory for the embedded NATS store and session records (required)")
	if err := envflag.Parse(fs, args, "FABRO", nil); err != nil {
		return err
	}
	logger, err := logCfg.New(os.Stderr)
	if err != nil {
		return err
	}
	svc, err := agent.New(ctx, cfg, logger)
	if err != nil {
		return err
	}
	defer svc.Close()
	return server.Run(ctx, srvCfg, logger, svc)
}
