// Command sandbox runs the sandbox service alone, gRPC and REST.
package main

import (
	"context"
	"flag"
	"log/slog"

	"github.com/fabro-sh/fabro-go/platform/server"
	"github.com/fabro-sh/fabro-go/services/sandbox"
	"github.com/fabro-sh/fabro-go/services/sandbox/driver/docker"
)

func main() {
	var cfg sandbox.Config
	server.Main("sandbox", server.Config{GRPCAddr: "127.0.0.1:7702", HTTPAddr: "127.0.0.1:7782"},
		func(fs *flag.FlagSet) {
			fs.StringVar(&cfg.DataDir, "data-dir", "", "directory for the durable registry of sandboxes and their managed workspaces (<data-dir>/sandbox); empty keeps sandboxes in memory, workspaces in the system temporary directory")
			fs.StringVar(&cfg.DefaultDriver, "sandbox-driver", "local", "the driver used when a spec names none: local or docker")
			fs.StringVar(&cfg.DockerImage, "docker-image", docker.DefaultImage, "the docker driver's default image (built by `make sandbox-base`; never pulled)")
			fs.StringVar(&cfg.PluginDir, "plugin-dir", "", "directory of driver plugins: fabro-sandbox-NAME binaries and their SHA256SUMS (docs/plugins.md)")
		},
		func(ctx context.Context, logger *slog.Logger) (server.Service, func(), error) {
			svc, err := sandbox.New(cfg, logger)
			if err != nil {
				return nil, nil, err
			}
			// Sandboxes outlive requests: once the server drained, delete them
			// (in memory) or leave them for the next start (durable).
			return svc, func() { svc.Close(context.WithoutCancel(ctx)) }, nil
		})
}
