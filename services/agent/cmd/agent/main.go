// Command agent runs the agent service on its own: coding-agent sessions
// over gRPC and REST, with events on NATS JetStream.
package main

import (
	"context"
	"flag"
	"log/slog"

	"github.com/fabro-sh/fabro-go/platform/auth"
	"github.com/fabro-sh/fabro-go/platform/server"
	"github.com/fabro-sh/fabro-go/services/agent"
)

func main() {
	var cfg agent.Config
	server.Main("agent", server.Config{GRPCAddr: "127.0.0.1:7703", HTTPAddr: "127.0.0.1:7783"},
		func(fs *flag.FlagSet) {
			cfg.RegisterFlags(fs)
			fs.StringVar(&cfg.DataDir, "data-dir", "", "directory for the embedded NATS store and session records (required)")
		},
		func(ctx context.Context, logger *slog.Logger, srv server.Config) ([]server.Service, func(), error) {
			cfg.NATS.Insecure = srv.Insecure // the embedded NATS listener follows the gRPC and REST ones' rule
			if !srv.NoAuth && srv.TokensFile != "" {
				// The server's store file, read anew: events credentials
				// end with the token they were issued to.
				cfg.Tokens = auth.OpenStore(srv.TokensFile)
			}
			svc, err := agent.New(ctx, cfg, logger)
			if err != nil {
				return nil, nil, err
			}
			return []server.Service{svc}, func() { svc.Close() }, nil
		})
}
