// Command vault runs the vault service on its own: provider credentials
// encrypted at rest, served over gRPC and REST.
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
	"github.com/fabro-sh/fabro-go/services/vault"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:])
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "vault:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("vault", flag.ContinueOnError)
	var (
		srvCfg server.Config
		logCfg logging.Config
		cfg    vault.Config
	)
	srvCfg.RegisterFlags(fs, server.Config{GRPCAddr: "127.0.0.1:7704", HTTPAddr: "127.0.0.1:7784"})
	logCfg.RegisterFlags(fs)
	cfg.RegisterFlags(fs)
	fs.StringVar(&cfg.DataDir, "data-dir", "", "directory for the store, its audit log and generated keys (required)")
	if err := envflag.Parse(fs, args, "FABRO", nil); err != nil {
		return err
	}
	logger, err := logCfg.New(os.Stderr)
	if err != nil {
		return err
	}
	svc, err := vault.New(ctx, cfg, logger)
	if err != nil {
		return err
	}
	defer svc.Close()
	return server.Run(ctx, srvCfg, logger, svc)
}
