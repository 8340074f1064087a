// Command sandbox runs the sandbox service alone, gRPC and REST.
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
	"github.com/fabro-sh/fabro-go/services/sandbox"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "sandbox:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("sandbox", flag.ContinueOnError)
	var (
		srvCfg server.Config
		logCfg logging.Config
		cfg    sandbox.Config
	)
	srvCfg.RegisterFlags(fs, server.Config{GRPCAddr: "127.0.0.1:7702", HTTPAddr: "127.0.0.1:7782"})
	logCfg.RegisterFlags(fs)
	fs.StringVar(&cfg.DataDir, "data-dir", "", "directory for managed workspaces (<data-dir>/sandbox/workspaces); default the system temporary directory")
	if err := envflag.Parse(fs, args, "FABRO", nil); err != nil {
		return err
	}
	logger, err := logCfg.New(os.Stderr)
	if err != nil {
		return err
	}
	svc, err := sandbox.New(cfg, logger)
	if err != nil {
		return err
	}
	defer svc.Close(context.WithoutCancel(ctx))
	return server.Run(ctx, srvCfg, logger, svc)
}
