// Command sandbox runs the sandbox service alone, gRPC and REST.
package main

import (
	"context"
	"flag"
	"log/slog"

	"github.com/fabro-sh/fabro-go/platform/server"
	"github.com/fabro-sh/fabro-go/services/sandbox"
)

func main() {
	var cfg sandbox.Config
	server.Main("sandbox", server.Config{GRPCAddr: "127.0.0.1:7702", HTTPAddr: "127.0.0.1:7782"},
		func(fs *flag.FlagSet) {
			fs.StringVar(&cfg.DataDir, "data-dir", "", "directory for managed workspaces (<data-dir>/sandbox/workspaces); default the system temporary directory")
		},
		func(ctx context.Context, logger *slog.Logger, _ server.Config) ([]server.Service, func(), error) {
			svc, err := sandbox.New(cfg, logger)
			if err != nil {
				return nil, nil, err
			}
			// Sandboxes outlive requests: delete them once the server drained.
			return []server.Service{svc}, func() { svc.Close(context.WithoutCancel(ctx)) }, nil
		})
}
