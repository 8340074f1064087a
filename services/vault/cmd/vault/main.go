// Command vault runs the vault service on its own: provider credentials
// encrypted at rest, served over gRPC and REST.
package main

import (
	"context"
	"flag"
	"log/slog"

	"github.com/fabro-sh/fabro-go/platform/server"
	"github.com/fabro-sh/fabro-go/services/vault"
)

func main() {
	var cfg vault.Config
	server.Main("vault", server.Config{GRPCAddr: "127.0.0.1:7704", HTTPAddr: "127.0.0.1:7784"},
		func(fs *flag.FlagSet) {
			cfg.RegisterFlags(fs)
			fs.StringVar(&cfg.DataDir, "data-dir", "", "directory for the store, its audit log and generated keys (required)")
		},
		func(ctx context.Context, logger *slog.Logger) (server.Service, func(), error) {
			svc, err := vault.New(ctx, cfg, logger)
			if err != nil {
				return nil, nil, err
			}
			return svc, func() { svc.Close() }, nil
		})
}
