// Command llmgateway serves the LLM gateway: gRPC on -grpc-addr and its
// REST mapping on -http-addr. Every flag can also be set from the
// environment as FABRO_<FLAG>, e.g. FABRO_VAULT_ADDR.
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
	"github.com/fabro-sh/fabro-go/services/llmgateway"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "llmgateway:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("llmgateway", flag.ContinueOnError)
	var (
		srvCfg server.Config
		logCfg logging.Config
		gwCfg  llmgateway.Config
	)
	srvCfg.RegisterFlags(fs, server.Config{GRPCAddr: "127.0.0.1:7701", HTTPAddr: "127.0.0.1:7781"})
	logCfg.RegisterFlags(fs)
	gwCfg.RegisterFlags(fs)
	if err := envflag.Parse(fs, args, "FABRO", nil); err != nil {
		return err
	}
	logger, err := logCfg.New(os.Stderr)
	if err != nil {
		return err
	}
	gw, err := llmgateway.New(ctx, gwCfg, logger)
	if err != nil {
		return err
	}
	defer gw.Close()
	return server.Run(ctx, srvCfg, logger, gw)
}
